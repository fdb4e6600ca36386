package executor

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// A gate with room admits at once and counts the task starting until it
// releases; one without room notes why once, waits its wait, then fails with
// the reason naming the limit and LimitNOFILE; a cancelled task stops
// waiting.
func TestFDGate(t *testing.T) {
	ctx := context.Background()
	never := func() bool { return false }
	var notes []string
	note := func(format string, args ...any) { notes = append(notes, fmt.Sprintf(format, args...)) }

	roomy := &fdGate{limit: 1 << 20, wait: time.Second}
	release, st, ok := roomy.acquire(ctx, note, never)
	if !ok || st != nil || roomy.starting != 1 {
		t.Fatalf("a gate with room: ok %t, status %v, starting %d", ok, st, roomy.starting)
	}
	release()
	release()
	if roomy.starting != 0 {
		t.Fatalf("after release (twice) %d tasks count as starting, want 0", roomy.starting)
	}

	full := &fdGate{limit: 4, wait: 300 * time.Millisecond}
	_, st, ok = full.acquire(ctx, note, never)
	if !ok || st == nil || !strings.HasPrefix(st.GetReason(), ReasonNoFileDescriptors+": ") ||
		!strings.Contains(st.GetReason(), "of the 4 it may (RLIMIT_NOFILE)") || !strings.Contains(st.GetReason(), "LimitNOFILE") {
		t.Fatalf("a full gate: ok %t, status %v", ok, st)
	}
	if len(notes) != 1 || !strings.Contains(notes[0], "waiting for file descriptors") {
		t.Fatalf("notes while waiting: %q, want one saying it waits for file descriptors", notes)
	}

	_, st, ok = full.acquire(ctx, note, func() bool { return true })
	if ok || st != nil {
		t.Fatalf("a cancelled task: ok %t, status %v; want it to stop waiting", ok, st)
	}
}

func TestWithFDAdvice(t *testing.T) {
	got := withFDAdvice("the task's egress rules could not be installed: pipe2: too many open files")
	if !strings.Contains(got, "LimitNOFILE") {
		t.Errorf("EMFILE quoted without advice: %q", got)
	}
	for _, r := range []string{"exit code 1", ReasonNoFileDescriptors + ": … too many open files … LimitNOFILE"} {
		if got := withFDAdvice(r); got != r {
			t.Errorf("withFDAdvice(%q) = %q, want it unchanged", r, got)
		}
	}
}
