package main

import (
	"bytes"
	"fmt"
	"math/rand/v2"
)

// corpusBytes is the text every task's output is cut from: big enough that
// tasks printing at the same time print different bytes.
const corpusBytes = 4 << 20

// corpus is deterministic build-log-like text. It matters what the bytes
// are: Postgres compresses a bytea value over 2 KiB (TOAST, pglz) before it
// stores it, so zeros would flatter both the product and the COPY reference,
// and random bytes would make pglz give up at once. Text that compresses
// like a real log costs what a real log costs.
type corpus struct{ text []byte }

func newCorpus() *corpus {
	r := rand.New(rand.NewPCG(17, 3))
	pkgs := []string{"scheduler", "ingest", "archive", "nodes", "runner", "executor", "spool", "auth", "metrics", "storage"}
	words := []string{"Submit", "Assign", "Ack", "Retry", "Timeout", "Cancel", "Drain", "Lease", "Resume", "Flood"}
	var b bytes.Buffer
	for n := 0; b.Len() < corpusBytes; n++ {
		p, w := pkgs[r.IntN(len(pkgs))], words[r.IntN(len(words))]
		switch r.IntN(4) {
		case 0:
			fmt.Fprintf(&b, "[%5d] Building CXX object src/%s/CMakeFiles/%s.dir/%s_%d.cc.o\n", n, p, p, w, r.IntN(90))
		case 1:
			fmt.Fprintf(&b, "=== RUN   Test%s%s/case_%d\n", w, words[r.IntN(len(words))], r.IntN(1000))
		case 2:
			fmt.Fprintf(&b, "--- PASS: Test%s (%.2fs) %08x\n", w, r.Float64()*3, r.Uint32())
		default:
			fmt.Fprintf(&b, "ok  \tgithub.com/acme/%s/%s\t%.3fs\tcoverage: %.1f%% of statements\n", p, w, r.Float64()*20, 40+r.Float64()*60)
		}
	}
	return &corpus{text: b.Bytes()[:corpusBytes]}
}

// chunk is n bytes of the output of the ordinal-th task from offset off: the
// corpus read round from a start picked by the ordinal. It shares the
// corpus's memory unless it wraps round the end.
func (c *corpus) chunk(ordinal, off int64, n int) []byte {
	at := int((uint64(ordinal)*2654435761 + uint64(off)) % uint64(len(c.text)))
	if at+n <= len(c.text) {
		return c.text[at : at+n : at+n]
	}
	out := make([]byte, 0, n)
	out = append(out, c.text[at:]...)
	for len(out) < n {
		out = append(out, c.text[:min(n-len(out), len(c.text))]...)
	}
	return out
}
