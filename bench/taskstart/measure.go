package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"syscall"
	"time"

	"connectrpc.com/connect"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// milestone is a point in a run's life; step says what happens between the
// milestone before it and this one.
type milestone struct {
	name string
	step string
	// after marks a milestone past the end the user waits for: its step
	// runs from the milestone named after instead of the one before, and
	// is left out of the total.
	after string
}

// The milestones of a Podium run, in the order they happen. The clocks are
// the benchmark's (exec, exit), Postgres's now() (created_at, SCHEDULED and
// finished_at: the start of the writing transaction), the agent's (the
// statuses it reports) and the Docker engine's (its events), all this
// machine's wall clock.
var podiumMilestones = []milestone{
	{"exec podium run", "", ""},
	{"task stored", "CLI starts, dials, Submit (created_at)", ""},
	{"SCHEDULED", "scheduler places it (coordinator)", ""},
	{"PROVISIONING", "Assign reaches the agent (agent)", ""},
	{"network created", "image inspect, task network create (none when pooled)", ""},
	{"volume created", "egress rules, workspace volume create", ""},
	{"container created", "container create", ""},
	{"container started", "container start", ""},
	{"RUNNING", "agent reports it (agent)", ""},
	{"container exited", "podium-runner runs `true`", ""},
	{"container removed", "tail drained, container remove", ""},
	{"SUCCEEDED", "agent reports it (agent)", ""},
	{"finished stored", "event sent, ingested (finished_at)", ""},
	{"podium run exited", "CLI hears the end, exits", ""},
	// The agent removes the network and volume after it has reported
	// the end, off the path the user waits on.
	{"network removed", "network remove, after SUCCEEDED", "SUCCEEDED"},
	{"volume removed", "volume remove, after SUCCEEDED", "SUCCEEDED"},
}

// The indexes of the milestones of a Podium run that are not Docker events.
const (
	pmExec, pmStored, pmScheduled, pmProvisioning = 0, 1, 2, 3
	pmNetwork, pmRunning, pmSucceeded, pmFinished = 4, 8, 11, 12
	pmExited                                      = 13
)

var dockerMilestones = []milestone{
	{"exec docker run", "", ""},
	{"container created", "CLI starts, container create", ""},
	{"container started", "attach, container start", ""},
	{"container exited", "`true` runs", ""},
	{"container removed", "--rm removes it", ""},
	{"docker run exited", "CLI hears it, exits", ""},
}

// mark is a milestone's time from exec; ok is false when it was not seen.
type mark struct {
	at time.Duration
	ok bool
}

type runResult struct {
	wall  time.Duration
	marks []mark
	id    string // the task's id, or the docker run's container name
	// pooled says the task ran on a network of the agent's warm pool,
	// made before the run began: its "network created" is not the run's.
	pooled bool
}

type results struct {
	podium, docker []runResult
}

// measure runs the warm-ups, then alternates the two commands.
func measure(ctx context.Context, log *slog.Logger, cfg config, e *env, w *dockerWatch) (*results, error) {
	res := &results{}
	for i := -cfg.warmup; i < cfg.runs; i++ {
		p, err := podiumRun(ctx, e, w, cfg.image)
		if err != nil {
			return nil, err
		}
		d, err := dockerRun(ctx, w, cfg.image, i+cfg.warmup)
		if err != nil {
			return nil, err
		}
		if i < 0 {
			log.Info("warm-up", "podium", p.wall.Round(time.Millisecond), "docker", d.wall.Round(time.Millisecond))
			continue
		}
		res.podium = append(res.podium, p)
		res.docker = append(res.docker, d)
		log.Info("run", "n", i+1, "podium", p.wall.Round(time.Millisecond), "docker", d.wall.Round(time.Millisecond))
	}
	return res, nil
}

var taskIDRe = regexp.MustCompile(`task_[0-9A-Z]{26}`)

// timed runs cmd to its end and returns its wall time and when it began.
func timed(cmd *exec.Cmd) (begin time.Time, wall time.Duration, stdout, stderr []byte, err error) {
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	begin = time.Now()
	err = cmd.Run()
	wall = time.Since(begin)
	return begin, wall, out.Bytes(), errb.Bytes(), err
}

