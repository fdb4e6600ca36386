package redact

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"net/url"
	"strings"
	"testing"
)

// streamAll writes chunks one by one and flushes.
func streamAll(r *Redactor, chunks ...[]byte) string {
	s := r.Stream()
	var out []byte
	for _, c := range chunks {
		out = s.Write(out, c)
		if s.Held() > r.MaxHold() {
			panic("held more than MaxHold")
		}
	}
	return string(s.Flush(out))
}

// TestEveryFormSplitAtEveryOffset: each form a tool prints a secret in, put
// between other output and split in two writes at every byte, comes out as
// exactly the text around it with [redacted:NAME] in its place.
func TestEveryFormSplitAtEveryOffset(t *testing.T) {
	value := "hunter2-s3cr3t/+?&=é"
	r := New([]Secret{{Name: "db-password", Value: []byte(value)}})
	forms := map[string]string{
		"raw":             value,
		"base64":          base64.StdEncoding.EncodeToString([]byte(value)),
		"base64 unpadded": base64.RawStdEncoding.EncodeToString([]byte(value)),
		"base64url":       base64.URLEncoding.EncodeToString([]byte(value)),
		"base64url raw":   base64.RawURLEncoding.EncodeToString([]byte(value)),
		"query escaped":   url.QueryEscape(value),
		"hex":             hex.EncodeToString([]byte(value)),
		"HEX":             strings.ToUpper(hex.EncodeToString([]byte(value))),
	}
	for name, form := range forms {
		in := "before " + form + " after\n"
		want := "before [redacted:db-password] after\n"
		for cut := 0; cut <= len(in); cut++ {
			if got := streamAll(r, []byte(in[:cut]), []byte(in[cut:])); got != want {
				t.Fatalf("%s split at %d: got %q, want %q", name, cut, got, want)
			}
		}
		// And one byte a write.
		var chunks [][]byte
		for i := range len(in) {
			chunks = append(chunks, []byte{in[i]})
		}
		if got := streamAll(r, chunks...); got != want {
			t.Fatalf("%s one byte a write: got %q, want %q", name, got, want)
		}
	}
}

// TestBase64InsideALongerStream: a secret base64-encoded as part of a longer
// value (as in "user:password" of a basic auth header) at each of the three
// byte offsets has the part of the encoding that only it determines
// replaced, so the value cannot be decoded from what is left.
func TestBase64InsideALongerStream(t *testing.T) {
	value := []byte("s3cr3t-value")
	r := New([]Secret{{Name: "token", Value: value}})
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
		for k := range 3 {
			for tail := range 3 {
				plain := append(append(bytes.Repeat([]byte{'u'}, k+3), value...), bytes.Repeat([]byte{'!'}, tail)...)
				encoded := enc.EncodeToString(plain)
				got := streamAll(r, []byte(encoded))
				if !strings.Contains(got, "[redacted:token]") {
					t.Fatalf("offset %d tail %d: %q not redacted in %q", k, tail, encoded, got)
				}
				// What is left decodes to no more than 2 bytes of the value on either side.
				left := strings.ReplaceAll(got, "[redacted:token]", "")
				if len(left) > len(encoded)-len(value)*4/3+4 {
					t.Fatalf("offset %d tail %d: too much left: %q of %q", k, tail, got, encoded)
				}
			}
		}
	}
}

// TestEchoBase64: what `echo -n $S | base64` prints is redacted with its
// padding and the newline kept.
func TestEchoBase64(t *testing.T) {
	for _, v := range []string{"abcdef", "abcdefg", "abcdefgh"} {
		r := New([]Secret{{Name: "s", Value: []byte(v)}})
		in := base64.StdEncoding.EncodeToString([]byte(v)) + "\n"
		if got := streamAll(r, []byte(in)); got != "[redacted:s]\n" {
			t.Fatalf("%q: got %q", v, got)
		}
	}
}

