package executor

// The warm pool of task networks (Config.NetworkPool).
//
// Creating a bridge network is the slowest thing the engine does for a task
// that is not the task itself: dockerd allocates a subnet, makes the bridge
// and rewrites its iptables rules (tens of milliseconds on a quiet machine,
// far more on a busy one), and a user waiting on `podium run` waits for it.
// So the executor keeps a few networks made ahead of any task. A task takes
// one as it starts, instead of creating its own, and the pool makes another
// in the background once the task's container has started.
//
// A pool network is still private to one task: the pool hands each out
// once, and it is removed after its task exactly as a task's own network
// is, never given back. Its egress rules are installed when a task takes it,
// with that task's allow_egress, before any container joins it, as for a
// network made for the task (before that it has no containers, and a bridge
// without rules reaches nothing anyway: egress's catch-all REJECT).
//
// A Docker network can be neither renamed nor relabelled, so a pool network
// keeps its pool name (podium-pool-…) and labels (LabelNode, LabelPool)
// for life, without the task's labels. What ties it to its task is the
// run's memory and, for an agent that restarts meanwhile, networkFile in
// the attempt's host directory, written before any container joins the
// network. The pool knows every pool network this process made or adopted
// from a resumed attempt (owned); any other pool network of this node is
// stale, left by an earlier process that stopped without removing it, and
// RemoveOrphans and SweepDangling remove it (the engine refuses while a
// container uses it).

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"golang.org/x/sys/unix"

	"github.com/podiumhq/podium/agent/egress"
)

// LabelPool marks a network the executor made for its warm pool
// (Config.NetworkPool), whether a task has taken it or not.
const LabelPool = "podium.pool"

// DefaultNetworkPool is how many networks podium-agent keeps ready unless
// told otherwise: one for the next task and one for the task after it,
// which covers tasks started one after another without holding much of the
// engine's address pools.
const DefaultNetworkPool = 2

// poolPrefix starts the name of every pool network.
const poolPrefix = "podium-pool-"

// networkFile, in an attempt's host directory, holds the name of the pool
// network the attempt took, for an agent that restarts while the attempt
// still has it. An attempt without the file has a network of its own,
// NetworkName.
const networkFile = "network"

// poolRetry bounds the wait between failed tries to make a pool network:
// an engine out of address pools, or stopped, is not asked again and again.
const poolRetry = time.Minute

// poolNet is one network of the pool.
type poolNet struct {
	id, name string
	// bridge is its Linux bridge's name, set only with an egress filter.
	bridge string
}

// netPool is the executor's warm pool of task networks.
type netPool struct {
	e    *Executor
	size int
	kick chan struct{} // a network was taken: make another

	mu    sync.Mutex
	ready []poolNet
	// owned are the names of the pool networks this process made (or is
	// making) or adopted from a resumed attempt, and has not removed.
	owned map[string]bool
	// stop ends the goroutine StartPool started; done is closed when it
	// has removed the networks still ready and returned.
	stop func()
	done chan struct{}
	// closed refuses any take once the pool is stopping.
	closed bool
}

func newPool(e *Executor, size int) *netPool {
	return &netPool{e: e, size: size, kick: make(chan struct{}, 1), owned: map[string]bool{}}
}

// StartPool starts keeping Config.NetworkPool networks ready for the tasks to
// come, in a goroutine of the executor's that StopPool ends; with no pool it
// does nothing. Call it after RemoveOrphans, which removes the pool networks
// an earlier agent process left, and once.
func (e *Executor) StartPool(ctx context.Context) {
	p := e.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.size <= 0 || p.stop != nil || p.closed {
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	p.stop, p.done = cancel, make(chan struct{})
	go p.fill(ctx)
}

// StopPool stops making pool networks and removes those no task has taken,
// waiting until they are gone (each removal bounded by the engine calls'
// timeout). Networks tasks have taken stay theirs. The executor runs tasks
// on networks of their own after it.
func (e *Executor) StopPool() {
	p := e.pool
	p.mu.Lock()
	p.closed = true
	stop, done := p.stop, p.done
	p.mu.Unlock()
	if stop == nil {
		return
	}
	stop()
	<-done
}

// PoolReady is how many networks the warm pool holds ready for the next
// tasks.
func (e *Executor) PoolReady() int {
	p := e.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ready)
}

