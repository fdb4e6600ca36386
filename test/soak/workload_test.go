package soak

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/coordinator/coordtest"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/proto/podium/v1/podiumv1connect"
)

// submitted is what the workload did with one task: the history the
// checker reads beside what Podium stored.
type submitted struct {
	id   string
	kind string
	// via is "cli" (`podium run`, which printed and exited), "api"
	// (TaskService.Submit) or "schedule" (found at the end, made by the
	// schedule).
	via string
	// want is the output the task prints before its checksum line (one
	// attempt's stdout); nil when only the task's own checksum says what
	// it printed (random bytes).
	want []byte
	// cli is `podium run`'s exit code and stderr (via "cli").
	cliCode   int
	cliStderr string
	// cancelled is set once a Cancel was accepted.
	cancelled bool
	// sent are the inbox messages accepted, in order.
	sent []string
}

// history is the workload's record, appended to by its goroutines.
type history struct {
	mu    sync.Mutex
	tasks map[string]*submitted
	// errs are the workload's own failures to act (a submit no replica
	// took within its deadline): not violations by themselves, counted.
	errs []string
}

func (h *history) add(s *submitted) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.tasks[s.id] = s
}

func (h *history) update(id string, f func(*submitted)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s := h.tasks[id]; s != nil {
		f(s)
	}
}

func (h *history) failed(format string, a ...any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.errs = append(h.errs, fmt.Sprintf(time.Now().UTC().Format("15:04:05.000 ")+format, a...))
}

// Scripts. Each task prints through tee into a file and ends its output
// with "sha256 HEX", the task's own checksum of what it printed before, so
// a stored log can be checked byte for byte whatever the faults did.
func checksummed(body string) string {
	return `mkdir -p /tmp && { ` + body + `; } | tee /tmp/soak.out && echo "sha256 $(sha256sum < /tmp/soak.out | cut -c1-64)"`
}

func linesScript(n int, every time.Duration, code int) (string, []byte) {
	var want bytes.Buffer
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&want, "line %d of %d\n", i, n)
	}
	return checksummed(fmt.Sprintf(`for i in $(seq 1 %[1]d); do echo "line $i of %[1]d"; sleep %[2]g; done`, n, every.Seconds())) +
		fmt.Sprintf("; exit %d", code), want.Bytes()
}

func floodScript(n int) (string, []byte) {
	return checksummed(fmt.Sprintf("yes 0123456789abcdef | head -c %d", n)),
		bytes.Repeat([]byte("0123456789abcdef\n"), n/17+1)[:n]
}

// artifactScript writes n random bytes as the artifact blob.bin and prints
// "artifact HEX", its sha256.
func artifactScript(n int) string {
	return checksummed(fmt.Sprintf(`A=/workspace/.podium/artifacts; mkdir -p $A && head -c %d /dev/urandom > $A/blob.bin && `+
		`echo "artifact $(sha256sum < $A/blob.bin | cut -c1-64)"`, n))
}

// inboxScript waits for two messages (`podium-runner ask`) and prints them.
func inboxScript() string {
	return checksummed(`echo waiting; for i in 1 2; do echo "got $(podium-runner ask)"; done`)
}

var taskIDRe = regexp.MustCompile(`task_[0-9A-Z]{26}`)

// workload submits tasks of every kind at random moments, never more than
// maxActive of its own at once, until ctx ends.
type workload struct {
	c     *cluster
	h     *history
	rng   *rand.Rand
	image string
	// active counts tasks the workload still follows (runs in progress).
	active atomic.Int32
	wg     sync.WaitGroup
	kinds  map[string]int
	mu     sync.Mutex
}

const maxActive = 8

var groups = []string{"alice", "bob", "carol"}

func (w *workload) count(kind string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.kinds[kind]++
}

func (w *workload) loop(ctx context.Context) {
	for ctx.Err() == nil {
		if w.active.Load() < maxActive {
			w.one(ctx)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(300+w.rng.IntN(1500)) * time.Millisecond):
		}
	}
	w.wg.Wait()
}

