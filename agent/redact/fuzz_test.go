package redact

import (
	"bytes"
	"regexp"
	"testing"
)

// FuzzStream: for any secrets, any output and any way of cutting the output
// into writes, no secret's value (in any form New looks for) is left in what
// a Stream hands on, and output that holds none of them is handed on byte
// for byte.
func FuzzStream(f *testing.F) {
	f.Add([]byte("hunter2"), []byte("s3cr3t!!"), []byte("x hunter2 aHVudGVyMg== 68756e74657232 y"), []byte{3, 1, 7})
	f.Add([]byte("abcdef"), []byte("abcdefghij"), []byte("abcdefghiabcdefghij"), []byte{1, 1, 1, 1})
	f.Add([]byte("passw0rd"), []byte("zz"), []byte("nothing here at all"), []byte{})
	tokens := regexp.MustCompile(`\[redacted:[ab]\]`)
	f.Fuzz(func(t *testing.T, a, b, out, cuts []byte) {
		// Secrets have no '[' or NUL, so that a secret found in the output
		// is one left there, not one made of a [redacted:…] and the bytes
		// beside it: each replacement becomes a NUL before looking.
		for _, v := range [][]byte{a, b} {
			if bytes.ContainsAny(v, "[\x00") {
				return
			}
		}
		r := New([]Secret{{Name: "a", Value: a}, {Name: "b", Value: b}})
		var pieces [][]byte
		rest := out
		for _, c := range cuts {
			n := min(int(c), len(rest))
			pieces = append(pieces, rest[:n])
			rest = rest[n:]
		}
		pieces = append(pieces, rest)
		got := []byte(streamAll(r, pieces...))

		var forms []string
		for _, v := range [][]byte{a, b} {
			if len(v) < MinLen {
				continue
			}
			for _, form := range Patterns(v) {
				if len(form) >= MinLen {
					forms = append(forms, form)
				}
			}
		}
		plain := tokens.ReplaceAll(got, []byte{0})
		for _, form := range forms {
			if bytes.Contains(plain, []byte(form)) {
				t.Fatalf("%q left in the output %q of %q", form, got, out)
			}
		}
		clean := true
		for _, form := range forms {
			if bytes.Contains(out, []byte(form)) {
				clean = false
			}
		}
		if clean && !bytes.Equal(got, out) {
			t.Fatalf("output without secrets changed: %q became %q", out, got)
		}
		if whole := r.String(string(out)); whole != string(got) {
			t.Fatalf("streamed %q, whole %q", got, whole)
		}
	})
}