// fill keeps the pool full until ctx ends, then empties it.
func (p *netPool) fill(ctx context.Context) {
	defer close(p.done)
	defer p.drain(ctx)
	var wait time.Duration // after a failure, until the next try
	for {
		for ctx.Err() == nil && p.short() {
			if err := p.make(ctx); err != nil {
				if ctx.Err() != nil {
					return
				}
				wait = min(max(2*wait, time.Second), poolRetry)
				p.e.log.Warn("could not make a network for the warm pool; tasks create their own meanwhile", "err", err, "retry_in", wait)
				break
			}
			wait = 0
		}
		if wait > 0 {
			// Kicks are not heard meanwhile: every task start would
			// otherwise cut the wait short.
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-p.kick:
		}
	}
}

// short says whether the pool holds fewer networks than it should.
func (p *netPool) short() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.closed && len(p.ready) < p.size
}

// make creates one pool network and puts it in the pool. The create is not
// cut short by ctx (the engine would finish it anyway, leaving a network
// nobody knows of); a network made after the pool closed is removed.
func (p *netPool) make(ctx context.Context) error {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	n := poolNet{name: poolPrefix + hex.EncodeToString(b)}
	opts := network.CreateOptions{Driver: "bridge", Labels: map[string]string{LabelNode: p.e.nodeID, LabelPool: "1"}}
	if p.e.egress != nil {
		n.bridge = egress.BridgeName(p.e.nodeID + "/" + n.name)
		opts.Options = map[string]string{egress.BridgeOption: n.bridge}
	}
	p.mu.Lock()
	p.owned[n.name] = true // before it exists: no sweep may take it for stale
	p.mu.Unlock()
	cctx, cancel := apiCtx(ctx, apiTimeout)
	resp, err := p.e.docker.NetworkCreate(cctx, n.name, opts)
	cancel()
	if err != nil {
		p.forget(n.name)
		return err
	}
	n.id = resp.ID
	p.mu.Lock()
	if !p.closed {
		p.ready = append(p.ready, n)
		p.mu.Unlock()
		return nil
	}
	p.mu.Unlock()
	return p.remove(ctx, n)
}

// drain removes the networks still ready, once the pool has closed.
func (p *netPool) drain(ctx context.Context) {
	p.mu.Lock()
	p.closed = true
	ready := p.ready
	p.ready = nil
	p.mu.Unlock()
	for _, n := range ready {
		if err := p.remove(ctx, n); err != nil {
			p.e.log.Warn("could not remove a network of the warm pool; the next agent start removes it", "network", n.name, "err", err)
		}
	}
}

// take hands out a ready network, never the same one twice, or reports
// false when none is ready. A network someone removed meanwhile (`docker
// network prune` removes idle ones) is forgotten and the next one tried.
func (p *netPool) take(ctx context.Context) (poolNet, bool) {
	for {
		p.mu.Lock()
		if p.closed || len(p.ready) == 0 {
			p.mu.Unlock()
			return poolNet{}, false
		}
		n := p.ready[0]
		p.ready = p.ready[1:]
		p.mu.Unlock()
		if p.exists(ctx, n) {
			return n, true
		}
		p.e.log.Warn("a network of the warm pool is gone (removed by hand, or by docker network prune); trying the next", "network", n.name)
		p.forget(n.name)
	}
}

// exists says whether a pool network is still there. With an egress filter
// the agent shares the engine's network namespace (egress.Filter.Open
// insists), and looking for the network's bridge costs no engine call;
// without one, the engine is asked.
func (p *netPool) exists(ctx context.Context, n poolNet) bool {
	if n.bridge != "" {
		_, err := net.InterfaceByName(n.bridge)
		return err == nil
	}
	ictx, cancel := apiCtx(ctx, apiTimeout)
	defer cancel()
	_, err := p.e.docker.NetworkInspect(ictx, n.id, network.InspectOptions{})
	return err == nil
}

// refill asks the pool for another network, if it is short of one. It does
// not wait: the pool's goroutine makes it.
func (p *netPool) refill() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// adopt records a pool network a resumed attempt holds, so that no sweep
// takes it for stale.
func (p *netPool) adopt(name string) {
	p.mu.Lock()
	p.owned[name] = true
	p.mu.Unlock()
}

func (p *netPool) forget(name string) {
	p.mu.Lock()
	delete(p.owned, name)
	p.mu.Unlock()
}

func (p *netPool) owns(name string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.owned[name]
}

