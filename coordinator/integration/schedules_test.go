package integration_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5"

	"github.com/podiumhq/podium/coordinator/coordtest"
	"github.com/podiumhq/podium/coordinator/cron"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/proto/podium/v1/podiumv1connect"
	"github.com/podiumhq/podium/test/testenv/pgtest"
)

// clock is the time the replicas' schedule jobs see; the test moves it, so
// no test waits for a minute to pass.
type clock struct{ ns atomic.Int64 }

func newClock(t time.Time) *clock {
	c := &clock{}
	c.set(t)
	return c
}

func (c *clock) now() time.Time  { return time.Unix(0, c.ns.Load()).UTC() }
func (c *clock) set(t time.Time) { c.ns.Store(t.UnixNano()) }

// t0 is half a minute past a whole minute: a "* * * * *" schedule created
// then first ticks at 10:01:00.
var t0 = time.Date(2026, 1, 5, 10, 0, 30, 0, time.UTC)

func startScheduling(t *testing.T, url string, clk *clock) *coordtest.Replica {
	t.Helper()
	return coordtest.Start(t, url, coordtest.Options{Schedules: cron.Config{Every: 20 * time.Millisecond, Now: clk.now}})
}

func createSchedule(t *testing.T, ctx context.Context, sc podiumv1connect.ScheduleServiceClient, name, cron, overlap string) *podiumv1.Schedule {
	t.Helper()
	res, err := sc.Create(ctx, connect.NewRequest(&podiumv1.ScheduleServiceCreateRequest{
		Name: name, Cron: cron, Overlap: overlap, Spec: &podiumv1.TaskSpec{Image: "busybox"}}))
	if err != nil {
		t.Fatalf("create schedule %s: %v", name, err)
	}
	return res.Msg.Schedule
}

func scheduleOf(t *testing.T, ctx context.Context, sc podiumv1connect.ScheduleServiceClient, name string) *podiumv1.ScheduleServiceGetResponse {
	t.Helper()
	res, err := sc.Get(ctx, connect.NewRequest(&podiumv1.ScheduleServiceGetRequest{Name: name}))
	if err != nil {
		t.Fatalf("get schedule %s: %v", name, err)
	}
	return res.Msg
}

// waitTicks waits until schedule name shows n ticks and returns them,
// newest first.
func waitTicks(t *testing.T, ctx context.Context, sc podiumv1connect.ScheduleServiceClient, name string, n int) []*podiumv1.ScheduleTick {
	t.Helper()
	var got []*podiumv1.ScheduleTick
	coordtest.Eventually(t, 20*time.Second, "schedule "+name+" to show its ticks", func() bool {
		got = scheduleOf(t, ctx, sc, name).Ticks
		return len(got) >= n
	})
	if len(got) != n {
		t.Fatalf("schedule %s shows %d ticks, want %d: %v", name, len(got), n, got)
	}
	return got
}

func taskState(t *testing.T, ctx context.Context, r *coordtest.Replica, id string) *podiumv1.Task {
	t.Helper()
	res, err := r.Tasks().Get(ctx, connect.NewRequest(&podiumv1.GetRequest{Id: id}))
	if err != nil {
		t.Fatalf("get task %s: %v", id, err)
	}
	return res.Msg.Task
}

