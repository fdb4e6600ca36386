package soak

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// A fault kind injects one fault and returns what it did and how to heal
// it. skip is set when the kind cannot apply now (a second failover).
type faultKind struct {
	name string
	// hold: the fault lasts a random while before it is healed; false for
	// a fault whose healing is part of it (a graceful restart).
	hold   bool
	inject func(n *nemesis) (what string, heal func() error, skip bool, err error)
}

// faultKinds is every fault the nemesis knows, by the name SOAK_FAULTS
// selects it with.
var faultKinds = []faultKind{
	{"replica-kill", true, func(n *nemesis) (string, func() error, bool, error) {
		r := n.pickReplica()
		r.end(true)
		return "SIGKILL replica " + r.name, r.start, false, nil
	}},
	{"replica-restart", false, func(n *nemesis) (string, func() error, bool, error) {
		r := n.pickReplica()
		r.end(false)
		return "restart replica " + r.name + " (SIGTERM, start)", r.start, false, nil
	}},
	{"leader-kill", true, func(n *nemesis) (string, func() error, bool, error) {
		var leader *replica
		for _, r := range n.c.replicas {
			if r.leads() {
				leader = r
			}
		}
		if leader == nil {
			return "", nil, true, nil
		}
		leader.end(true)
		return "SIGKILL the leader, replica " + leader.name, leader.start, false, nil
	}},
	{"agent-kill", true, func(n *nemesis) (string, func() error, bool, error) {
		a := n.pickAgent()
		a.end(true)
		return "SIGKILL agent " + a.name, a.start, false, nil
	}},
	{"agent-restart", false, func(n *nemesis) (string, func() error, bool, error) {
		a := n.pickAgent()
		a.end(false)
		return "restart agent " + a.name + " (SIGTERM, start)", a.start, false, nil
	}},
	{"agent-partition", true, func(n *nemesis) (string, func() error, bool, error) {
		a := n.pickAgent()
		if err := a.partition(true); err != nil {
			return "", nil, false, err
		}
		return "cut agent " + a.name + " off from every replica", func() error { return a.partition(false) }, false, nil
	}},
	{"agent-freeze", true, func(n *nemesis) (string, func() error, bool, error) {
		a := n.pickAgent()
		if err := a.freeze(true); err != nil {
			return "", nil, false, err
		}
		return "freeze agent " + a.name + " (SIGSTOP), as a hung process", func() error { return a.freeze(false) }, false, nil
	}},
	{"engine-restart", true, func(n *nemesis) (string, func() error, bool, error) {
		i := n.rng.IntN(len(n.c.engines))
		e := n.c.engines[i]
		sig := []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL}[n.rng.IntN(2)]
		e.Stop(sig)
		return fmt.Sprintf("stop the Docker engine of agent %s (%v)", n.c.agents[i].name, sig), func() error { e.Start(); return nil }, false, nil
	}},
	{"pg-partition", true, func(n *nemesis) (string, func() error, bool, error) {
		r := n.pickReplica()
		for _, l := range r.pgLinks {
			l.BlackHole()
		}
		return "cut replica " + r.name + " off from Postgres", func() error {
			for _, l := range r.pgLinks {
				l.Restore()
			}
			return nil
		}, false, nil
	}},
	{"node-partition", true, func(n *nemesis) (string, func() error, bool, error) {
		r := n.pickReplica()
		r.nodeLink.BlackHole()
		return "cut replica " + r.name + " off from its nodes", func() error { r.nodeLink.Restore(); return nil }, false, nil
	}},
	{"replica-partition", true, func(n *nemesis) (string, func() error, bool, error) {
		r := n.pickReplica()
		r.nodeLink.BlackHole()
		for _, l := range r.pgLinks {
			l.BlackHole()
		}
		return "cut replica " + r.name + " off from Postgres and its nodes", func() error {
			r.nodeLink.Restore()
			for _, l := range r.pgLinks {
				l.Restore()
			}
			return nil
		}, false, nil
	}},
	{"pg-restart", true, func(n *nemesis) (string, func() error, bool, error) {
		p := n.c.primary()
		mode := []string{"fast", "immediate"}[n.rng.IntN(2)]
		if err := p.Down(mode); err != nil {
			return "", nil, false, err
		}
		return "stop the Postgres primary (" + mode + ")", p.Up, false, nil
	}},
	{"pg-standby-down", true, func(n *nemesis) (string, func() error, bool, error) {
		n.c.mu.Lock()
		over := n.c.failedOver
		n.c.mu.Unlock()
		if over {
			return "", nil, true, nil
		}
		if err := n.c.standby.Down("fast"); err != nil {
			return "", nil, false, err
		}
		return "stop the synchronous standby (commits wait for it)", n.c.standby.Up, false, nil
	}},
	{"pg-failover", false, func(n *nemesis) (string, func() error, bool, error) {
		n.c.mu.Lock()
		over := n.c.failedOver
		n.c.mu.Unlock()
		if over {
			return "", nil, true, nil
		}
		if err := n.c.pg.Down("immediate"); err != nil {
			return "", nil, false, err
		}
		if err := n.c.standby.Promote(); err != nil {
			return "", nil, false, err
		}
		n.c.mu.Lock()
		n.c.failedOver = true
		n.c.mu.Unlock()
		return "fail Postgres over: the primary quits (immediate), the standby is promoted", func() error { return nil }, false, nil
	}},
	{"s3-stop", true, func(n *nemesis) (string, func() error, bool, error) {
		n.c.s3.Stop()
		return "stop the S3 server", n.c.s3.Restart, false, nil
	}},
	{"disk-full", true, func(n *nemesis) (string, func() error, bool, error) {
		a := n.pickAgent()
		path := filepath.Join(a.dataDir, "soak-fill")
		if err := fill(path); err != nil {
			return "", nil, false, err
		}
		return "fill agent " + a.name + "'s data disk", func() error { return os.Remove(path) }, false, nil
	}},
	{"drain", true, func(n *nemesis) (string, func() error, bool, error) {
		a := n.pickAgent()
		if err := n.c.drain(a.node, true); err != nil {
			return "", nil, false, err
		}
		d := &drainWindow{node: a.node, from: time.Now()}
		n.mu.Lock()
		n.drains = append(n.drains, d)
		n.mu.Unlock()
		return "drain agent " + a.name + "'s node", func() error {
			n.mu.Lock()
			d.to = time.Now()
			n.mu.Unlock()
			return n.c.drain(a.node, false)
		}, false, nil
	}},
}