// go runs f as a followed task of the workload.
func (w *workload) follow(f func()) {
	w.active.Add(1)
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer w.active.Add(-1)
		f()
	}()
}

func (w *workload) one(ctx context.Context) {
	group := groups[w.rng.IntN(len(groups))]
	spec := &podiumv1.TaskSpec{Image: w.image, Group: group, Pull: "never"}
	var want []byte
	var script string
	kind := ""
	switch n := w.rng.IntN(100); {
	case n < 20:
		kind = "cli"
		code := []int{0, 0, 3}[w.rng.IntN(3)]
		script, want = linesScript(5+w.rng.IntN(30), 50*time.Millisecond, code)
		w.count(kind)
		w.follow(func() { w.cli(script, want) })
		return
	case n < 35:
		kind = "short"
		script, want = linesScript(1+w.rng.IntN(10), 20*time.Millisecond, []int{0, 1}[w.rng.IntN(2)])
	case n < 45:
		kind = "long"
		script, want = linesScript(100+w.rng.IntN(150), 100*time.Millisecond, 0)
		spec.RetryOnNodeLoss = true
		spec.MaxAttempts = 3
	case n < 55:
		kind = "flood"
		// Whole lines, so that the checksum line starts a line of its own.
		script, want = floodScript((1 + w.rng.IntN(4)) << 20 / 17 * 17)
		spec.RetryOnNodeLoss = true
		spec.MaxAttempts = 2
	case n < 65:
		kind = "artifact"
		script = artifactScript((16 + w.rng.IntN(512)) << 10)
	case n < 72:
		kind = "inbox"
		script = inboxScript()
		spec.TimeoutSeconds = 90
	case n < 80:
		kind = "cancel"
		script, want = linesScript(300, 100*time.Millisecond, 0)
	case n < 88:
		kind = "retry"
		script, want = checksummed(`echo try`)+"; exit 7", []byte("try\n")
		spec.Retry = &podiumv1.RetryPolicy{Attempts: 3, OnExitCodes: []int32{7}, BackoffSeconds: 1, MaxBackoffSeconds: 2}
	default:
		kind = "concurrency"
		script, want = linesScript(20+w.rng.IntN(20), 100*time.Millisecond, 0)
		if w.rng.IntN(2) == 0 {
			spec.Concurrency = &podiumv1.Concurrency{Key: "soak-one", Limit: 1}
		} else {
			spec.Concurrency = &podiumv1.Concurrency{Key: "soak-two", Limit: 2}
		}
	}
	spec.Command = []string{"sh", "-c", script}
	w.count(kind)
	cancelAfter := time.Duration(1000+w.rng.IntN(8000)) * time.Millisecond
	w.follow(func() {
		id, err := w.submit(spec)
		if err != nil {
			w.h.failed("submit a %s task: %v", kind, err)
			return
		}
		w.h.add(&submitted{id: id, kind: kind, via: "api", want: want})
		switch kind {
		case "cancel":
			select {
			case <-ctx.Done():
				return
			case <-time.After(cancelAfter):
			}
			err := w.c.onAnyReplica(time.Minute, func(ctx context.Context, url string) error {
				_, err := tasksAt(url).Cancel(ctx, connect.NewRequest(&podiumv1.CancelRequest{Id: id}))
				return err
			})
			if err != nil {
				w.h.failed("cancel %s: %v", id, err)
				return
			}
			w.h.update(id, func(s *submitted) { s.cancelled = true })
		case "inbox":
			w.sendInbox(ctx, id)
		}
	})
}

// submit submits spec at one replica or another. A submit whose answer was
// lost may have made a task all the same: the checker finds it among the
// tasks listed at the end and holds it to every invariant but the ones
// about what the workload expected of it.
func (w *workload) submit(spec *podiumv1.TaskSpec) (string, error) {
	var id string
	err := w.c.onAnyReplica(time.Minute, func(ctx context.Context, url string) error {
		res, err := tasksAt(url).Submit(ctx, connect.NewRequest(&podiumv1.SubmitRequest{Spec: spec}))
		if err != nil {
			return err
		}
		id = res.Msg.Task.Id
		return nil
	})
	return id, err
}

