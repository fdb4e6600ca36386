package session

import (
	"testing"
	"time"
)

func TestBackoffDoublesToMaxWithJitter(t *testing.T) {
	fixed := 0.0
	b := &Backoff{Min: time.Second, Max: 30 * time.Second, Rand: func() float64 { return fixed }}
	steps := []time.Duration{1, 2, 4, 8, 16, 30, 30}
	for i, s := range steps {
		step := s * time.Second
		// With Rand at its lowest the delay is half the step...
		fixed = 0
		lo := b.Next()
		b.next = step // undo the advance to look at the same step again
		// ...and at its highest, all of it.
		fixed = 0.999999
		hi := b.Next()
		if lo != step/2 || hi < step-time.Millisecond || hi > step {
			t.Fatalf("step %d: delays %s..%s, want %s..%s", i, lo, hi, step/2, step)
		}
	}
}

func TestBackoffSpreads(t *testing.T) {
	b := &Backoff{Min: time.Second, Max: 30 * time.Second}
	seen := map[time.Duration]bool{}
	for range 20 {
		b.Reset()
		d := b.Next()
		// A whole fleet reconnecting after its replica died is spread over
		// [Min/2, Min], never earlier and never later.
		if d < time.Second/2 || d > time.Second {
			t.Fatalf("first delay %s, want within [500ms, 1s]", d)
		}
		seen[d] = true
	}
	if len(seen) < 10 {
		t.Fatalf("20 first delays took only %d distinct values: the jitter is not spreading them", len(seen))
	}
}

func TestBackoffResetAndExhaust(t *testing.T) {
	b := &Backoff{Min: time.Second, Max: 30 * time.Second, Rand: func() float64 { return 0.999999 }}
	for range 10 {
		b.Next()
	}
	b.Reset()
	if d := b.Next(); d > time.Second {
		t.Fatalf("first delay after Reset %s, want at most 1s", d)
	}
	b.Exhaust()
	if d := b.Next(); d < 29*time.Second {
		t.Fatalf("delay after Exhaust %s, want about 30s", d)
	}
}

func TestBackoffDefaults(t *testing.T) {
	var b Backoff
	d := b.Next()
	if d < DefaultReconnectMin/2 || d > DefaultReconnectMin {
		t.Fatalf("zero Backoff's first delay %s", d)
	}
	for range 20 {
		d = b.Next()
	}
	if d > DefaultReconnectMax {
		t.Fatalf("zero Backoff grew to %s, past %s", d, DefaultReconnectMax)
	}
}
