package soak

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/dockertest"
)

// settle bounds how long, once the faults are healed and the workload has
// stopped submitting, the fleet has to bring every node back and finish
// every task it accepted: a task that is still not terminal after it is a
// violation (stuck), not a slow run.
const settle = 8 * time.Minute

// TestSoak runs the whole fleet under a random workload while the nemesis
// injects faults, for SOAK_TIME (default 3m), seeded by SOAK_SEED (default
// the clock; printed), then checks the history against the invariants
// (package doc). SOAK_FAULTS narrows the fault kinds (a comma list).
func TestSoak(t *testing.T) {
	dur, durText := 3*time.Minute, "3m"
	if v := os.Getenv("SOAK_TIME"); v != "" {
		durText = v
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("SOAK_TIME=%q: want a positive duration such as 10m", v)
		}
		dur = d
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("SOAK_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("SOAK_SEED=%q: want a non-negative integer", v)
		}
		seed = s
	}
	kinds, err := selectFaults(os.Getenv("SOAK_FAULTS"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("soak: seed %d (replay with SOAK_SEED=%d), %s, faults %s", seed, seed, dur, kindNames(kinds))

	c := startCluster(t)
	// One stream of random numbers each, from the seed: the nemesis's
	// choices do not shift when the workload's goroutines interleave
	// differently (what they meet still depends on timing).
	wrng := rand.New(rand.NewPCG(seed, 1))
	nrng := rand.New(rand.NewPCG(seed, 2))

	watchCtx, stopWatching := context.WithCancel(context.Background())
	var watchWG sync.WaitGroup
	var watches []*engineWatch
	for i, e := range c.engines {
		watches = append(watches, watchEngine(watchCtx, c.agents[i].name, e.Client(), &watchWG))
	}
	defer func() { stopWatching(); watchWG.Wait() }()

	h := &history{tasks: map[string]*submitted{}}
	w := &workload{c: c, h: h, rng: wrng, image: dockertest.Image, kinds: map[string]int{}}
	if err := w.startSchedule(); err != nil {
		t.Fatalf("make the schedule: %v", err)
	}
	n := &nemesis{c: c, rng: nrng, kinds: kinds}

	ctx, stop := context.WithTimeout(context.Background(), dur)
	defer stop()
	var loops sync.WaitGroup
	loops.Add(2)
	go func() { defer loops.Done(); n.loop(ctx) }()
	start := time.Now()
	go func() { defer loops.Done(); w.loop(ctx) }()
	<-ctx.Done()
	t.Logf("soak: %s of faults and workload done; healing and letting the fleet settle", time.Since(start).Round(time.Second))
	loops.Wait()
	pauseSchedule(t, c)

	v := &violations{}
	settleBy := time.Now().Add(settle)
	// Every replica back and every node online: the faults are healed.
	if err := c.readyAll(); err != nil {
		v.add("after the faults were healed: %v", err)
	}
	if err := c.waitNodesOnline(time.Until(settleBy)); err != nil {
		v.add("after the faults were healed: %v", err)
	}
	// Every task the coordinator accepted reaches a terminal state.
	var left []*podiumv1.Task
	_ = waitUntil(max(time.Until(settleBy), time.Minute), "every task to reach a terminal state", func() bool {
		var err error
		left, err = c.listTasks(activeStates...)
		return err == nil && len(left) == 0
	})
	all, err := c.listTasks()
	if err != nil {
		t.Fatalf("list the tasks: %v", err)
	}
	byID := map[string]*podiumv1.Task{}
	for _, tk := range all {
		byID[tk.Id] = tk
	}
	h.mu.Lock()
	for id, s := range h.tasks {
		if byID[id] == nil {
			v.add("task %s (%s) was accepted but the coordinator does not list it", id, s.kind)
		}
	}
	h.mu.Unlock()

	// The engines' records, once every task has ended.
	runs := map[string][]run{}
	for _, w := range watches {
		for _, r := range w.snapshot() {
			runs[r.task] = append(runs[r.task], r)
		}
	}
	k := &checker{c: c, h: h, n: n, watches: watches, v: v, states: map[string]int{}, reasons: map[string]int{}}
	// Four tasks at a time: an hour's soak leaves thousands, some with
	// megabytes of log each.
	full := map[string]*podiumv1.Task{}
	var fullMu sync.Mutex
	ids := make(chan string)
	var checkers sync.WaitGroup
	for range 4 {
		checkers.Add(1)
		go func() {
			defer checkers.Done()
			for id := range ids {
				var tk *podiumv1.Task
				err := c.onAnyReplica(time.Minute, func(ctx context.Context, url string) error {
					res, err := tasksAt(url).Get(ctx, connectReq(id))
					if err != nil {
						return err
					}
					tk = res.Msg.Task
					return nil
				})
				if err != nil {
					v.add("get task %s: %v", id, err)
					continue
				}
				fullMu.Lock()
				full[id] = tk
				fullMu.Unlock()
				h.mu.Lock()
				s := h.tasks[id]
				h.mu.Unlock()
				k.checkTask(tk, s, runs[id])
			}
		}()
	}
	for id := range byID {
		ids <- id
	}
	close(ids)
	checkers.Wait()
	k.checkConcurrency(full, runs)
	dbCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
	k.checkDrains(dbCtx)
	k.checkNoOrphans(dbCtx)
	cancel()
	k.checkEnginesEmpty()
	for _, r := range c.replicas {
		if r.crashed() {
			v.add("replica %s exited on its own", r.name)
		}
	}
	for _, a := range c.agents {
		if a.crashed() {
			v.add("agent %s exited on its own", a.name)
		}
	}

	// The summary, then the verdict.
	w.mu.Lock()
	var kinds2 []string
	for k, n := range w.kinds {
		kinds2 = append(kinds2, fmt.Sprintf("%s=%d", k, n))
	}
	w.mu.Unlock()
	sort.Strings(kinds2)
	var states []string
	for s, n := range k.states {
		states = append(states, fmt.Sprintf("%s=%d", strings.ToLower(s), n))
	}
	sort.Strings(states)
	var reasons []string
	for r, n := range k.reasons {
		reasons = append(reasons, fmt.Sprintf("%d %s", n, r))
	}
	sort.Strings(reasons)
	if len(reasons) == 0 {
		reasons = []string{"none"}
	}
	var breaks []string
	for _, w := range watches {
		w.mu.Lock()
		breaks = append(breaks, fmt.Sprintf("%s=%d", w.name, w.breaks))
		w.mu.Unlock()
	}
	h.mu.Lock()
	werrs := append([]string(nil), h.errs...)
	h.mu.Unlock()
	summary := fmt.Sprintf("soak summary: seed %d (replay: SOAK_SEED=%d SOAK_TIME=%s SOAK_FAULTS=%s make soak)\n"+
		"  faults injected: %s\n  tasks run: %d (%s); submitted by kind: %s\n"+
		"  ended by Podium, not by the task: %s\n"+
		"  engine event streams resubscribed: %s; workload actions no replica took: %d\n  violations: %d",
		seed, seed, durText, kindNames(kinds), n.summary(), k.tasks, strings.Join(states, " "), strings.Join(kinds2, " "), strings.Join(reasons, "; "),
		strings.Join(breaks, " "), len(werrs), len(v.lines))
	t.Log(summary)
	fmt.Println(summary)
	if len(werrs) > 0 {
		t.Logf("workload actions no replica took:\n%s", strings.Join(werrs, "\n"))
	}
	if len(v.lines) > 0 || t.Failed() {
		t.Logf("fault timeline:\n%s", n.timeline())
	}
	for _, l := range v.lines {
		t.Errorf("violation: %s", l)
	}
}

func kindNames(ks []faultKind) string {
	var names []string
	for _, k := range ks {
		names = append(names, k.name)
	}
	return strings.Join(names, ",")
}
