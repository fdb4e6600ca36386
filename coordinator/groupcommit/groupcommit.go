// Package groupcommit shares one database round trip among many callers.
//
// A replica does the same small write for many parties at once: events from a
// thousand node sessions, submits from many clients, command deliveries to
// many nodes. One statement per party per message costs a round trip and a
// commit each, and that, not Postgres's work, is what limits throughput.
// A Batcher lets each party hand over its request and wait for its own answer
// while one goroutine writes whatever has gathered in one go. There is no
// timer: when nothing is being written a request goes at once, and while a
// batch is in flight the next one gathers, so batches grow with load and an
// idle system pays no latency for it.
package groupcommit

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrStopped is returned to callers once the batcher's Run has ended.
var ErrStopped = errors.New("groupcommit: stopped (the coordinator replica is shutting down)")

// Config says how a Batcher writes.
type Config[Req, Res any] struct {
	// Flush writes a batch and returns one result per request, in order, or
	// an error that every request in the batch gets.
	Flush func(ctx context.Context, reqs []Req) ([]Res, error)
	// After, if set, runs once the callers of a flushed batch have been
	// answered: for work they need not wait for, such as ringing doorbells.
	After func(ctx context.Context, reqs []Req, res []Res)
	// MaxWeight bounds a batch: requests are added while the sum of their
	// weights is below it (default 256). A single request heavier than that
	// still goes, alone.
	MaxWeight int
	// Weight is a request's weight (default 1).
	Weight func(Req) int
	// Queue is how many requests may wait for the next batch (default 1024);
	// callers beyond that wait to be queued.
	Queue int
	// FlushTimeout bounds one flush (default 10 s). A flush that has begun is
	// not cut short when Run's context ends: its callers get the real
	// outcome, not a shutdown error for writes that were in fact made.
	FlushTimeout time.Duration
}

// Batcher gathers requests from many goroutines into batches for one writer.
type Batcher[Req, Res any] struct {
	cfg     Config[Req, Res]
	queue   chan *call[Req, Res]
	stopped chan struct{}
}

type call[Req, Res any] struct {
	req  Req
	done chan answer[Res]
}

type answer[Res any] struct {
	res Res
	err error
}

// New returns a batcher; nothing is written until Run is running.
func New[Req, Res any](cfg Config[Req, Res]) *Batcher[Req, Res] {
	if cfg.MaxWeight <= 0 {
		cfg.MaxWeight = 256
	}
	if cfg.Weight == nil {
		cfg.Weight = func(Req) int { return 1 }
	}
	if cfg.Queue <= 0 {
		cfg.Queue = 1024
	}
	if cfg.FlushTimeout <= 0 {
		cfg.FlushTimeout = 10 * time.Second
	}
	return &Batcher[Req, Res]{cfg: cfg, queue: make(chan *call[Req, Res], cfg.Queue), stopped: make(chan struct{})}
}

// Do hands req to the writer and waits for its result, for the writer to stop
// (ErrStopped), or for ctx. A caller that gives up on ctx after its request was
// taken does not undo it: the write may still happen.
func (b *Batcher[Req, Res]) Do(ctx context.Context, req Req) (Res, error) {
	var zero Res
	c := &call[Req, Res]{req: req, done: make(chan answer[Res], 1)}
	select {
	case b.queue <- c:
	case <-b.stopped:
		return zero, ErrStopped
	case <-ctx.Done():
		return zero, ctx.Err()
	}
	select {
	case a := <-c.done:
		return a.res, a.err
	case <-b.stopped:
		// Run may have answered just before it returned.
		select {
		case a := <-c.done:
			return a.res, a.err
		default:
			return zero, ErrStopped
		}
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}

// Run writes batches until ctx ends. Requests still queued then are not
// written and their callers get ErrStopped. Run must be called once.
func (b *Batcher[Req, Res]) Run(ctx context.Context) {
	defer close(b.stopped)
	for {
		var first *call[Req, Res]
		select {
		case <-ctx.Done():
			return
		case first = <-b.queue:
		}
		calls := []*call[Req, Res]{first}
		weight := b.cfg.Weight(first.req)
	gather:
		for weight < b.cfg.MaxWeight {
			select {
			case c := <-b.queue:
				calls = append(calls, c)
				weight += b.cfg.Weight(c.req)
			default:
				break gather
			}
		}
		b.write(ctx, calls)
	}
}

func (b *Batcher[Req, Res]) write(ctx context.Context, calls []*call[Req, Res]) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.cfg.FlushTimeout)
	defer cancel()
	reqs := make([]Req, len(calls))
	for i, c := range calls {
		reqs[i] = c.req
	}
	res, err := b.cfg.Flush(ctx, reqs)
	if err == nil && len(res) != len(reqs) {
		err = fmt.Errorf("groupcommit: flush returned %d results for %d requests", len(res), len(reqs))
	}
	if err != nil {
		for _, c := range calls {
			c.done <- answer[Res]{err: err}
		}
		return
	}
	for i, c := range calls {
		c.done <- answer[Res]{res: res[i]}
	}
	if b.cfg.After != nil {
		b.cfg.After(ctx, reqs, res)
	}
}
