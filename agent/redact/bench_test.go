package redact

import (
	"bytes"
	"fmt"
	"testing"
)

// BenchmarkStream: ten secrets over 32 KiB writes of log-like text.
func BenchmarkStream(b *testing.B) {
	var secrets []Secret
	for i := range 10 {
		secrets = append(secrets, Secret{Name: fmt.Sprintf("s%d", i), Value: []byte(fmt.Sprintf("secret-value-%d-xyzzy", i))})
	}
	r := New(secrets)
	chunk := bytes.Repeat([]byte("2026-12-01T10:00:00Z INFO request id=4f3a9 path=/api/v1/items status=200 took=3ms\n"), 400)[:32<<10]
	s := r.Stream()
	b.SetBytes(int64(len(chunk)))
	var out []byte
	for b.Loop() {
		out = s.Write(out[:0], chunk)
	}
}
