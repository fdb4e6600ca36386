package gpu

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/podiumhq/podium/internal/glob"
)

// Allocator hands the node's GPUs to task attempts, each GPU to one attempt
// at a time. The coordinator decides whether a node can take a task (it
// counts the GPUs the node reported less those its active tasks asked for);
// the node decides which GPUs the attempt gets, because only the node knows
// which of them its running attempts hold.
//
// The set of GPUs changes with each discovery (Set: at start and on SIGHUP);
// what attempts hold does not: a GPU a running attempt holds stays held even
// if a rediscovery no longer lists it, so it is never handed out twice should
// it come back.
type Allocator struct {
	mu   sync.Mutex
	gpus []GPU
	// held maps a GPU's UUID to the attempt holding it.
	held map[string]string
}

// NewAllocator returns an allocator with no GPUs; Set gives it the
// discovered ones.
func NewAllocator() *Allocator { return &Allocator{held: map[string]string{}} }

// Set replaces the node's GPUs with a discovery's result, in index order.
func (a *Allocator) Set(gpus []GPU) {
	gs := slices.Clone(gpus)
	sort.Slice(gs, func(i, j int) bool { return gs[i].Index < gs[j].Index })
	a.mu.Lock()
	defer a.mu.Unlock()
	a.gpus = gs
}

// GPUs are the node's GPUs as last discovered, which it reports in Hello and
// every heartbeat: all of them, held or free (the coordinator subtracts what
// its tasks hold).
func (a *Allocator) GPUs() []GPU {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.gpus)
}

// Request is what an attempt asks for: N whole GPUs whose model matches
// Model (a glob, "NVIDIA H100*"; empty: any) with at least MemoryMiB each (0:
// any).
type Request struct {
	N         int
	Model     string
	MemoryMiB int64
}

// String says the request the way a refusal quotes it: "2 GPUs matching
// "NVIDIA H100*" with at least 81920 MiB".
func (r Request) String() string {
	s := fmt.Sprintf("%d GPU", r.N)
	if r.N != 1 {
		s += "s"
	}
	if r.Model != "" {
		s += fmt.Sprintf(" matching %q", r.Model)
	}
	if r.MemoryMiB > 0 {
		s += fmt.Sprintf(" with at least %d MiB", r.MemoryMiB)
	}
	return s
}

// freeLocked lists the free GPUs that satisfy r, in index order.
func (a *Allocator) freeLocked(r Request) ([]GPU, error) {
	// The same rule as placement's (taskspec.GPUModelMatches on the
	// coordinator's side): a glob on the name, which holds no "/".
	var pat *glob.Pattern
	if r.Model != "" {
		p, err := glob.Parse(r.Model)
		if err == nil && strings.Contains(r.Model, "/") {
			err = fmt.Errorf(`it holds a "/", which no GPU's name does`)
		}
		if err != nil {
			return nil, fmt.Errorf("gpu_model %q cannot be used: %v", r.Model, err)
		}
		pat = p
	}
	var free []GPU
	for _, g := range a.gpus {
		if _, busy := a.held[g.UUID]; busy {
			continue
		}
		if pat != nil && !pat.Match(g.Model) {
			continue
		}
		if g.MemoryMiB < r.MemoryMiB {
			continue
		}
		free = append(free, g)
	}
	return free, nil
}

// Check says why r cannot be satisfied now, or returns nil. The session
// asks before it accepts an assignment, so that one the node cannot serve
// goes back to the coordinator (like one for want of a slot) instead of
// failing.
func (a *Allocator) Check(r Request) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.checkLocked(r)
}

func (a *Allocator) checkLocked(r Request) error {
	if r.N <= 0 {
		return nil
	}
	if r.N > MaxGPUs {
		return fmt.Errorf("the task asks %d GPUs, more than any node has (%d)", r.N, MaxGPUs)
	}
	free, err := a.freeLocked(r)
	if err != nil {
		return err
	}
	if len(free) < r.N {
		return fmt.Errorf("node has %d free of the %s the task asks (%d GPUs here, %d held by running tasks)",
			len(free), r.String(), len(a.gpus), len(a.held))
	}
	return nil
}

// Take gives holder (an attempt's key) r.N free GPUs that satisfy r, lowest
// index first, or none and the reason (as Check). A holder that already holds
// GPUs is refused: an attempt takes its GPUs once.
func (a *Allocator) Take(holder string, r Request) ([]GPU, error) {
	if r.N <= 0 {
		return nil, nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, h := range a.held {
		if h == holder {
			return nil, fmt.Errorf("%s already holds GPUs", holder)
		}
	}
	if err := a.checkLocked(r); err != nil {
		return nil, err
	}
	free, _ := a.freeLocked(r)
	got := free[:r.N]
	for _, g := range got {
		a.held[g.UUID] = holder
	}
	return slices.Clone(got), nil
}

// Restore marks uuids held by holder again: the GPUs of an attempt an earlier
// agent process started and this one adopted, read from the attempt's
// on-disk record. They are held whether or not this discovery found them. A
// UUID another holder has is not taken from it; the error names it.
func (a *Allocator) Restore(holder string, uuids []string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	var clash []string
	for _, u := range uuids {
		if h, ok := a.held[u]; ok && h != holder {
			clash = append(clash, fmt.Sprintf("%s (held by %s)", u, h))
			continue
		}
		a.held[u] = holder
	}
	if len(clash) > 0 {
		return fmt.Errorf("GPUs recorded for %s are held by another attempt: %s", holder, strings.Join(clash, ", "))
	}
	return nil
}

// Release frees what holder holds; its attempt has ended.
func (a *Allocator) Release(holder string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for u, h := range a.held {
		if h == holder {
			delete(a.held, u)
		}
	}
}

// Held lists the UUIDs holder holds, sorted.
func (a *Allocator) Held(holder string) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for u, h := range a.held {
		if h == holder {
			out = append(out, u)
		}
	}
	sort.Strings(out)
	return out
}

// IsUUID reports whether s has the form of a GPU's UUID as nvidia-smi prints
// it ("GPU-" and 32 hex digits in 8-4-4-4-12 groups): what is read back from
// an attempt's record is checked before a container is given it.
func IsUUID(s string) bool { return uuidPattern.MatchString(s) }
