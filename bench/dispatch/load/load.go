// Package load offers the dispatch benchmark's load, the same way to Podium
// and to its peer (riverpeer, a module of its own that imports this package
// and nothing else of Podium's): a burst from a fixed number of callers, each
// waiting for its call, and a steady open-loop rate. Offering both sides the
// same load is what makes their figures comparable. It uses only the
// standard library, so the peer's module does not take Podium's dependencies.
package load

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Burst makes n calls of one (with i = 0…n-1) from conc callers, each waiting
// for its call to return before it makes the next, and returns the results
// by i. Calls not made because ctx ended are left at T's zero value.
func Burst[T any](ctx context.Context, n, conc int, one func(i int) T) []T {
	out := make([]T, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range conc {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				out[i] = one(i)
			}
		})
	}
	wg.Wait()
	return out
}

// Steady offers rate calls per second for d, open loop: each call starts on
// schedule whether or not the earlier ones have returned, so a slow server
// shows up as latency rather than as a lower offered rate. At most
// maxInflight calls are outstanding; one due while that many are is skipped
// and counted. Results are by i; skipped calls, and calls not made because
// ctx ended, are left at T's zero value.
func Steady[T any](ctx context.Context, rate float64, d time.Duration, maxInflight int, one func(i int) T) (out []T, skipped int) {
	n := int(rate * d.Seconds())
	period := time.Duration(float64(time.Second) / rate)
	out = make([]T, n)
	sem := make(chan struct{}, maxInflight)
	var wg sync.WaitGroup
	start := time.Now()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for i := range n {
		timer.Reset(time.Until(start.Add(time.Duration(i) * period)))
		select {
		case <-ctx.Done():
			wg.Wait()
			return out, skipped
		case <-timer.C:
		}
		select {
		case sem <- struct{}{}:
		default:
			skipped++
			continue
		}
		wg.Go(func() {
			out[i] = one(i)
			<-sem
		})
	}
	wg.Wait()
	return out, skipped
}

// Percentile is the q-th percentile (0–100) of sorted durations, nearest
// rank; 0 for none.
func Percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*q/100+0.5) - 1
	return sorted[max(0, min(len(sorted)-1, i))]
}