// podiumRun times one `podium run --image IMG -- true`, then reads where its
// time went: the task's timestamps and status events through the API, and
// the engine's events about its network, volume and container.
func podiumRun(ctx context.Context, e *env, w *dockerWatch, image string) (runResult, error) {
	cmd := e.podiumCmd(ctx, "run", "--image", image, "--", "true")
	begin, wall, _, stderr, err := timed(cmd)
	if ctx.Err() != nil {
		return runResult{}, ctx.Err()
	}
	if err != nil {
		return runResult{}, fmt.Errorf("podium run: %v\n%s", err, stderr)
	}
	id := string(taskIDRe.Find(stderr))
	if id == "" {
		return runResult{}, fmt.Errorf("podium run printed no task id:\n%s", stderr)
	}
	r := runResult{wall: wall, id: id, marks: make([]mark, len(podiumMilestones))}
	set := func(i int, t time.Time, ok bool) {
		if ok && !t.IsZero() {
			r.marks[i] = mark{at: t.Sub(begin), ok: true}
		}
	}
	set(pmExec, begin, true)
	set(pmExited, begin.Add(wall), true)

	got, err := e.api.tasks.Get(ctx, connect.NewRequest(&podiumv1.GetRequest{Id: id}))
	if err != nil {
		return r, fmt.Errorf("get task %s: %w", id, err)
	}
	task := got.Msg.GetTask()
	if task.GetState() != podiumv1.TaskState_TASK_STATE_SUCCEEDED {
		return r, fmt.Errorf("task %s ended %s: %s", id, task.GetState(), task.GetReason())
	}
	set(pmStored, task.GetCreatedAt().AsTime(), task.GetCreatedAt() != nil)
	set(pmFinished, task.GetFinishedAt().AsTime(), task.GetFinishedAt() != nil)

	status, err := statusTimes(ctx, e.api, id)
	if err != nil {
		return r, err
	}
	for i, s := range map[int]podiumv1.TaskState{
		pmScheduled: podiumv1.TaskState_TASK_STATE_SCHEDULED, pmProvisioning: podiumv1.TaskState_TASK_STATE_PROVISIONING,
		pmRunning: podiumv1.TaskState_TASK_STATE_RUNNING, pmSucceeded: podiumv1.TaskState_TASK_STATE_SUCCEEDED,
	} {
		t, ok := status[s]
		set(i, t, ok)
	}

	// The agent's names for the attempt's objects (agent/executor). Its
	// network is the one its container joined: a network of its own, of
	// the same name, or one of the agent's warm pool.
	name := "podium-" + id + "-" + strconv.Itoa(int(max(task.GetAttempt(), 1)))
	vol := name + "-workspace"
	network := name
	if created, ok := w.waitFor(begin, 2*time.Second, about("container", "create", name)); ok {
		if joined, ok := w.waitFor(begin, 2*time.Second, func(ev dockerEvent) bool {
			return ev.Type == "network" && ev.Action == "connect" && ev.Actor.Attributes["container"] == created.Actor.ID
		}); ok {
			network = joined.name()
		}
	}
	for i, q := range map[int][3]string{
		5: {"volume", "create", vol},
		6: {"container", "create", name}, 7: {"container", "start", name}, 9: {"container", "die", name},
		10: {"container", "destroy", name}, 14: {"network", "destroy", network}, 15: {"volume", "destroy", vol},
	} {
		t, ok := w.wait(q[0], q[1], q[2], begin, 2*time.Second)
		set(i, t, ok)
	}
	// A pool network was made before the run, by the agent on its own
	// time: only a network created after exec is the run's.
	// Every other event of the run has arrived by now, so this one is not
	// waited for.
	if ev, ok := w.find(begin, about("network", "create", network)); ok && !ev.time().Before(begin) {
		set(pmNetwork, ev.time(), true)
	} else {
		r.pooled = network != name
	}
	return r, nil
}

// statusTimes reads the task's log and returns when each status was first
// reported.
func statusTimes(ctx context.Context, a *api, id string) (map[podiumv1.TaskState]time.Time, error) {
	stream, err := a.tasks.Events(ctx, connect.NewRequest(&podiumv1.EventsRequest{Id: id}))
	if err != nil {
		return nil, fmt.Errorf("events of %s: %w", id, err)
	}
	defer stream.Close()
	out := map[podiumv1.TaskState]time.Time{}
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		st := ev.GetStatus()
		if st == nil || ev.GetTime() == nil {
			continue
		}
		if _, seen := out[st.GetState()]; !seen {
			out[st.GetState()] = ev.GetTime().AsTime()
		}
	}
	if err := stream.Err(); err != nil {
		return nil, fmt.Errorf("events of %s: %w", id, err)
	}
	return out, nil
}

// dockerRun times one `docker run --rm IMG true`. The container is named, so
// its events can be found, and labelled, so that cleanup finds it should the
// benchmark be interrupted mid-run.
func dockerRun(ctx context.Context, w *dockerWatch, image string, n int) (runResult, error) {
	name := fmt.Sprintf("podium-bench-taskstart-%d-%d", os.Getpid(), n)
	cmd := exec.CommandContext(ctx, "docker", "run", "--rm", "--name", name, "--label", benchLabel(), image, "true")
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGINT) }
	cmd.WaitDelay = 15 * time.Second
	begin, wall, _, stderr, err := timed(cmd)
	if ctx.Err() != nil {
		return runResult{}, ctx.Err()
	}
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return runResult{}, fmt.Errorf("docker run exited %d:\n%s", ee.ExitCode(), stderr)
		}
		return runResult{}, fmt.Errorf("docker run: %v", err)
	}
	r := runResult{wall: wall, id: name, marks: make([]mark, len(dockerMilestones))}
	r.marks[0] = mark{at: 0, ok: true}
	r.marks[len(dockerMilestones)-1] = mark{at: wall, ok: true}
	for i, action := range map[int]string{1: "create", 2: "start", 3: "die", 4: "destroy"} {
		if t, ok := w.wait("container", action, name, begin, 2*time.Second); ok {
			r.marks[i] = mark{at: t.Sub(begin), ok: true}
		}
	}
	return r, nil
}

func benchLabel() string { return "podium-bench.taskstart=" + strconv.Itoa(os.Getpid()) }
