package executor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/podiumhq/podium/internal/taskspec"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// DefaultReadinessTimeout is how long a sidecar gets to become ready when its
// readiness names no timeout.
const DefaultReadinessTimeout = 60 * time.Second

const (
	// readinessInterval is the pause between two readiness probes.
	readinessInterval = 250 * time.Millisecond
	// probeTimeout bounds one probe: a port that swallows SYNs or a
	// handler that hangs must not eat the whole readiness timeout at once.
	probeTimeout = 5 * time.Second
	// sidecarStopGrace is what sidecars get between SIGTERM and SIGKILL
	// when their task has ended. They are helpers; nobody waits on them.
	sidecarStopGrace = 5 * time.Second
	// lastLinesInReason is how many of a failed sidecar's last output lines
	// go into the task's reason.
	lastLinesInReason = 10
)

// sidecar is one sidecar of a run being launched.
type sidecar struct {
	spec *podiumv1.Sidecar
	argv []string
	id   string
}

// startSidecars creates and starts the sidecars, each on the task's network
// under its name, then waits for all of them to be ready at once. ok is false
// when the task must not start; st is then its status (nil: the agent is
// stopping).
func (r *run) startSidecars(ctx context.Context, sidecars []*sidecar) (st *podiumv1.StatusChange, ok bool) {
	for _, sc := range sidecars {
		name := sc.spec.GetName()
		id, err := r.createContainer(ctx, r.sidecarContainer(sc.spec, sc.argv))
		if err != nil {
			if st, stop := r.interrupted(ctx); stop {
				return st, false
			}
			return prepFailed(err, "sidecar %q could not be created: %v", name, err), false
		}
		r.startSidecarTail(ctx, name)
		sctx, cancel := context.WithTimeout(r.prepCtx, apiTimeout)
		err = r.e.docker.ContainerStart(sctx, id, container.StartOptions{})
		cancel()
		if err != nil {
			if st, stop := r.interrupted(ctx); stop {
				return st, false
			}
			if sc.spec.GetPrivileged() && strings.Contains(err.Error(), privilegedCapsError) {
				return failed("%s", privilegedUnsupported(name, err)), false
			}
			return prepFailed(err, "sidecar %q could not be started: %v (check that image %q runs on this machine)", name, err, sc.spec.GetImage()), false
		}
		sc.id = id
		r.log.Info("sidecar started", "sidecar", name, "container", shortID(id))
	}
	if len(sidecars) == 0 {
		return nil, true
	}

	type result struct {
		sc  *sidecar
		err error
	}
	rctx, cancel := context.WithCancel(r.prepCtx)
	defer cancel()
	results := make(chan result, len(sidecars))
	for _, sc := range sidecars {
		r.bg.Add(1)
		go func() {
			defer r.bg.Done()
			results <- result{sc, r.waitReady(rctx, sc)}
		}()
	}
	var first *result
	for range sidecars {
		res := <-results
		if res.err == nil {
			r.note("sidecar %s is ready", res.sc.spec.GetName())
			continue
		}
		if first == nil {
			first = &res
			cancel() // the task will not start; stop waiting for the others
		}
	}
	if first == nil {
		return nil, true
	}
	if st, stop := r.interrupted(ctx); stop {
		return st, false
	}
	name := first.sc.spec.GetName()
	out := lastLines(r.sidecarLog(name), name, lastLinesInReason)
	if out == "" {
		out = "(it printed nothing)"
	}
	r.log.Warn("sidecar not ready; failing the task", "sidecar", name, "err", first.err)
	return failed("sidecar %q %v; its last output:\n%s", name, first.err, out), false
}

// privilegedCapsError is what runc says when it cannot give a container
// the capabilities it asks for: for a privileged one, every capability the
// kernel has, which an engine whose own bounding set is short (one run
// inside a restricted container) does not hold.
const privilegedCapsError = "unable to apply caps"

// privilegedUnsupported is the reason a privileged sidecar fails with on a
// node whose engine cannot start privileged containers at all: nothing in
// the task can fix that, so it says what the operator must.
func privilegedUnsupported(sidecar string, err error) string {
	return fmt.Sprintf("sidecar %q could not be started: this node's Docker engine cannot start privileged containers (%v): "+
		"the engine lacks capabilities in its own bounding set, as one run inside a restricted container does. "+
		"Start agents with --allow-privileged-sidecars only where `docker run --privileged` works", sidecar, err)
}