// TestLongestMatchFirst: where one secret's value contains another's, the
// longer is the one replaced.
func TestLongestMatchFirst(t *testing.T) {
	r := New([]Secret{{Name: "short", Value: []byte("abcdef")}, {Name: "long", Value: []byte("abcdefghij")}})
	for cut := 0; cut <= 12; cut++ {
		in := "xabcdefghijx"
		if got := streamAll(r, []byte(in[:cut]), []byte(in[cut:])); got != "x[redacted:long]x" {
			t.Fatalf("split at %d: %q", cut, got)
		}
	}
	if got := streamAll(r, []byte("xabcdefghx")); got != "x[redacted:short]ghx" {
		t.Fatalf("the shorter alone: %q", got)
	}
	// The longer one cut short by the end of the stream.
	if got := streamAll(r, []byte("abcdefghi")); got != "[redacted:short]ghi" {
		t.Fatalf("at the end: %q", got)
	}
}

// TestShortValuesAndNoSecrets: values under MinLen are not redacted, and a
// redactor with nothing to redact is nil and passes output through.
func TestShortValuesAndNoSecrets(t *testing.T) {
	r := New([]Secret{{Name: "pin", Value: []byte("12345")}})
	if r != nil {
		t.Fatalf("a redactor of only short values is not nil")
	}
	if got := streamAll(r, []byte("12345 and more")); got != "12345 and more" {
		t.Fatalf("got %q", got)
	}
	if got := r.String("x 12345"); got != "x 12345" {
		t.Fatalf("String: %q", got)
	}
}

// TestHoldsBackOnlyWhatMayBeASecret: output that cannot be the start of a
// secret is handed on at once, so a task's last line is not kept from its
// reader until the task writes more.
func TestHoldsBackOnlyWhatMayBeASecret(t *testing.T) {
	r := New([]Secret{{Name: "s", Value: []byte("zzzzzzzzqq")}})
	s := r.Stream()
	if got := string(s.Write(nil, []byte("hello\n"))); got != "hello\n" || s.Held() != 0 {
		t.Fatalf("got %q, held %d", got, s.Held())
	}
	if got := string(s.Write(nil, []byte("ab zzzz"))); got != "ab " || s.Held() != 4 {
		t.Fatalf("got %q, held %d", got, s.Held())
	}
	if got := string(s.Write(nil, []byte("zzzzqq!"))); got != "[redacted:s]!" || s.Held() != 0 {
		t.Fatalf("got %q, held %d", got, s.Held())
	}
	if got := string(s.Write(nil, []byte("zzzz"))); got != "" || s.Held() != 4 {
		t.Fatalf("got %q, held %d", got, s.Held())
	}
	if got := string(s.Flush(nil)); got != "zzzz" {
		t.Fatalf("flush: %q", got)
	}
}

// TestLinesOfAMultiLineValue: a key file's value is redacted whole where it
// is printed whole, and line by line where it is not.
func TestLinesOfAMultiLineValue(t *testing.T) {
	key := "-----BEGIN KEY-----\r\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\r\nabc\r\n-----END KEY-----\r\n"
	r := New([]Secret{{Name: "deploy-key", Value: []byte(key)}})
	if got := r.String("x" + key + "y"); got != "x[redacted:deploy-key]y" {
		t.Fatalf("whole: %q", got)
	}
	if got := r.String("line: MIIEvQIBADANBgkqhkiG9w0BAQEFAASC\nabc\n"); got != "line: [redacted:deploy-key]\nabc\n" {
		t.Fatalf("a line: %q", got)
	}
}

// TestLargeValueRedactedAsItIs: a value past MaxEncoded is redacted as it
// is, without its encodings.
func TestLargeValueRedactedAsItIs(t *testing.T) {
	v := bytes.Repeat([]byte("0123456789abcdef"), MaxEncoded/16+1)
	r := New([]Secret{{Name: "big", Value: v}})
	if got := streamAll(r, []byte("<"), v[:1000], v[1000:], []byte(">")); got != "<[redacted:big]>" {
		t.Fatalf("got %d bytes: %.80q", len(got), got)
	}
	if r.MaxHold() != len(v)-1 {
		t.Fatalf("MaxHold %d: encodings were added", r.MaxHold())
	}
}
