package faults

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/coordinator/coordtest"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/proto/podium/v1/podiumv1connect"
	"github.com/podiumhq/podium/test/testenv/dockertest"
	"github.com/podiumhq/podium/test/testenv/pgtest"
	"github.com/podiumhq/podium/test/testenv/wait"
)

// memoryCgroup makes a cgroup v1 memory control group of the test's own
// with the limit (and no swap beyond it), and removes it when the test ends,
// after whatever the test started in it (register it before those).
func memoryCgroup(t *testing.T, limit int64) string {
	t.Helper()
	root := "/sys/fs/cgroup/memory"
	if _, err := os.Stat(filepath.Join(root, "memory.limit_in_bytes")); err != nil {
		t.Fatalf("this row needs the cgroup v1 memory controller at %s (and root): %v", root, err)
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	dir := filepath.Join(root, fmt.Sprintf("podium-test-%d-%s", os.Getpid(), hex.EncodeToString(b)))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatalf("make the memory control group: %v", err)
	}
	t.Cleanup(func() {
		// The kernel refuses while a process is still in it: the replica's
		// own cleanup (registered later, so run earlier) has killed it, and
		// the group empties as soon as it is reaped.
		var err error
		for range 100 {
			if err = os.Remove(dir); err == nil {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Errorf("remove the memory control group %s: %v", dir, err)
	})
	write := func(file, v string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, file), []byte(v), 0); err != nil {
			t.Fatalf("write %s to %s: %v", v, file, err)
		}
	}
	write("memory.limit_in_bytes", strconv.FormatInt(limit, 10))
	if _, err := os.Stat(filepath.Join(dir, "memory.memsw.limit_in_bytes")); err == nil {
		write("memory.memsw.limit_in_bytes", strconv.FormatInt(limit, 10))
	}
	return dir
}

// oomKills is the control group's count of processes the kernel's OOM
// killer killed in it.
func oomKills(t *testing.T, cg string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(cg, "memory.oom_control"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "oom_kill "); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				t.Fatalf("memory.oom_control: %q", l)
			}
			return n
		}
	}
	t.Fatalf("memory.oom_control has no oom_kill counter (a kernel older than 4.13):\n%s", b)
	return 0
}

// startReplicaInCgroup starts a replica whose process is in the control
// group cg from its first instruction: a shell puts itself there, then
// becomes the replica.
func startReplicaInCgroup(t *testing.T, databaseURL, cg string, flags ...string) *Replica {
	t.Helper()
	wrap := []string{"sh", "-c", `echo $$ > "$0" && exec "$@"`, filepath.Join(cg, "cgroup.procs")}
	return startReplica(t, "", databaseURL, FreeAddr(t), wrap, flags)
}

// bigSpec is a task spec of about n KiB (its env), carrying label, that
// no node of the test carries: it stays queued.
func bigSpec(image, label string, n int) *podiumv1.TaskSpec {
	env := map[string]string{}
	for i := 0; n > 0; i++ {
		k := min(n, 30)
		env[fmt.Sprintf("PAD_%d", i)] = strings.Repeat("x", k<<10)
		n -= k
	}
	return &podiumv1.TaskSpec{Image: image, Command: []string{"true"}, Env: env, Labels: []string{label}}
}

// floodTally counts what the flood's calls got.
type floodTally struct {
	ok, shed, other atomic.Int64
	mu              sync.Mutex
	firstOther      []string
	badShed         []string
}

// note records one call's outcome. A shed call must be Unavailable, say
// that the replica is shedding load, and carry a Retry-After.
func (f *floodTally) note(what string, err error) {
	if err == nil {
		f.ok.Add(1)
		return
	}
	var ce *connect.Error
	if errors.As(err, &ce) && strings.Contains(ce.Message(), "shedding load") {
		f.shed.Add(1)
		if ce.Code() != connect.CodeUnavailable || ce.Meta().Get("Retry-After") == "" {
			f.mu.Lock()
			if len(f.badShed) < 5 {
				f.badShed = append(f.badShed, fmt.Sprintf("%s: code %v, Retry-After %q: %v", what, ce.Code(), ce.Meta().Get("Retry-After"), err))
			}
			f.mu.Unlock()
		}
		return
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return // the flood ending
	}
	f.other.Add(1)
	f.mu.Lock()
	if len(f.firstOther) < 10 {
		f.firstOther = append(f.firstOther, what+": "+err.Error())
	}
	f.mu.Unlock()
}