func listTasks(t *testing.T, ctx context.Context, r *coordtest.Replica) []*podiumv1.Task {
	t.Helper()
	res, err := r.Tasks().List(ctx, connect.NewRequest(&podiumv1.ListRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	return res.Msg.Tasks
}

// A tick creates its task once, even when the leader dies between ticks and
// a standby takes over: each tick has one task, owned by the schedule's
// creator, and no tick is run twice.
func TestScheduleTicksOnceAcrossLeaderKill(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	clk := newClock(t0)
	a, b := startScheduling(t, db.URL, clk), startScheduling(t, db.URL, clk)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	coordtest.Eventually(t, 10*time.Second, "a leader", func() bool { return a.Leading() || b.Leading() })
	leader, standby := a, b
	if b.Leading() {
		leader, standby = b, a
	}
	sc := createSchedule(t, ctx, standby.Schedules(), "every-minute", "* * * * *", "allow")
	if got := sc.NextRunAt.AsTime(); !got.Equal(t0.Add(30 * time.Second)) {
		t.Fatalf("next run %v, want %v", got, t0.Add(30*time.Second))
	}

	clk.set(t0.Add(40 * time.Second)) // 10:01:10
	first := waitTicks(t, ctx, standby.Schedules(), "every-minute", 1)
	l, err := leader.Leases().Current(ctx)
	if err != nil {
		t.Fatal(err)
	}
	killBackend(t, ctx, db.URL, l.PID())
	coordtest.Eventually(t, 10*time.Second, "the standby to lead", func() bool { return standby.Leading() })

	clk.set(t0.Add(100 * time.Second)) // 10:02:10
	ticks := waitTicks(t, ctx, standby.Schedules(), "every-minute", 2)
	if !ticks[1].Tick.AsTime().Equal(first[0].Tick.AsTime()) || ticks[1].TaskId != first[0].TaskId {
		t.Errorf("the first tick changed after the failover: %v, then %v", first[0], ticks[1])
	}
	want := []time.Time{t0.Add(90 * time.Second), t0.Add(30 * time.Second)}
	for i, tk := range ticks {
		if !tk.Tick.AsTime().Equal(want[i]) || tk.TaskId == "" {
			t.Errorf("tick %d: %v at %v, want a task at %v", i, tk.TaskId, tk.Tick.AsTime(), want[i])
		}
		task := taskState(t, ctx, standby, tk.TaskId)
		if task.RequestedBy != "token" {
			t.Errorf("task %s is requested by %q, want the schedule's creator (token)", task.Id, task.RequestedBy)
		}
		if task.ScheduleId != sc.Id {
			t.Errorf("task %s says it comes from schedule %q, want %s", task.Id, task.ScheduleId, sc.Id)
		}
	}
	if n := len(listTasks(t, ctx, standby)); n != 2 {
		t.Errorf("%d tasks stored, want one per tick (2)", n)
	}
	// Each task links back to its schedule.
	conn, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var linked int
	if err := conn.QueryRow(ctx, "select count(*) from podium.tasks where schedule_id = $1", sc.Id).Scan(&linked); err != nil || linked != 2 {
		t.Errorf("%d tasks link back to schedule %s (%v), want 2", linked, sc.Id, err)
	}
}

// Overlap modes, with the previous tick's task still queued (no node takes
// it): skip creates nothing and says so, allow creates a second task,
// cancel_previous creates one and cancels the one before.
func TestScheduleOverlapModes(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	clk := newClock(t0)
	r := startScheduling(t, db.URL, clk)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, mode := range []string{"skip", "allow", "cancel_previous"} {
		createSchedule(t, ctx, r.Schedules(), "overlap-"+strings.ReplaceAll(mode, "_", "-"), "* * * * *", mode)
	}
	clk.set(t0.Add(40 * time.Second))
	for _, mode := range []string{"skip", "allow", "cancel-previous"} {
		waitTicks(t, ctx, r.Schedules(), "overlap-"+mode, 1)
	}
	clk.set(t0.Add(100 * time.Second))

	skip := waitTicks(t, ctx, r.Schedules(), "overlap-skip", 2)
	if skip[0].TaskId != "" || !strings.Contains(skip[0].Note, "skipped: "+skip[1].TaskId) {
		t.Errorf("skip's second tick: %v, want no task and a note naming %s", skip[0], skip[1].TaskId)
	}
	if st := taskState(t, ctx, r, skip[1].TaskId).State; st != podiumv1.TaskState_TASK_STATE_QUEUED {
		t.Errorf("skip's first task is %v, want still queued", st)
	}
	// Once that task has ended, skip's next tick runs again.
	if _, err := r.Tasks().Cancel(ctx, connect.NewRequest(&podiumv1.CancelRequest{Id: skip[1].TaskId})); err != nil {
		t.Fatal(err)
	}

	allow := waitTicks(t, ctx, r.Schedules(), "overlap-allow", 2)
	for _, tk := range allow {
		if tk.TaskId == "" || taskState(t, ctx, r, tk.TaskId).State != podiumv1.TaskState_TASK_STATE_QUEUED {
			t.Errorf("allow's tick %v: want a queued task for each", tk)
		}
	}

	cp := waitTicks(t, ctx, r.Schedules(), "overlap-cancel-previous", 2)
	if cp[0].TaskId == "" || !strings.Contains(cp[0].Note, "cancelled "+cp[1].TaskId) {
		t.Errorf("cancel_previous's second tick: %v, want a task and a note naming %s", cp[0], cp[1].TaskId)
	}
	coordtest.Eventually(t, 10*time.Second, "cancel_previous's first task to be cancelled", func() bool {
		return taskState(t, ctx, r, cp[1].TaskId).State == podiumv1.TaskState_TASK_STATE_CANCELLED
	})
	if st := taskState(t, ctx, r, cp[0].TaskId).State; st != podiumv1.TaskState_TASK_STATE_QUEUED {
		t.Errorf("cancel_previous's new task is %v, want queued", st)
	}
	clk.set(t0.Add(160 * time.Second))
	if skip := waitTicks(t, ctx, r.Schedules(), "overlap-skip", 3); skip[0].TaskId == "" {
		t.Errorf("skip's third tick, after the first task ended: %v, want a task", skip[0])
	}
}

// A bad expression, time zone, overlap or name is refused saying what is
// wrong, and nothing is stored.
func TestScheduleBadInputRefused(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	r := startScheduling(t, db.URL, newClock(t0))
	ctx := context.Background()
	spec := &podiumv1.TaskSpec{Image: "busybox"}
	for _, c := range []struct {
		req  *podiumv1.ScheduleServiceCreateRequest
		says string
	}{
		{&podiumv1.ScheduleServiceCreateRequest{Name: "x", Cron: "61 * * * *", Spec: spec}, "cron: \"61 * * * *\" is not a 5-field cron expression"},
		{&podiumv1.ScheduleServiceCreateRequest{Name: "x", Cron: "* * * *", Spec: spec}, "cron:"},
		{&podiumv1.ScheduleServiceCreateRequest{Name: "x", Cron: "0 * * * * *", Spec: spec}, "cron:"},
		{&podiumv1.ScheduleServiceCreateRequest{Name: "x", Cron: strings.Repeat("1,", 200) + "1 * * * *", Spec: spec}, "cron: 409 bytes is more than 256"},
		{&podiumv1.ScheduleServiceCreateRequest{Name: "x", Cron: "0 0 30 2 *", Spec: spec}, "never matches"},
		{&podiumv1.ScheduleServiceCreateRequest{Name: "x", Cron: "TZ=UTC * * * * *", Spec: spec}, "--timezone"},
		{&podiumv1.ScheduleServiceCreateRequest{Name: "x", Cron: "* * * * *", Timezone: "Mars/Olympus", Spec: spec}, "timezone: \"Mars/Olympus\" is not an IANA time zone name"},
		{&podiumv1.ScheduleServiceCreateRequest{Name: "x", Cron: "* * * * *", Overlap: "queue", Spec: spec}, "overlap: \"queue\" is not one of skip, allow, cancel_previous"},
		{&podiumv1.ScheduleServiceCreateRequest{Name: "Bad Name", Cron: "* * * * *", Spec: spec}, "name:"},
		{&podiumv1.ScheduleServiceCreateRequest{Name: "x", Cron: "* * * * *"}, "spec: required"},
		{&podiumv1.ScheduleServiceCreateRequest{Name: "x", Cron: "* * * * *", Spec: &podiumv1.TaskSpec{}}, "spec.image: required"},
	} {
		_, err := r.Schedules().Create(ctx, connect.NewRequest(c.req))
		if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), c.says) {
			t.Errorf("create %q %q %q: %v, want InvalidArgument saying %q", c.req.Cron, c.req.Timezone, c.req.Overlap, err, c.says)
		}
	}
	ls, err := r.Schedules().List(ctx, connect.NewRequest(&podiumv1.ScheduleServiceListRequest{}))
	if err != nil || len(ls.Msg.Schedules) != 0 {
		t.Fatalf("after refusals: %v %v, want no schedules stored", ls, err)
	}
	// A good one in Berlin: 10:00:30 UTC is 11:00:30 there, so "30 11 * * *"
	// next fires at 10:30 UTC.
	res, err := r.Schedules().Create(ctx, connect.NewRequest(&podiumv1.ScheduleServiceCreateRequest{
		Name: "berlin", Cron: "30 11 * * *", Timezone: "Europe/Berlin", Spec: spec}))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := res.Msg.Schedule.NextRunAt.AsTime(), time.Date(2026, 1, 5, 10, 30, 0, 0, time.UTC); !got.Equal(want) {
		t.Errorf("next run %v, want %v", got, want)
	}
	if _, err := r.Schedules().Create(ctx, connect.NewRequest(&podiumv1.ScheduleServiceCreateRequest{
		Name: "berlin", Cron: "* * * * *", Spec: spec})); connect.CodeOf(err) != connect.CodeAlreadyExists {
		t.Errorf("a second schedule called berlin: %v, want AlreadyExists", err)
	}
}

