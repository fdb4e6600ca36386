// Package backoff spaces out the retries of a loop that keeps failing: the
// wait doubles from Min up to Max, with jitter so that the replicas of a
// deployment that lost the same dependency do not retry in step. A loop that
// retried a refusing Postgres once a second filled the log with a warning a
// second and added its own connection attempts to the load.
package backoff

import (
	"math/rand/v2"
	"time"
)

// Backoff is the wait before each retry of one loop. The zero value is not
// usable: set Min and Max. It is not safe for concurrent use.
type Backoff struct {
	Min, Max time.Duration
	n        int
}

// Next is the wait before the next retry: half the current step plus up to
// as much again at random, the step doubling from Min each time up to Max.
func (b *Backoff) Next() time.Duration {
	step := b.Min
	for i := 0; i < b.n && step < b.Max; i++ {
		step *= 2
	}
	step = min(step, b.Max)
	b.n++
	half := step / 2
	return half + rand.N(half+1)
}

// Failures is how many waits Next has given since the last Reset.
func (b *Backoff) Failures() int { return b.n }

// Reset starts over at Min, after a success.
func (b *Backoff) Reset() { b.n = 0 }