// sendInbox sends the task its two messages once it runs.
func (w *workload) sendInbox(ctx context.Context, id string) {
	err := waitUntil(3*time.Minute, "inbox task "+id+" to run", func() bool {
		if ctx.Err() != nil {
			return true
		}
		var state podiumv1.TaskState
		_ = w.c.onAnyReplica(10*time.Second, func(ctx context.Context, url string) error {
			res, err := tasksAt(url).Get(ctx, connect.NewRequest(&podiumv1.GetRequest{Id: id}))
			if err == nil {
				state = res.Msg.Task.State
			}
			return err
		})
		return state == podiumv1.TaskState_TASK_STATE_RUNNING || state >= podiumv1.TaskState_TASK_STATE_SUCCEEDED
	})
	if err != nil || ctx.Err() != nil {
		return
	}
	for _, m := range []string{"m1", "m2"} {
		err := w.c.onAnyReplica(30*time.Second, func(ctx context.Context, url string) error {
			_, err := tasksAt(url).Send(ctx, connect.NewRequest(&podiumv1.SendRequest{Id: id, Text: m}))
			return err
		})
		if err != nil {
			// A task that ended, or one that cannot be reached: the
			// rest is not sent, in order.
			return
		}
		w.h.update(id, func(s *submitted) { s.sent = append(s.sent, m) })
	}
}

// cli runs a task through `podium run` against the three replicas and
// records what it exited with.
func (w *workload) cli(script string, want []byte) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	_, stderr, code, err := podiumCLI(ctx, w.c.servers(), "run", "--image", w.image, "--", "sh", "-c", script)
	id := taskIDRe.FindString(string(stderr))
	if err != nil || id == "" {
		w.h.failed("podium run (exit %d, %v) named no task; stderr:\n%s", code, err, stderr)
		return
	}
	w.h.add(&submitted{id: id, kind: "cli", via: "cli", want: want, cliCode: code, cliStderr: string(stderr)})
}

// startSchedule makes a schedule that submits a short task every minute.
func (w *workload) startSchedule() error {
	script, _ := linesScript(3, 10*time.Millisecond, 0)
	return w.c.onAnyReplica(time.Minute, func(ctx context.Context, url string) error {
		_, err := schedulesAt(url).Create(ctx, connect.NewRequest(&podiumv1.ScheduleServiceCreateRequest{
			Name: "soak-every-minute", Cron: "* * * * *",
			Spec: &podiumv1.TaskSpec{Image: w.image, Command: []string{"sh", "-c", script}, Group: "dave", Pull: "never"},
		}))
		return err
	})
}

// schedulesAt is a ScheduleService client with the test token.
func schedulesAt(url string) podiumv1connect.ScheduleServiceClient {
	auth := connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			req.Header().Set("Authorization", "Bearer "+coordtest.Token)
			return next(ctx, req)
		}
	})
	return podiumv1connect.NewScheduleServiceClient(httpClient, url, connect.WithInterceptors(auth))
}

// pauseSchedule pauses the workload's schedule, so that the fleet can
// settle with nothing new coming.
func pauseSchedule(t *testing.T, c *cluster) {
	err := c.onAnyReplica(2*time.Minute, func(ctx context.Context, url string) error {
		_, err := schedulesAt(url).Pause(ctx, connect.NewRequest(&podiumv1.ScheduleServicePauseRequest{Name: "soak-every-minute"}))
		return err
	})
	if err != nil {
		t.Errorf("pause the schedule: %v", err)
	}
}

func connectReq(id string) *connect.Request[podiumv1.GetRequest] {
	return connect.NewRequest(&podiumv1.GetRequest{Id: id})
}