// waitReady probes a sidecar until its readiness check passes, it exits, or
// its readiness timeout runs out. TCP and HTTP checks are made from the agent
// to the sidecar's address on the task's network, which works with any image;
// a command check runs inside the sidecar (docker exec) and must exit 0.
func (r *run) waitReady(ctx context.Context, sc *sidecar) error {
	rd := sc.spec.GetReadiness()
	var desc string
	var probe func(ctx context.Context, ip string) error
	switch {
	case rd.GetTcpPort() > 0:
		port := strconv.Itoa(int(rd.GetTcpPort()))
		desc = "TCP port " + port
		probe = func(ctx context.Context, ip string) error {
			var d net.Dialer
			c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(ip, port))
			if err != nil {
				return err
			}
			return c.Close()
		}
	case rd.GetHttpPath() != "":
		port := strconv.Itoa(int(rd.GetHttpPort()))
		desc = "HTTP GET :" + port + rd.GetHttpPath()
		probe = func(ctx context.Context, ip string) error {
			return httpReady(ctx, "http://"+net.JoinHostPort(ip, port)+rd.GetHttpPath())
		}
	case len(rd.GetCommand()) > 0:
		desc = fmt.Sprintf("command %q", strings.Join(rd.GetCommand(), " "))
		probe = func(ctx context.Context, _ string) error { return r.execReady(ctx, sc.id, rd.GetCommand()) }
	default:
		return nil // ready once started
	}
	timeout := DefaultReadinessTimeout
	if s := rd.GetTimeoutSeconds(); s > 0 {
		timeout = taskspec.Seconds(s)
	}
	deadline := time.Now().Add(timeout)
	var last error
	for {
		info, err := r.inspect(ctx, sc.id)
		switch {
		case err != nil:
			last = err
		case info.State != nil && !info.State.Running:
			return fmt.Errorf("exited with code %d before it was ready (%s)", info.State.ExitCode, desc)
		default:
			ip := ""
			if info.NetworkSettings != nil {
				if ep := info.NetworkSettings.Networks[r.networkName()]; ep != nil {
					ip = ep.IPAddress
				}
			}
			if ip == "" && probe != nil && rd.GetTcpPort()+rd.GetHttpPort() > 0 {
				last = errors.New("it has no address on the task's network yet")
				break
			}
			pctx, cancel := context.WithTimeout(ctx, min(probeTimeout, max(time.Until(deadline), 100*time.Millisecond)))
			err := probe(pctx, ip)
			cancel()
			if err == nil {
				return nil
			}
			// A probe cut short by the end of the wait says less than the
			// one before it did.
			if last == nil || !errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
				last = err
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("did not become ready within %s (%s: %v)", timeout, desc, last)
		}
		t := time.NewTimer(readinessInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// httpReady is one HTTP readiness probe: any 2xx answer is ready. It uses
// no proxy (a proxy from the agent's environment cannot reach a task's
// private network) and no keep-alive (each probe is its own connection, and
// nothing is left open once the sidecar is ready).
func httpReady(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	c := &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("answered %s", resp.Status)
	}
	return nil
}

// execReady runs a readiness command inside the sidecar and waits for it.
func (r *run) execReady(ctx context.Context, id string, cmd []string) error {
	ex, err := r.e.docker.ContainerExecCreate(ctx, id, container.ExecOptions{Cmd: cmd})
	if err != nil {
		return err
	}
	if err := r.e.docker.ContainerExecStart(ctx, ex.ID, container.ExecStartOptions{Detach: true}); err != nil {
		return err
	}
	for {
		st, err := r.e.docker.ContainerExecInspect(ctx, ex.ID)
		if err != nil {
			return err
		}
		if !st.Running {
			if st.ExitCode != 0 {
				return fmt.Errorf("exited with code %d", st.ExitCode)
			}
			return nil
		}
		t := time.NewTimer(50 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// stopSidecars stops the sidecars once the task has ended, all at once, and
// lets their tails read what they wrote until the end.
func (r *run) stopSidecars(ctx context.Context) {
	var wg sync.WaitGroup
	secs := int(sidecarStopGrace / time.Second)
	for _, sc := range r.spec.GetSidecars() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sctx, cancel := apiCtx(ctx, sidecarStopGrace+apiTimeout)
			defer cancel()
			err := r.e.docker.ContainerStop(sctx, SidecarName(r.key, sc.GetName()), container.StopOptions{Timeout: &secs})
			if err != nil && !isNotFound(err) {
				r.log.Warn("stopping a sidecar failed; it is removed anyway", "sidecar", sc.GetName(), "err", err)
			}
		}()
	}
	wg.Wait()
	r.stopSidecarTails(ctx)
}