// Run-now creates the task at once without moving the next tick; paused,
// a schedule fires nothing (another schedule's tick shows the job ran), and
// resumed it fires from its next tick after now, not the ones missed.
// After downtime at most one missed tick is run.
func TestScheduleRunNowPauseResumeCatchUp(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	clk := newClock(t0)
	r := startScheduling(t, db.URL, clk)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := r.Schedules()
	createSchedule(t, ctx, s, "nightly", "0 3 * * *", "allow")
	createSchedule(t, ctx, s, "witness", "* * * * *", "allow")

	now, err := s.RunNow(ctx, connect.NewRequest(&podiumv1.ScheduleServiceRunNowRequest{Name: "nightly"}))
	if err != nil {
		t.Fatal(err)
	}
	if now.Msg.Task.State != podiumv1.TaskState_TASK_STATE_QUEUED || now.Msg.Task.RequestedBy != "token" {
		t.Errorf("run-now task %v, want queued and the creator's", now.Msg.Task)
	}
	got := scheduleOf(t, ctx, s, "nightly")
	if len(got.Ticks) != 1 || got.Ticks[0].TaskId != now.Msg.Task.Id || got.Ticks[0].Note != "run now" {
		t.Errorf("ticks after run-now: %v", got.Ticks)
	}
	if want := time.Date(2026, 1, 6, 3, 0, 0, 0, time.UTC); !got.Schedule.NextRunAt.AsTime().Equal(want) {
		t.Errorf("run-now moved the next run to %v, want %v", got.Schedule.NextRunAt.AsTime(), want)
	}

	if _, err := s.Pause(ctx, connect.NewRequest(&podiumv1.ScheduleServicePauseRequest{Name: "nightly"})); err != nil {
		t.Fatal(err)
	}
	// Two days later: the witness ticks once (the one missed tick it catches
	// up); the paused schedule not at all.
	clk.set(t0.Add(48 * time.Hour))
	w := waitTicks(t, ctx, s, "witness", 1)
	if !w[0].Tick.AsTime().Equal(t0.Add(30 * time.Second)) {
		t.Errorf("witness caught up %v, want its first missed tick %v", w[0].Tick.AsTime(), t0.Add(30*time.Second))
	}
	if next := scheduleOf(t, ctx, s, "witness").Schedule.NextRunAt.AsTime(); !next.Equal(t0.Add(48*time.Hour + 30*time.Second)) {
		t.Errorf("witness's next run %v, want the first tick after now", next)
	}
	paused := scheduleOf(t, ctx, s, "nightly")
	if len(paused.Ticks) != 1 || !paused.Schedule.Paused || paused.Schedule.NextRunAt != nil {
		t.Errorf("paused schedule: %v, ticks %v; want paused, no next run, only the run-now tick", paused.Schedule, paused.Ticks)
	}

	res, err := s.Resume(ctx, connect.NewRequest(&podiumv1.ScheduleServiceResumeRequest{Name: "nightly"}))
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2026, 1, 8, 3, 0, 0, 0, time.UTC); !res.Msg.Schedule.NextRunAt.AsTime().Equal(want) {
		t.Errorf("resumed with next run %v, want %v (none of the missed ones)", res.Msg.Schedule.NextRunAt.AsTime(), want)
	}
	clk.set(time.Date(2026, 1, 8, 3, 0, 5, 0, time.UTC))
	ticks := waitTicks(t, ctx, s, "nightly", 2)
	if ticks[0].TaskId == "" || !ticks[0].Tick.AsTime().Equal(time.Date(2026, 1, 8, 3, 0, 0, 0, time.UTC)) {
		t.Errorf("after resume: %v", ticks[0])
	}

	if _, err := s.Remove(ctx, connect.NewRequest(&podiumv1.ScheduleServiceRemoveRequest{Name: "nightly"})); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, connect.NewRequest(&podiumv1.ScheduleServiceGetRequest{Name: "nightly"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("get after rm: %v, want NotFound", err)
	}
	if st := taskState(t, ctx, r, ticks[0].TaskId).State; st != podiumv1.TaskState_TASK_STATE_QUEUED {
		t.Errorf("the removed schedule's task is %v, want kept (queued)", st)
	}
}

