package benchkit

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// MemProfile is where a coordinator's memory goes, read from its profiler
// (--debug-listen): a figure of RSS per node means little without it.
type MemProfile struct {
	Goroutines int
	// Groups are the most numerous kinds of goroutine: how many, and the
	// function each started in.
	Groups []GoroutineGroup
	// HeapInuse, StackInuse and Sys are the runtime's own counts (bytes).
	HeapInuse, StackInuse, Sys uint64
	// HeapFile is the heap profile, kept for `go tool pprof`.
	HeapFile string
	// Top is `go tool pprof -top` of the heap in use, its first lines.
	Top []string
}

// GoroutineGroup is goroutines with the same stack.
type GoroutineGroup struct {
	Count int
	Func  string // the function the goroutine started in, and where it waits
}

// ReadMemProfile takes the heap and goroutine profiles of the process whose
// profiler listens at debugAddr (host:port), saving the heap profile in dir
// under name.
func ReadMemProfile(ctx context.Context, debugAddr, dir, name string) (MemProfile, error) {
	var p MemProfile
	get := func(path string) ([]byte, error) { return DebugGet(ctx, debugAddr, path, time.Minute) }
	// gc=1 collects first, so the profile counts what is live.
	heap, err := get("/debug/pprof/heap?gc=1")
	if err != nil {
		return p, err
	}
	p.HeapFile = filepath.Join(dir, name+".heap.pb.gz")
	if err := os.WriteFile(p.HeapFile, heap, 0o644); err != nil {
		return p, err
	}
	stats, err := get("/debug/pprof/heap?debug=1")
	if err != nil {
		return p, err
	}
	sc := bufio.NewScanner(strings.NewReader(string(stats)))
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimPrefix(sc.Text(), "# "), " = ")
		if !ok {
			continue
		}
		n, _ := strconv.ParseUint(strings.Fields(v + " x")[0], 10, 64)
		switch k {
		case "HeapInuse":
			p.HeapInuse = n
		case "Stack":
			p.StackInuse = n
		case "Sys":
			p.Sys = n
		}
	}
	gr, err := get("/debug/pprof/goroutine?debug=1")
	if err != nil {
		return p, err
	}
	p.Goroutines, p.Groups = goroutineGroups(string(gr))
	out, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-sample_index=inuse_space", "-nodecount=15", p.HeapFile).Output()
	if err == nil {
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		// Past pprof's header (file, type, time, totals) come the rows.
		for i, l := range lines {
			if strings.HasPrefix(strings.TrimSpace(l), "flat") {
				lines = lines[i:]
				break
			}
		}
		p.Top = lines
	}
	return p, nil
}

// DebugGet reads path (e.g. /debug/pprof/heap) from the profiler a
// coordinator serves at debugAddr (its --debug-listen), within timeout.
func DebugGet(ctx context.Context, debugAddr, path string, timeout time.Duration) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+debugAddr+path, nil)
	if err != nil {
		return nil, err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("read the coordinator's profile %s: %w", path, err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("read the coordinator's profile %s: %s", path, res.Status)
	}
	return io.ReadAll(res.Body)
}

// CPUProfile takes a CPU profile of d from the coordinator whose profiler
// listens at debugAddr and writes it to file, for `go tool pprof`.
func CPUProfile(ctx context.Context, debugAddr string, d time.Duration, file string) error {
	secs := max(1, int(d.Seconds()))
	b, err := DebugGet(ctx, debugAddr, fmt.Sprintf("/debug/pprof/profile?seconds=%d", secs), time.Duration(secs)*time.Second+time.Minute)
	if err != nil {
		return err
	}
	return os.WriteFile(file, b, 0o644)
}

// goroutineGroups reads the debug=1 goroutine profile: a total, then one
// block per distinct stack, "N @ addresses" and its frames, innermost first.
func goroutineGroups(text string) (int, []GoroutineGroup) {
	total := 0
	var groups []GoroutineGroup
	for i, block := range strings.Split(text, "\n\n") {
		lines := strings.Split(strings.TrimSpace(block), "\n")
		if i == 0 {
			if f := strings.Fields(lines[0]); len(f) > 0 {
				total, _ = strconv.Atoi(f[len(f)-1])
				lines = lines[1:]
			}
		}
		if len(lines) == 0 {
			continue
		}
		count, err := strconv.Atoi(strings.Fields(lines[0] + " x")[0])
		if err != nil {
			continue
		}
		var frames []string
		for _, l := range lines[1:] {
			if f := strings.Fields(l); len(f) >= 3 && f[0] == "#" {
				name, _, _ := strings.Cut(f[2], "+0x")
				frames = append(frames, name)
			}
		}
		if len(frames) == 0 {
			continue
		}
		// Where it started, and the first frame of its own code it waits in.
		desc := frames[len(frames)-1]
		for _, fr := range frames {
			if !strings.HasPrefix(fr, "runtime.") && !strings.HasPrefix(fr, "internal/") && !strings.HasPrefix(fr, "sync.") {
				if fr != desc {
					desc += " ← " + fr
				}
				break
			}
		}
		groups = append(groups, GoroutineGroup{Count: count, Func: desc})
	}
	slices.SortFunc(groups, func(a, b GoroutineGroup) int { return b.Count - a.Count })
	return total, groups
}
