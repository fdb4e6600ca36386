package backoff

import (
	"testing"
	"time"
)

// TestNextDoublesUpToMaxWithJitter checks the waits' bounds: each is between
// half its step and the step, the step doubling from Min to Max, and Reset
// starts over.
func TestNextDoublesUpToMaxWithJitter(t *testing.T) {
	b := &Backoff{Min: time.Second, Max: 30 * time.Second}
	steps := []time.Duration{1, 2, 4, 8, 16, 30, 30, 30}
	for round := range 2 {
		for i, s := range steps {
			step := s * time.Second
			if got := b.Next(); got < step/2 || got > step {
				t.Fatalf("round %d, wait %d: %s, want within [%s, %s]", round, i+1, got, step/2, step)
			}
		}
		if b.Failures() != len(steps) {
			t.Fatalf("Failures() = %d after %d waits", b.Failures(), len(steps))
		}
		b.Reset()
	}
}
