package soak

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
)

// run is one container of a task's attempt as its engine saw it: started
// and, once it has, died, by the engine's clock (all engines run on this
// machine, so their clocks are one).
type run struct {
	engine    string
	container string
	task      string
	attempt   int
	role      string
	start     int64 // unix nanoseconds
	end       int64 // 0 while not seen to die
}

// engineWatch follows one engine's event stream (the Docker Events API),
// keeping the start and die of every container Podium labelled with a
// task. When the stream breaks (the engine restarted) it subscribes again
// with since set to the last event it had, so that nothing between is
// missed; events seen twice are counted once.
type engineWatch struct {
	name string
	c    *client.Client

	mu   sync.Mutex
	runs map[string]*run // by container id
	last int64
	seen map[string]bool
	// breaks counts resubscriptions, for the summary.
	breaks int
}

func watchEngine(ctx context.Context, name string, c *client.Client, wg *sync.WaitGroup) *engineWatch {
	w := &engineWatch{name: name, c: c, runs: map[string]*run{}, seen: map[string]bool{}, last: time.Now().Add(-time.Minute).UnixNano()}
	wg.Add(1)
	go func() {
		defer wg.Done()
		w.loop(ctx)
	}()
	return w
}

func (w *engineWatch) loop(ctx context.Context) {
	f := filters.NewArgs(filters.Arg("type", "container"), filters.Arg("label", "podium.task"),
		filters.Arg("event", "start"), filters.Arg("event", "die"))
	for ctx.Err() == nil {
		w.mu.Lock()
		since := w.last
		w.mu.Unlock()
		msgs, errs := w.c.Events(ctx, events.ListOptions{Since: fmt.Sprintf("%d.%09d", since/1e9, since%1e9), Filters: f})
	stream:
		for {
			select {
			case <-ctx.Done():
				return
			case m := <-msgs:
				w.record(m)
			case err := <-errs:
				// The stream ended (its engine stopped, or the call
				// failed): counted, and subscribed again below from
				// the last event seen.
				_ = err
				break stream
			}
		}
		w.mu.Lock()
		w.breaks++
		w.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (w *engineWatch) record(m events.Message) {
	key := fmt.Sprintf("%s/%s/%d", m.Actor.ID, m.Action, m.TimeNano)
	w.mu.Lock()
	defer w.mu.Unlock()
	if m.TimeNano > w.last {
		w.last = m.TimeNano
	}
	if w.seen[key] {
		return
	}
	w.seen[key] = true
	r := w.runs[m.Actor.ID]
	if r == nil {
		attempt, _ := strconv.Atoi(m.Actor.Attributes["podium.attempt"])
		r = &run{engine: w.name, container: m.Actor.ID, task: m.Actor.Attributes["podium.task"], attempt: attempt,
			role: m.Actor.Attributes["podium.role"]}
		w.runs[m.Actor.ID] = r
	}
	switch m.Action {
	case events.ActionStart:
		if r.start == 0 || m.TimeNano < r.start {
			r.start = m.TimeNano
		}
	case events.ActionDie:
		if m.TimeNano > r.end {
			r.end = m.TimeNano
		}
	}
}

// snapshot is every run seen so far.
func (w *engineWatch) snapshot() []run {
	w.mu.Lock()
	defer w.mu.Unlock()
	var rs []run
	for _, r := range w.runs {
		rs = append(rs, *r)
	}
	return rs
}
