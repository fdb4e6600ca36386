package faults

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"

	"github.com/podiumhq/podium/test/testenv/dockertest"
	"github.com/podiumhq/podium/test/testenv/wait"
)

// Lifecycle is the record of when containers started and died, as the
// Docker engine stamped them (timeNano) on its event stream: what an
// assertion about "at once" needs, since a poll of `docker ps` misses any
// overlap shorter than its period. Watch before anything the record must
// cover is submitted.
type Lifecycle struct {
	mu sync.Mutex
	// lives is every container seen, by id.
	lives map[string]*containerLife
	// broke is why the stream ended before Stop, if it did: the record is
	// then incomplete.
	broke   error
	since   time.Time
	cancel  context.CancelFunc
	stopped chan struct{}
	once    sync.Once
}

// containerLife is one container's start and death. A zero Start is a
// container that started before the watch (listed running when it began,
// or its die was seen); a zero Die one that had not died when last looked
// at.
type containerLife struct {
	ID         string
	Labels     map[string]string
	Start, Die int64 // unix nanoseconds, the engine's clock
}

// WatchLifecycle subscribes to the engine's container start and die events
// for containers carrying every label given ("podium.role=task",
// "podium.node=ID"), from this moment (the subscription asks the engine for
// events since now, so none is lost while it connects); those already
// running are recorded as started before the watch. The watch ends with
// the test, or at Stop.
func WatchLifecycle(t testing.TB, c *client.Client, labels ...string) *Lifecycle {
	t.Helper()
	f := filters.NewArgs(filters.Arg("type", string(events.ContainerEventType)),
		filters.Arg("event", string(events.ActionStart)), filters.Arg("event", string(events.ActionDie)))
	for _, l := range labels {
		f.Add("label", l)
	}
	since := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	msgs, errs := c.Events(ctx, events.ListOptions{
		Since:   fmt.Sprintf("%d.%09d", since.Unix(), since.Nanosecond()),
		Filters: f,
	})
	l := &Lifecycle{lives: map[string]*containerLife{}, since: since, cancel: cancel, stopped: make(chan struct{})}
	go func() {
		defer close(l.stopped)
		for {
			select {
			case m := <-msgs:
				l.record(m)
			case err := <-errs:
				if ctx.Err() == nil {
					l.mu.Lock()
					l.broke = err
					l.mu.Unlock()
				}
				return
			}
		}
	}()
	t.Cleanup(func() { _ = l.Stop() })
	// What already runs has no start event to come: it is recorded as
	// running from before the watch. Listed after subscribing, so that a
	// container is either listed or has its start on the stream (or both:
	// the start event's stamp wins).
	lctx, lcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer lcancel()
	lf := filters.NewArgs(filters.Arg("status", "running"))
	for _, lb := range labels {
		lf.Add("label", lb)
	}
	running, err := c.ContainerList(lctx, container.ListOptions{Filters: lf})
	if err != nil {
		t.Fatalf("list the running containers labelled %v: %v", labels, err)
	}
	l.mu.Lock()
	for _, ct := range running {
		if l.lives[ct.ID] == nil {
			l.lives[ct.ID] = &containerLife{ID: ct.ID, Labels: ct.Labels}
		}
	}
	l.mu.Unlock()
	return l
}

func (l *Lifecycle) record(m events.Message) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.lives[m.Actor.ID]
	if c == nil {
		c = &containerLife{ID: m.Actor.ID, Labels: m.Actor.Attributes}
		l.lives[m.Actor.ID] = c
	}
	switch m.Action {
	case events.ActionStart:
		c.Start = m.TimeNano
	case events.ActionDie:
		c.Die = m.TimeNano
	}
}

// Stop ends the watch and says whether the record is whole: an error if
// the engine's stream broke before Stop.
func (l *Lifecycle) Stop() error {
	l.once.Do(func() { l.cancel(); <-l.stopped })
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.broke != nil {
		return fmt.Errorf("the engine's event stream broke, so the start/die record is incomplete: %w", l.broke)
	}
	return nil
}

