// Package wait is how tests wait for something to happen: poll a condition,
// or receive from a channel, and fail with what was awaited when a deadline
// passes. A test that sleeps "long enough" is either slow or flaky; one that
// loops with no deadline hangs until the whole run's timeout and then says
// nothing useful. These fail at once, by name.
//
// The deadlines are generous on purpose: they bound a hang, they do not
// measure anything (a timing bound belongs in a benchmark).
package wait

import (
	"testing"
	"time"
)

// Poll is how soon For checks its condition again after the first miss.
// Later checks come at longer intervals, up to MaxPoll: a condition that
// holds soon is seen soon, and one that takes seconds (a node going offline,
// a task's second attempt) is not asked a hundred times a second: most
// conditions are a query to a coordinator, and many tests wait at once on
// the same two cores.
const Poll = 10 * time.Millisecond

// MaxPoll is the longest interval between two checks of For's condition.
const MaxPoll = 200 * time.Millisecond

// For polls cond until it is true; after d it fails the test with what it was
// waiting for.
func For(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	interval := Poll
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up after %s waiting for %s", d, what)
		}
		time.Sleep(interval)
		interval = min(interval*2, MaxPoll)
	}
}

// Recv receives one value from ch; after d, or if ch is closed, it fails the
// test with what it was waiting for.
func Recv[T any](t testing.TB, d time.Duration, what string, ch <-chan T) T {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case v, ok := <-ch:
		if !ok {
			t.Fatalf("waiting for %s: the channel was closed", what)
		}
		return v
	case <-timer.C:
		t.Fatalf("gave up after %s waiting for %s", d, what)
	}
	panic("unreachable")
}

// Closed waits until ch is closed (or yields a value); after d it fails the
// test with what it was waiting for.
func Closed[T any](t testing.TB, d time.Duration, what string, ch <-chan T) {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ch:
	case <-timer.C:
		t.Fatalf("gave up after %s waiting for %s", d, what)
	}
}
