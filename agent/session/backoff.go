package session

import (
	"math/rand/v2"
	"time"
)

// Reconnect timing (docs/protocol.md, Reconnecting).
const (
	DefaultReconnectMin = time.Second
	DefaultReconnectMax = 30 * time.Second
)

// Backoff spaces out reconnect attempts: Min, doubling up to Max, each delay
// jittered. The jitter matters more than the doubling: when a coordinator
// restarts, every node loses its stream in the same instant, and without it
// they would all come back in the same instant too, again and again.
type Backoff struct {
	Min, Max time.Duration
	// Rand returns a number in [0, 1); nil uses math/rand/v2. Tests set it.
	Rand func() float64

	next time.Duration
}

// Next returns how long to wait before the next attempt and moves the
// schedule on. The delay is drawn uniformly from [d/2, d] for the current
// step d ("equal jitter"): spread out, yet never more than Max and never so
// short that a failing coordinator is hammered.
func (b *Backoff) Next() time.Duration {
	lo, hi := b.Min, b.Max
	if lo <= 0 {
		lo = DefaultReconnectMin
	}
	if hi < lo {
		hi = max(lo, DefaultReconnectMax)
	}
	if b.next < lo {
		b.next = lo
	}
	d := b.next
	b.next = min(2*b.next, hi)
	r := b.Rand
	if r == nil {
		r = rand.Float64
	}
	return d/2 + time.Duration(r()*float64(d-d/2))
}

// Reset starts the schedule over. The session calls it after a healthy
// stream, so a node whose coordinator restarts after days of service comes
// back within a second or so instead of at the slowest step.
func (b *Backoff) Reset() { b.next = 0 }

// Exhaust jumps to the slowest step. It is for failures that retrying soon
// cannot fix, such as a rejected node key: the node keeps trying (an operator
// may fix the coordinator's side) without flooding the coordinator's log.
func (b *Backoff) Exhaust() {
	hi := b.Max
	if hi <= 0 {
		hi = DefaultReconnectMax
	}
	b.next = hi
}