// Containers is what the record holds of the containers match accepts
// (by their labels), in the order they started.
func (l *Lifecycle) Containers(match func(labels map[string]string) bool) []containerLife {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []containerLife
	for _, c := range l.lives {
		if match(c.Labels) {
			out = append(out, *c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Start < out[j].Start })
	return out
}

// WaitDied waits until every container match accepts that the record saw
// start has died too, so that a count is taken over whole lives.
func (l *Lifecycle) WaitDied(t testing.TB, what string, match func(labels map[string]string) bool) {
	t.Helper()
	wait.For(t, nodeWithin, "the engine's die event of every "+what+" container that started", func() bool {
		for _, c := range l.Containers(match) {
			if c.Die == 0 {
				return false
			}
		}
		return true
	})
}

// MostAtOnce is the most distinct groups (group names a container's group
// from its labels: an attempt, a task) that had a container of theirs
// running at the same instant, among the containers match accepts, and a
// description of the first instant it was reached. A container that had
// not died is counted as running to the end of the record, one that
// started before the watch as running from its start. A death and a start
// stamped the same nanosecond do not overlap.
func (l *Lifecycle) MostAtOnce(match func(labels map[string]string) bool, group func(labels map[string]string) string) (most int, when string) {
	type edge struct {
		at    int64
		start bool
		c     containerLife
	}
	var edges []edge
	for _, c := range l.Containers(match) {
		start := c.Start
		if start == 0 {
			start = l.since.UnixNano()
		}
		edges = append(edges, edge{at: start, start: true, c: c})
		if c.Die != 0 {
			edges = append(edges, edge{at: c.Die, c: c})
		}
	}
	sort.SliceStable(edges, func(i, j int) bool {
		if edges[i].at != edges[j].at {
			return edges[i].at < edges[j].at
		}
		return !edges[i].start && edges[j].start // deaths first
	})
	running := map[string]map[string]bool{} // group -> container ids
	for _, e := range edges {
		g := group(e.c.Labels)
		if e.start {
			if running[g] == nil {
				running[g] = map[string]bool{}
			}
			running[g][e.c.ID] = true
		} else {
			delete(running[g], e.c.ID)
			if len(running[g]) == 0 {
				delete(running, g)
			}
		}
		if len(running) > most {
			most = len(running)
			var gs []string
			for g := range running {
				gs = append(gs, g)
			}
			sort.Strings(gs)
			when = fmt.Sprintf("at %s: %s", time.Unix(0, e.at).UTC().Format("15:04:05.000000000"), strings.Join(gs, ", "))
		}
	}
	return most, when
}

// labelIs is a match on one label's value.
func labelIs(key, value string) func(map[string]string) bool {
	return func(labels map[string]string) bool { return labels[key] == value }
}

// labelOf is a group by one label's value.
func labelOf(key string) func(map[string]string) string {
	return func(labels map[string]string) string { return key + "=" + labels[key] }
}

// MostAtOnce counts an overlap of any length, a nanosecond included, and
// none where one container dies the nanosecond the next starts; a
// container still running counts to the end, one that started before the
// watch from its start.
func TestMostAtOnceCountsAnyOverlap(t *testing.T) {
	t.Parallel()
	at := func(ns int64) int64 { return 1_700_000_000_000_000_000 + ns }
	life := func(lives ...containerLife) *Lifecycle {
		l := &Lifecycle{lives: map[string]*containerLife{}, since: time.Unix(0, at(0))}
		for i := range lives {
			l.lives[lives[i].ID] = &lives[i]
		}
		return l
	}
	c := func(id, attempt string, start, die int64) containerLife {
		return containerLife{ID: id, Labels: map[string]string{"podium.attempt": attempt, "id": id}, Start: start, Die: die}
	}
	all := func(map[string]string) bool { return true }
	byID := func(l map[string]string) string { return l["id"] }
	for _, tc := range []struct {
		name  string
		l     *Lifecycle
		group func(map[string]string) string
		want  int
	}{
		{"one nanosecond of overlap", life(c("x", "1", at(10), at(20)), c("y", "2", at(19), at(30))), labelOf("podium.attempt"), 2},
		{"dies as the next starts", life(c("x", "1", at(10), at(20)), c("y", "2", at(20), at(30))), labelOf("podium.attempt"), 1},
		{"one attempt's two containers", life(c("x", "1", at(10), at(20)), c("y", "1", at(15), at(30))), labelOf("podium.attempt"), 1},
		{"still running", life(c("x", "1", at(10), 0), c("y", "2", at(50), at(60))), labelOf("podium.attempt"), 2},
		{"started before the watch", life(c("x", "1", 0, at(15)), c("y", "2", at(10), at(20))), labelOf("podium.attempt"), 2},
		{"five at once, by container", life(c("a", "1", at(1), at(9)), c("b", "1", at(2), at(9)), c("c", "1", at(3), at(9)),
			c("d", "1", at(4), at(9)), c("e", "1", at(8), at(9)), c("f", "1", at(9), at(10))), byID, 5},
	} {
		if got, when := tc.l.MostAtOnce(all, tc.group); got != tc.want {
			t.Errorf("%s: MostAtOnce = %d (%s), want %d", tc.name, got, when, tc.want)
		}
	}
}

// copies watches the engine's start/die record of the task's containers
// from now until stop is called, which returns the most attempts of the
// task that ran at the same instant and, when that is more than one, the
// first such instant. A container of the task already running when the
// watch began counts as running from then. Two attempts of one task
// running at the same moment are what fencing exists to prevent.
func copies(t *testing.T, task string) (stop func() (most int, when []string)) {
	t.Helper()
	life := WatchLifecycle(t, dockertest.Client(t), "podium.task="+task, "podium.role=task")
	return func() (int, []string) {
		if err := life.Stop(); err != nil {
			t.Error(err)
		}
		all := func(map[string]string) bool { return true }
		most, when := life.MostAtOnce(all, labelOf("podium.attempt"))
		if most > 1 {
			return most, []string{when}
		}
		return most, nil
	}
}

// The record against the real engine, on containers labelled as two
// attempts of a task: one already running when the watch begins is in it
// as started before, one started during it with the engine's stamp, both
// with their deaths; the two overlapped, which copies reports; a container
// of the task that is not its task container (a sidecar) is not counted.
func TestLifecycleRecordsTheEnginesStartsAndDies(t *testing.T) {
	t.Parallel()
	c := dockertest.Client(t)
	image := dockertest.EnsureImage(t)
	task := fmt.Sprintf("task_lifecycle_test_%d", time.Now().UnixNano())
	ctx := context.Background()
	t.Cleanup(func() { dockertest.RemoveAllFor(c, "podium.task="+task) })
	start := func(role, attempt string) string {
		t.Helper()
		labels := map[string]string{"podium.task": task, "podium.role": role, "podium.attempt": attempt}
		res, err := c.ContainerCreate(ctx, &container.Config{Image: image, Cmd: []string{"sleep", "600"}, Labels: labels}, nil, nil, nil, "")
		if err != nil {
			t.Fatalf("create the %s of attempt %s: %v", role, attempt, err)
		}
		if err := c.ContainerStart(ctx, res.ID, container.StartOptions{}); err != nil {
			t.Fatalf("start the %s of attempt %s: %v", role, attempt, err)
		}
		return res.ID
	}
	before := start("task", "1")
	life := WatchLifecycle(t, c, "podium.task="+task, "podium.role=task")
	two := copies(t, task)
	during := start("task", "2")
	sidecar := start("sidecar", "3")
	for _, id := range []string{before, during, sidecar} {
		if err := c.ContainerKill(ctx, id, "KILL"); err != nil {
			t.Fatal(err)
		}
	}
	all := func(map[string]string) bool { return true }
	life.WaitDied(t, "the task's", all)
	if err := life.Stop(); err != nil {
		t.Fatal(err)
	}
	got := map[string]containerLife{}
	for _, cl := range life.Containers(all) {
		got[cl.ID] = cl
	}
	if len(got) != 2 || got[before].Start != 0 || got[before].Die == 0 || got[during].Start == 0 || got[during].Die <= got[during].Start {
		t.Fatalf("the record holds %+v; want %s started before the watch and died, %s started and died in it, nothing else", got, before, during)
	}
	if most, when := life.MostAtOnce(all, labelOf("podium.attempt")); most != 2 {
		t.Errorf("MostAtOnce = %d (%s), want 2: both ran until killed", most, when)
	}
	if most, when := two(); most != 2 || len(when) != 1 {
		t.Errorf("copies saw %d attempts at once (%v), want 2 and when", most, when)
	}
}