// remove removes a pool network and then its egress rules, and forgets it.
func (p *netPool) remove(ctx context.Context, n poolNet) error {
	rctx, cancel := apiCtx(ctx, apiTimeout)
	defer cancel()
	id := n.id
	if id == "" {
		id = n.name
	}
	if err := p.e.docker.NetworkRemove(rctx, id); err != nil && !isNotFound(err) {
		return fmt.Errorf("remove network %s (remove it by hand with `docker network rm %s`): %w", n.name, n.name, err)
	}
	if p.e.egress != nil && egress.IsBridge(n.bridge) {
		if err := p.e.egress.Close(rctx, n.bridge); err != nil {
			return err
		}
	}
	p.forget(n.name)
	return nil
}

// release removes the pool network a finished attempt took, found by name.
// It checks first that the network is a pool network of this node: the name
// may come from networkFile, and nothing else is the attempt's to remove.
func (p *netPool) release(ctx context.Context, name string) error {
	ictx, cancel := apiCtx(ctx, apiTimeout)
	info, err := p.e.docker.NetworkInspect(ictx, name, network.InspectOptions{})
	cancel()
	switch {
	case isNotFound(err):
		p.forget(name)
		return nil
	case err != nil:
		return fmt.Errorf("look at network %s to remove it: %w", name, err)
	case info.Labels[LabelPool] == "" || info.Labels[LabelNode] != p.e.nodeID:
		p.forget(name)
		return fmt.Errorf("network %s is not a pool network of this node; leaving it", name)
	}
	return p.remove(ctx, poolNet{id: info.ID, name: name, bridge: info.Options[egress.BridgeOption]})
}

// removeStale removes this node's pool networks that this process does not
// own: what an earlier agent process left, ready or taken by an attempt
// nobody resumed. The engine refuses to remove one a container still uses,
// which then stays. It returns the names it removed.
func (p *netPool) removeStale(ctx context.Context) ([]string, error) {
	f := filters.NewArgs(filters.Arg("label", LabelNode+"="+p.e.nodeID), filters.Arg("label", LabelPool))
	nets, err := p.e.docker.NetworkList(ctx, network.ListOptions{Filters: f})
	if err != nil {
		return nil, fmt.Errorf("list this node's pool networks: %w", err)
	}
	var removed []string
	var errs []error
	for _, n := range nets {
		if p.owns(n.Name) {
			continue
		}
		if err := p.e.docker.NetworkRemove(ctx, n.ID); err != nil {
			if !isNotFound(err) {
				p.e.log.Debug("a stale pool network stays: the engine refuses to remove it", "network", n.Name, "err", err)
			}
			continue
		}
		removed = append(removed, n.Name)
		p.e.log.Info("removed a network of an earlier agent process's warm pool", "network", n.Name)
		if br := n.Options[egress.BridgeOption]; p.e.egress != nil && egress.IsBridge(br) {
			if err := p.e.egress.Close(ctx, br); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return removed, errors.Join(errs...)
}

// isPoolName says whether name can be a pool network's.
func isPoolName(name string) bool {
	rest, ok := strings.CutPrefix(name, poolPrefix)
	if !ok || len(rest) != 12 {
		return false
	}
	_, err := hex.DecodeString(rest)
	return err == nil
}

// recordNetwork writes the name of the pool network the attempt took into
// its host directory, for an agent that restarts while it holds it.
func (r *run) recordNetwork(name string) error {
	return os.WriteFile(filepath.Join(r.dir, networkFile), []byte(name+"\n"), 0o600)
}

// recordedNetwork is the pool network an earlier agent process recorded for
// the attempt, or "" when it has a network of its own.
//
// The attempt's directory is the agent's, not the task's (only directories
// inside it are mounted), but the name decides which network teardown
// removes, so it is read as what it must be: a regular file, not through a
// link, a name's length at most.
func (r *run) recordedNetwork() string {
	f, err := os.OpenFile(filepath.Join(r.dir, networkFile), os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return ""
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return ""
	}
	b, err := io.ReadAll(io.LimitReader(f, int64(len(poolPrefix)+12+1)))
	if err != nil {
		return ""
	}
	name := strings.TrimSpace(string(b))
	if !isPoolName(name) {
		return ""
	}
	return name
}

// networkName is the name of the attempt's network: the pool network it
// took, or its own.
func (r *run) networkName() string {
	if r.network != "" {
		return r.network
	}
	return NetworkName(r.key)
}