// Members create schedules and see and manage only their own; viewers
// cannot create them; admins see everyone's.
func TestScheduleRoles(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	r := startScheduling(t, db.URL, newClock(t0))
	ctx := context.Background()
	client := func(token string) podiumv1connect.ScheduleServiceClient {
		return podiumv1connect.NewScheduleServiceClient(coordtest.HTTPClient(), r.URL(), connect.WithInterceptors(tok(token)))
	}
	alice, bob, vic := client(addUser(t, r, "alice", "member")), client(addUser(t, r, "bob", "member")), client(addUser(t, r, "vic", "viewer"))

	sc := createSchedule(t, ctx, alice, "alices", "* * * * *", "")
	if sc.CreatedBy != "alice" || sc.Overlap != "skip" {
		t.Errorf("created %v, want alice's with overlap skip", sc)
	}
	_, err := vic.Create(ctx, connect.NewRequest(&podiumv1.ScheduleServiceCreateRequest{Name: "vics", Cron: "* * * * *", Spec: &podiumv1.TaskSpec{Image: "busybox"}}))
	wantDenied(t, "a viewer creating a schedule", err, "needs the member role")

	for what, call := range map[string]func() error{
		"get": func() error {
			_, err := bob.Get(ctx, connect.NewRequest(&podiumv1.ScheduleServiceGetRequest{Name: "alices"}))
			return err
		},
		"pause": func() error {
			_, err := bob.Pause(ctx, connect.NewRequest(&podiumv1.ScheduleServicePauseRequest{Name: "alices"}))
			return err
		},
		"rm": func() error {
			_, err := bob.Remove(ctx, connect.NewRequest(&podiumv1.ScheduleServiceRemoveRequest{Name: "alices"}))
			return err
		},
		"run-now": func() error {
			_, err := bob.RunNow(ctx, connect.NewRequest(&podiumv1.ScheduleServiceRunNowRequest{Name: "alices"}))
			return err
		},
	} {
		if err := call(); connect.CodeOf(err) != connect.CodeNotFound {
			t.Errorf("bob's %s of alice's schedule: %v, want NotFound", what, err)
		}
	}
	if ls, err := bob.List(ctx, connect.NewRequest(&podiumv1.ScheduleServiceListRequest{})); err != nil || len(ls.Msg.Schedules) != 0 {
		t.Errorf("bob's list: %v %v, want none", ls, err)
	}
	if ls, err := r.Schedules().List(ctx, connect.NewRequest(&podiumv1.ScheduleServiceListRequest{})); err != nil || len(ls.Msg.Schedules) != 1 {
		t.Errorf("the admin's list: %v %v, want alice's", ls, err)
	}
	// The admin runs it now; the task is still alice's.
	now, err := r.Schedules().RunNow(ctx, connect.NewRequest(&podiumv1.ScheduleServiceRunNowRequest{Name: "alices"}))
	if err != nil || now.Msg.Task.RequestedBy != "alice" {
		t.Errorf("admin run-now: %v %v, want a task of alice's", now, err)
	}
}