// TestCoordinatorFloodedUnderAMemoryLimit: a replica runs in a memory
// control group of 256 MiB and is flooded for 20 s by many clients at once:
// submits of 200 KiB specs, lists of a thousand of those, and hundreds of
// followers of a running task. It must shed what it cannot hold, answering
// Unavailable with "shedding load" and a Retry-After rather than being
// OOM-killed (the group's oom_kill count stays 0 and the process does not
// die); the task running meanwhile ends byte-exact; once the flood stops the
// replica serves normally (a list and a new task's run succeed). The replica
// found its limit in its control group by itself (--memory-limit auto).
func TestCoordinatorFloodedUnderAMemoryLimit(t *testing.T) {
	t.Parallel()
	const (
		limit      = 256 << 20
		floodFor   = 20 * time.Second
		seeds      = 100
		specKiB    = 200
		submitters = 16
		listers    = 16
		followers  = 300
	)
	cg := memoryCgroup(t, limit)
	db := pgtest.NewDatabaseIn(t, pgtest.NewCluster(t))
	r := startReplicaInCgroup(t, db.URL, cg)
	a := EnrollAgent(t, r, r.URL())
	a.Start()
	r.WaitNode(t, a.Node, podiumv1.NodeStatus_NODE_STATUS_ONLINE)
	image := dockertest.EnsureImage(t)

	// Queued tasks of large specs, so that a list of them is large.
	for i := range seeds {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := r.Tasks().Submit(ctx, connect.NewRequest(&podiumv1.SubmitRequest{Spec: bigSpec(image, "podium-flood=seed", specKiB)}))
		cancel()
		if err != nil {
			t.Fatalf("submit seed task %d: %v", i, err)
		}
	}

	w := Workload{Lines: 60, Every: 500 * time.Millisecond, Code: 3}
	run := StartRun(t, []string{r.URL()}, w.Args(t)...)
	run.WaitStdout(t, w.Line(2))
	id := run.TaskID(t)

	// Clients of their own connections: one HTTP/2 connection carries at
	// most 250 streams at once.
	clients := make([]podiumv1connect.TaskServiceClient, 8)
	for i := range clients {
		clients[i] = coordtest.TaskClient(coordtest.HTTPClient(), r.URL())
	}
	ctx, stop := context.WithTimeout(context.Background(), floodFor)
	defer stop()
	var (
		tally floodTally
		wg    sync.WaitGroup
	)
	loop := func(i int, call func(c podiumv1connect.TaskServiceClient) (string, error)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := clients[i%len(clients)]
			for ctx.Err() == nil {
				what, err := call(c)
				tally.note(what, err)
				if err != nil && ctx.Err() == nil {
					// What a client told to retry later does; without it a
					// refused call would spin on two cores.
					time.Sleep(100 * time.Millisecond)
				}
			}
		}()
	}
	for i := range submitters {
		loop(i, func(c podiumv1connect.TaskServiceClient) (string, error) {
			_, err := c.Submit(ctx, connect.NewRequest(&podiumv1.SubmitRequest{Spec: bigSpec(image, "podium-flood=submit", specKiB)}))
			return "submit", err
		})
	}
	for i := range listers {
		loop(i, func(c podiumv1connect.TaskServiceClient) (string, error) {
			_, err := c.List(ctx, connect.NewRequest(&podiumv1.ListRequest{Limit: 1000, Label: "podium-flood=seed"}))
			return "list", err
		})
	}
	for i := range followers {
		loop(i, func(c podiumv1connect.TaskServiceClient) (string, error) {
			s, err := c.Events(ctx, connect.NewRequest(&podiumv1.EventsRequest{Id: id, Follow: true}))
			if err != nil {
				return "follow", err
			}
			defer s.Close()
			for s.Receive() {
			}
			return "follow", s.Err()
		})
	}
	<-ctx.Done()
	wg.Wait()
	peak, _ := os.ReadFile(filepath.Join(cg, "memory.max_usage_in_bytes"))
	t.Logf("the flood's calls: %d answered, %d shed, %d failed otherwise; the control group's peak memory use: %s bytes",
		tally.ok.Load(), tally.shed.Load(), tally.other.Load(), strings.TrimSpace(string(peak)))

	if how := r.crashed(); how != "" {
		t.Fatalf("the replica died during the flood %s (the control group's oom_kill count is %d); the end of its log:\n%s",
			how, oomKills(t, cg), lastLines(r.Log(), 30))
	}
	if n := oomKills(t, cg); n != 0 {
		t.Fatalf("the kernel's OOM killer killed %d processes in the replica's control group", n)
	}
	if tally.shed.Load() == 0 {
		t.Errorf("no call of the flood was shed (%d answered): the flood did not reach the replica's bounds", tally.ok.Load())
	}
	if len(tally.badShed) > 0 {
		t.Errorf("shed calls must be Unavailable with a Retry-After:\n%s", strings.Join(tally.badShed, "\n"))
	}
	if len(tally.firstOther) > 0 {
		t.Errorf("%d of the flood's calls failed other than by being shed; the first:\n%s", tally.other.Load(), strings.Join(tally.firstOther, "\n"))
	}

	// Once the flood has stopped, the replica serves as before.
	wait.For(t, nodeWithin, "a list of the seed tasks to be answered after the flood", func() bool {
		lctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		res, err := r.Tasks().List(lctx, connect.NewRequest(&podiumv1.ListRequest{Limit: 1000, Label: "podium-flood=seed"}))
		return err == nil && len(res.Msg.Tasks) == seeds
	})
	w.Check(t, r, run)
	after := Workload{Lines: 3, Every: 100 * time.Millisecond}
	w2 := StartRun(t, []string{r.URL()}, after.Args(t)...)
	after.Check(t, r, w2)

	if !strings.Contains(r.Log(), `msg="load shedding"`) || !strings.Contains(r.Log(), "memory_limit_bytes="+strconv.Itoa(limit)) {
		t.Errorf("the replica did not log that it found its control group's memory limit (%d bytes); its log:\n%s", limit, lastLines(r.Log(), 60))
	}
	NothingLeft(t, a.Node)
}
