package main

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/podiumhq/podium/test/testenv/pgtest"
)

// rttProbe times one `select 1` every 10 ms on a connection of its own (to the
// "postgres" database, so it is not in the coordinator's statement counts).
// A statement the coordinator waits for costs it at least this round trip,
// so the probe turns "statements in a serial loop per task" into time: on a
// small, busy machine the round trip, not the execution, is most of a
// statement's cost.
type rttProbe struct {
	mu      sync.Mutex
	samples []time.Duration
	stop    context.CancelFunc
	done    chan struct{}
}

func startRTTProbe(ctx context.Context, cluster *pgtest.Cluster) (*rttProbe, error) {
	conn, err := pgx.Connect(ctx, cluster.URL("postgres"))
	if err != nil {
		return nil, err
	}
	pctx, stop := context.WithCancel(ctx)
	p := &rttProbe{stop: stop, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		defer conn.Close(context.Background())
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-pctx.Done():
				return
			case <-t.C:
			}
			began := time.Now()
			if _, err := conn.Exec(pctx, "select 1"); err != nil {
				return
			}
			d := time.Since(began)
			p.mu.Lock()
			p.samples = append(p.samples, d)
			p.mu.Unlock()
		}
	}()
	return p, nil
}

// take returns the samples since the last take, sorted.
func (p *rttProbe) take() []time.Duration {
	p.mu.Lock()
	s := p.samples
	p.samples = nil
	p.mu.Unlock()
	slices.Sort(s)
	return s
}

func (p *rttProbe) close() { p.stop(); <-p.done }

// rtt is a window's round trips.
type rtt struct {
	N        int
	P50, P90 time.Duration
}

func summarize(s []time.Duration) rtt {
	return rtt{N: len(s), P50: percentile(s, 50), P90: percentile(s, 90)}
}