// fill writes zeros to path until the disk is full.
func fill(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for {
		if _, err := f.Write(buf); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return nil
			}
			return err
		}
	}
}

// drain drains (or undrains) a node at any replica.
func (c *cluster) drain(node string, draining bool) error {
	return c.onAnyReplica(time.Minute, func(ctx context.Context, url string) error {
		_, err := adminAt(url).DrainNode(ctx, connect.NewRequest(&podiumv1.DrainNodeRequest{NodeId: node, Draining: draining}))
		return err
	})
}

// selectFaults is the kinds SOAK_FAULTS names (a comma list; empty or
// "all": every kind).
func selectFaults(spec string) ([]faultKind, error) {
	if spec == "" || spec == "all" {
		return faultKinds, nil
	}
	var out []faultKind
	for _, name := range strings.Split(spec, ",") {
		name = strings.TrimSpace(name)
		i := slices.IndexFunc(faultKinds, func(k faultKind) bool { return k.name == name })
		if i < 0 {
			return nil, fmt.Errorf("SOAK_FAULTS names %q, which is no fault kind; the kinds: %s", name, faultNames())
		}
		out = append(out, faultKinds[i])
	}
	return out, nil
}

func faultNames() string {
	var names []string
	for _, k := range faultKinds {
		names = append(names, k.name)
	}
	return strings.Join(names, ",")
}

// injected is one fault as the nemesis did it.
type injected struct {
	kind, what string
	at, healed time.Time
	err        string
}

type drainWindow struct {
	node     string
	from, to time.Time
}

// nemesis injects one fault at a time at random moments, each healed after
// a random while, until ctx ends; the fault in progress is healed then.
type nemesis struct {
	c     *cluster
	rng   *rand.Rand
	kinds []faultKind

	mu     sync.Mutex
	log    []injected
	drains []*drainWindow
}

func (n *nemesis) pickReplica() *replica { return n.c.replicas[n.rng.IntN(len(n.c.replicas))] }
func (n *nemesis) pickAgent() *agent     { return n.c.agents[n.rng.IntN(len(n.c.agents))] }

func (n *nemesis) loop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(2000+n.rng.IntN(8000)) * time.Millisecond):
		}
		k := n.kinds[n.rng.IntN(len(n.kinds))]
		hold := time.Duration(2000+n.rng.IntN(18000)) * time.Millisecond
		at := time.Now()
		what, heal, skip, err := k.inject(n)
		if skip {
			continue
		}
		rec := injected{kind: k.name, what: what, at: at}
		if err != nil {
			rec.err = "inject: " + err.Error()
			n.record(rec)
			continue
		}
		if k.hold {
			select {
			case <-ctx.Done():
			case <-time.After(hold):
			}
		}
		if err := heal(); err != nil {
			rec.err = "heal: " + err.Error()
		}
		rec.healed = time.Now()
		n.record(rec)
	}
}

func (n *nemesis) record(r injected) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.log = append(n.log, r)
}

// summary counts the faults injected by kind.
func (n *nemesis) summary() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	counts := map[string]int{}
	for _, r := range n.log {
		counts[r.kind]++
	}
	var parts []string
	for k, c := range counts {
		parts = append(parts, fmt.Sprintf("%s=%d", k, c))
	}
	sort.Strings(parts)
	return fmt.Sprintf("%d (%s)", len(n.log), strings.Join(parts, " "))
}

// timeline is every fault, one a line, for a violation's context.
func (n *nemesis) timeline() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var b strings.Builder
	for _, r := range n.log {
		fmt.Fprintf(&b, "%s..%s %-18s %s", r.at.UTC().Format("15:04:05.000"), r.healed.UTC().Format("15:04:05.000"), r.kind, r.what)
		if r.err != "" {
			fmt.Fprintf(&b, " [%s]", r.err)
		}
		b.WriteByte('\n')
	}
	return b.String()
}
