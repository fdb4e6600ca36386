package logarchive

import (
	"bytes"
	"errors"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// FuzzDecode reads archives a fuzzer makes: an archive comes back from the
// object store or a database row, and a damaged one must be an ErrDamaged
// error, never a panic, a hang or a log in the wrong order. With wrap, the
// fuzzer's bytes are the uncompressed body, compressed here, so that it
// reaches the record parsing behind zstd's checks. `make fuzz` runs it.
func FuzzDecode(f *testing.F) {
	var valid bytes.Buffer
	e, err := NewEncoder(&valid)
	if err != nil {
		f.Fatal(err)
	}
	for i, ev := range sampleEvents() {
		if err := e.Write(uint64(i+1), ev); err != nil {
			f.Fatal(err)
		}
	}
	if err := e.Close(); err != nil {
		f.Fatal(err)
	}
	zr, err := zstd.NewReader(nil)
	if err != nil {
		f.Fatal(err)
	}
	body, err := zr.DecodeAll(valid.Bytes(), nil)
	zr.Close()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(valid.Bytes(), false)
	f.Add(valid.Bytes()[:len(valid.Bytes())/2], false)
	f.Add(body, true)
	f.Add(body[:len(body)-1], true)
	f.Add([]byte(Magic+"\x01\x00\x00"), true)
	f.Add([]byte(Magic+"\x02\x00\x00"), true)
	zw, err := zstd.NewWriter(nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte, wrap bool) {
		if wrap {
			b = zw.EncodeAll(b, nil)
		}
		seqs, _, err := decodeAll(b)
		if err != nil {
			if !errors.Is(err, ErrDamaged) {
				t.Fatalf("error %v is not ErrDamaged", err)
			}
			return
		}
		for i := 1; i < len(seqs); i++ {
			if seqs[i] <= seqs[i-1] {
				t.Fatalf("positions %v do not increase", seqs)
			}
		}
	})
}
