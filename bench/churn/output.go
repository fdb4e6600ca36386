package main

import (
	"bytes"
	"fmt"
	"math/rand/v2"

	"github.com/klauspost/compress/zstd"
)

// corpusBytes is the size of the text every task's output is cut from. Big
// enough that two tasks rarely print the same window; small enough to build
// in a few milliseconds.
const corpusBytes = 4 << 20

// corpus is deterministic build-log text: compiler lines, warnings, test
// results with timings. Every run makes the same bytes (a fixed seed), and
// it compresses the way a real build log does — repeated paths and phrases
// with numbers that vary — not like zeros (which would flatter the archive)
// or random bytes (which would punish it).
type corpus struct {
	text []byte
	// lines are the offsets of line starts, so a task's window begins on
	// one.
	lines []int
}

func newCorpus() *corpus {
	r := rand.New(rand.NewPCG(16, 1_000_000))
	pick := func(ws []string) string { return ws[r.IntN(len(ws))] }
	pkgs := []string{"scheduler", "placement", "ingest", "archive", "retention", "artifacts", "nodes",
		"tailnet", "secrets", "registry", "auth", "metrics", "storage", "runner", "executor", "spool"}
	files := []string{"main", "server", "client", "store", "queue", "batch", "limits", "config", "stream",
		"session", "lease", "notify", "codec", "buffer", "cache", "index", "worker", "pool"}
	vars := []string{"err", "ctx", "n", "buf", "i", "resp", "tmp", "ok", "count", "offset"}
	tests := []string{"Submit", "Assign", "Ack", "Retry", "Timeout", "Cancel", "Archive", "Expire",
		"Reconnect", "Flood", "Upload", "Download", "Resume", "Drain", "Lease", "Failover"}
	var b bytes.Buffer
	c := &corpus{}
	step, steps := 0, 1800
	for b.Len() < corpusBytes {
		c.lines = append(c.lines, b.Len())
		sec := float64(b.Len()) / 40_000
		switch k := r.IntN(20); {
		case k < 8:
			step = step%steps + 1
			p, f := pick(pkgs), pick(files)
			fmt.Fprintf(&b, "[%4d/%d] Building CXX object src/%s/CMakeFiles/%s.dir/%s_%d.cc.o\n", step, steps, p, p, f, r.IntN(40))
		case k < 11:
			p := pick(pkgs)
			fmt.Fprintf(&b, "  CC      drivers/%s/%s_%02d.o\n", p, pick(files), r.IntN(64))
		case k < 12:
			p, f := pick(pkgs), pick(files)
			fmt.Fprintf(&b, "src/%s/%s.cc:%d:%d: warning: unused variable '%s' [-Wunused-variable]\n", p, f, 10+r.IntN(900), 1+r.IntN(40), pick(vars))
		case k < 16:
			fmt.Fprintf(&b, "=== RUN   Test%s%s/case_%d\n", pick(tests), pick(tests), r.IntN(100))
		case k < 19:
			fmt.Fprintf(&b, "--- PASS: Test%s%s (%.2fs)\n", pick(tests), pick(tests), r.Float64()*3)
		default:
			fmt.Fprintf(&b, "ok  \tgithub.com/acme/%s/%s\t%.3fs\tcoverage: %.1f%% of statements [%08.3f]\n", pick(pkgs), pick(files), r.Float64()*20, 40+r.Float64()*60, sec)
		}
	}
	c.text = b.Bytes()
	return c
}

// output is the k-th task's output: a header naming the task, then size
// bytes (header included) of the corpus from a line start picked by k.
// The body shares the corpus's memory; only the header is new.
func (c *corpus) output(k int64, task string, size int) (header, body []byte) {
	header = fmt.Appendf(nil, "+ podium task %s: make -j8 all test (#%d)\n", task, k)
	line := c.lines[int(uint64(k)*2654435761%uint64(len(c.lines)))]
	n := max(0, size-len(header))
	if line+n > len(c.text) {
		line = len(c.text) - n
	}
	return header, c.text[line : line+n]
}

// ratio is how much zstd (the archive's codec, default level) shrinks a
// sample of tasks' outputs, each compressed on its own as the archive does.
func (c *corpus) ratio(size, sample int) float64 {
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		return 0
	}
	defer enc.Close()
	var raw, packed int
	for k := range sample {
		h, b := c.output(int64(k), "d4lq1ut0g5vm6rd2k0ag", size)
		all := append(h, b...)
		raw += len(all)
		packed += len(enc.EncodeAll(all, nil))
	}
	return float64(raw) / float64(max(1, packed))
}
