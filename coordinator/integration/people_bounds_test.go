package integration_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5"

	"github.com/podiumhq/podium/coordinator/coordtest"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/proto/podium/v1/podiumv1connect"
	"github.com/podiumhq/podium/test/testenv/pgtest"
	"github.com/podiumhq/podium/test/testenv/wait"
)

// commandOf reads a node's stream up to the next assignment or cancel and
// says which it was: a cancel the test did not expect shows as one, rather
// than being read past.
func commandOf(t *testing.T, n *simNode) (assign *podiumv1.Assign, cancel *podiumv1.Cancel) {
	t.Helper()
	for {
		m, err := n.stream.Receive()
		if err != nil {
			t.Fatalf("waiting for an assignment or a cancel: %v", err)
		}
		if a := m.GetAssign(); a != nil {
			return a, nil
		}
		if c := m.GetCancel(); c != nil {
			return nil, c
		}
	}
}

// wantCode checks err is code and says each of says.
func wantCode(t *testing.T, what string, err error, code connect.Code, says ...string) {
	t.Helper()
	if connect.CodeOf(err) != code {
		t.Fatalf("%s: %v, want %v", what, err, code)
	}
	for _, s := range says {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("%s: %q does not say %q", what, err, s)
		}
	}
}

// A member's cancel_older does not cancel someone else's task, which
// `podium task cancel` would refuse them too: the admin's running deploy
// keeps running and ends normally, the member's task waits for the key and
// runs after it, and its `task get` names who holds the key. The member's
// own older task is still superseded. (Before, the member's submit sent the
// admin's deploy a cancel.)
func TestMemberCancelOlderWaitsForSomeoneElsesTask(t *testing.T) {
	t.Parallel()
	r, db := coordtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	id, key := enroll(t, r)
	node := connectWith(t, ctx, r, id, key, &podiumv1.Capacity{MaxTasks: 4})
	alice := as(r, addUser(t, r, "alice", "member"))

	deploy := submit(t, ctx, r, keyed("cancel_older"))
	if a := assignOf(t, node); a.TaskId != deploy {
		t.Fatalf("assigned %s, want the admin's %s", a.TaskId, deploy)
	}
	node.send(t, status(deploy, 1, 1, podiumv1.TaskState_TASK_STATE_RUNNING, nil))
	waitState(t, ctx, r, deploy, podiumv1.TaskState_TASK_STATE_RUNNING)

	mine := func() string {
		t.Helper()
		res, err := alice.tasks.Submit(ctx, connect.NewRequest(&podiumv1.SubmitRequest{Spec: keyed("cancel_older")}))
		if err != nil {
			t.Fatalf("alice's keyed submit: %v", err)
		}
		if res.Msg.Task.State != podiumv1.TaskState_TASK_STATE_QUEUED {
			t.Fatalf("alice's task is %s, want queued", res.Msg.Task.State)
		}
		return res.Msg.Task.Id
	}
	first := mine()
	waitReason(t, ctx, r, first, "concurrency key deploy-prod is at its limit (1 running: "+deploy+")")
	asked := fmt.Sprintf(`select count(*) from podium.tasks where id = '%s' and cancel_requested_at is not null`, deploy)
	if n := countRows(t, db, asked); n != 0 {
		t.Fatalf("alice's submit asked the admin's running deploy %s to cancel", deploy)
	}
	// Her second supersedes her first (her own), and still leaves the
	// admin's alone.
	second := mine()
	if tk := getTask(t, ctx, r, first); tk.State != podiumv1.TaskState_TASK_STATE_CANCELLED || !contains(tk.Reason, "superseded by "+second) {
		t.Fatalf("alice's older task is %s, %q; want cancelled, superseded by %s", tk.State, tk.Reason, second)
	}
	waitReason(t, ctx, r, second, "concurrency key deploy-prod is at its limit (1 running: "+deploy+")")
	if n := countRows(t, db, asked); n != 0 {
		t.Fatalf("alice's second submit asked the admin's running deploy %s to cancel", deploy)
	}

	// Whom she waits for: the admin's deploy, by its id and owner.
	got, err := alice.tasks.Get(ctx, connect.NewRequest(&podiumv1.GetRequest{Id: second}))
	if err != nil {
		t.Fatal(err)
	}
	hs := got.Msg.Task.GetConcurrencyHolders()
	if len(hs) != 1 || hs[0].TaskId != deploy || hs[0].RequestedBy != "token" || hs[0].State != podiumv1.TaskState_TASK_STATE_RUNNING {
		t.Fatalf("alice's waiting task names holders %v, want the admin's running %s", hs, deploy)
	}

	// The deploy ends on its own, and only then does hers start: the next
	// command the node gets is her assignment, not a cancel.
	zero := int32(0)
	node.send(t, status(deploy, 1, 2, podiumv1.TaskState_TASK_STATE_SUCCEEDED, &zero))
	a, c := commandOf(t, node)
	if c != nil {
		t.Fatalf("the node was told to cancel %s (%q)", c.TaskId, c.Reason)
	}
	if a.TaskId != second {
		t.Fatalf("assigned %s once the deploy ended, want alice's %s", a.TaskId, second)
	}
	if tk := getTask(t, ctx, r, deploy); tk.State != podiumv1.TaskState_TASK_STATE_SUCCEEDED {
		t.Fatalf("the admin's deploy is %s, want succeeded", tk.State)
	}
	if tk := getTask(t, ctx, r, second); len(tk.GetConcurrencyHolders()) != 0 {
		t.Errorf("a placed task names holders %v, want none (only a queued one waits)", tk.GetConcurrencyHolders())
	}
}

// An admin's cancel_older still cancels anyone's task of the key, a
// member's included: an admin may cancel it with `podium task cancel` too.
func TestAdminCancelOlderCancelsAMembersTask(t *testing.T) {
	t.Parallel()
	r, _ := coordtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	id, key := enroll(t, r)
	node := connectWith(t, ctx, r, id, key, &podiumv1.Capacity{MaxTasks: 4})
	alice := as(r, addUser(t, r, "alice", "member"))

	res, err := alice.tasks.Submit(ctx, connect.NewRequest(&podiumv1.SubmitRequest{Spec: keyed("cancel_older")}))
	if err != nil {
		t.Fatal(err)
	}
	hers := res.Msg.Task.Id
	if a := assignOf(t, node); a.TaskId != hers {
		t.Fatalf("assigned %s, want alice's %s", a.TaskId, hers)
	}
	node.send(t, status(hers, 1, 1, podiumv1.TaskState_TASK_STATE_RUNNING, nil))
	waitState(t, ctx, r, hers, podiumv1.TaskState_TASK_STATE_RUNNING)
	admins := submit(t, ctx, r, keyed("cancel_older"))
	a, c := commandOf(t, node)
	if a != nil || c.TaskId != hers || c.Reason != "superseded by "+admins+" (concurrency key deploy-prod, on_conflict cancel_older)" {
		t.Fatalf("the node got assign %v, cancel %v; want alice's %s cancelled, superseded by %s", a, c, hers, admins)
	}
	node.send(t, status(hers, 1, 2, podiumv1.TaskState_TASK_STATE_CANCELLED, nil))
	if a := assignOf(t, node); a.TaskId != admins {
		t.Fatalf("assigned %s, want the admin's %s once alice's stopped", a.TaskId, admins)
	}
}

// A member's priority is capped (--max-member-priority, 0 by default): one
// above is refused naming the cap and how to get more, and nothing is
// stored; at the cap (or below) it is accepted; an admin gives any. A
// schedule's spec is bounded alike, at create.
func TestMemberPriorityCapped(t *testing.T) {
	t.Parallel()
	r, db := coordtest.New(t)
	ctx := context.Background()
	alice := as(r, addUser(t, r, "alice", "member"))
	aliceSched := podiumv1connect.NewScheduleServiceClient(coordtest.HTTPClient(), r.URL(), connect.WithInterceptors(tok(addUser(t, r, "alice2", "member"))))

	_, err := alice.tasks.Submit(ctx, connect.NewRequest(&podiumv1.SubmitRequest{Spec: &podiumv1.TaskSpec{Image: "busybox", Priority: 1}}))
	wantDenied(t, "a member's priority 1", err, "spec.priority: 1 is above 0", "--max-member-priority", "ask an admin")
	_, err = aliceSched.Create(ctx, connect.NewRequest(&podiumv1.ScheduleServiceCreateRequest{Name: "urgent", Cron: "* * * * *",
		Spec: &podiumv1.TaskSpec{Image: "busybox", Priority: 1 << 30}}))
	wantDenied(t, "a member's schedule at priority 2^30", err, "spec.priority: 1073741824 is above 0", "--max-member-priority")
	if n := countRows(t, db, "select count(*) from podium.tasks"); n != 0 {
		t.Fatalf("%d tasks stored after the refusals, want none", n)
	}
	if n := countRows(t, db, "select count(*) from podium.schedules"); n != 0 {
		t.Fatalf("%d schedules stored after the refusal, want none", n)
	}
	if n := countRows(t, db, `select count(*) from podium.audit_log where who = 'alice' and action = 'TaskService.Submit'
		and result = 'permission_denied'`); n != 1 {
		t.Errorf("%d audit rows of alice's refused submit, want 1", n)
	}

	for _, p := range []int32{0, -5} {
		res, err := alice.tasks.Submit(ctx, connect.NewRequest(&podiumv1.SubmitRequest{Spec: &podiumv1.TaskSpec{Image: "busybox", Priority: p}}))
		if err != nil || res.Msg.Task.Spec.GetPriority() != p {
			t.Errorf("a member's priority %d: %v, %v; want accepted", p, res, err)
		}
	}
	res, err := r.Tasks().Submit(ctx, connect.NewRequest(&podiumv1.SubmitRequest{Spec: &podiumv1.TaskSpec{Image: "busybox", Priority: 100}}))
	if err != nil || res.Msg.Task.Spec.GetPriority() != 100 {
		t.Errorf("an admin's priority 100: %v, %v; want accepted", res, err)
	}
}

func countRows(t *testing.T, db pgtest.Database, sql string) int {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(context.Background(), sql).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// A member submits only to their own fair-share groups: another group is
// refused naming the groups they have and how to get one, with nothing
// stored; once an admin puts them in it (user set-groups, or user add
// --group) it is accepted; an admin submits to any group. A rerun and a
// schedule are bounded alike. ListUsers and WhoAmI show the groups.
func TestMemberGroupBounded(t *testing.T) {
	t.Parallel()
	r, db := coordtest.New(t)
	ctx := context.Background()
	alice := as(r, addUser(t, r, "alice", "member"))
	inML := func(group string) *podiumv1.SubmitRequest {
		return &podiumv1.SubmitRequest{Spec: &podiumv1.TaskSpec{Image: "busybox", Group: group}}
	}

	_, err := alice.tasks.Submit(ctx, connect.NewRequest(inML("ml")))
	wantDenied(t, "alice's submit to ml", err, `alice may not submit to group "ml"`, "alice belongs to no group",
		"ask an admin: podium user set-groups alice ml")
	carolSched := podiumv1connect.NewScheduleServiceClient(coordtest.HTTPClient(), r.URL(), connect.WithInterceptors(tok(addUser(t, r, "carol", "member"))))
	_, err = carolSched.Create(ctx, connect.NewRequest(&podiumv1.ScheduleServiceCreateRequest{Name: "sweep", Cron: "* * * * *",
		Spec: &podiumv1.TaskSpec{Image: "busybox", Group: "ml"}}))
	wantDenied(t, "carol's schedule in ml", err, `carol may not submit to group "ml"`, "podium user set-groups carol ml")
	if n := countRows(t, db, "select count(*) from podium.tasks") + countRows(t, db, "select count(*) from podium.schedules"); n != 0 {
		t.Fatalf("%d tasks and schedules stored after the refusals, want none", n)
	}
	if n := countRows(t, db, `select count(*) from podium.audit_log where who = 'alice' and action = 'TaskService.Submit'
		and result = 'permission_denied'`); n != 1 {
		t.Errorf("%d audit rows of alice's refused submit, want 1", n)
	}

	set, err := r.Admin().SetUserGroups(ctx, connect.NewRequest(&podiumv1.SetUserGroupsRequest{Name: "alice", Groups: []string{"ml", "infra", "ml"}}))
	if err != nil || strings.Join(set.Msg.User.GetGroups(), ",") != "infra,ml" {
		t.Fatalf("set-groups alice ml infra: %v, %v; want infra,ml", set, err)
	}
	sub, err := alice.tasks.Submit(ctx, connect.NewRequest(inML("ml")))
	if err != nil {
		t.Fatalf("alice's submit to ml once in it: %v", err)
	}
	_, err = alice.tasks.Submit(ctx, connect.NewRequest(inML("ops")))
	wantDenied(t, "alice's submit to ops", err, "alice's groups are infra, ml", "podium user set-groups alice infra ml ops")
	if _, err := r.Tasks().Submit(ctx, connect.NewRequest(inML("ops"))); err != nil {
		t.Errorf("an admin's submit to ops: %v, want accepted", err)
	}

	who, err := alice.admin.WhoAmI(ctx, connect.NewRequest(&podiumv1.WhoAmIRequest{}))
	if err != nil || strings.Join(who.Msg.GetGroups(), ",") != "infra,ml" {
		t.Errorf("alice's WhoAmI groups: %v, %v; want infra,ml", who, err)
	}
	added, err := r.Admin().AddUser(ctx, connect.NewRequest(&podiumv1.AddUserRequest{Name: "dave", Role: "member", Groups: []string{"infra"}}))
	if err != nil || strings.Join(added.Msg.User.GetGroups(), ",") != "infra" {
		t.Fatalf("user add dave --group infra: %v, %v", added, err)
	}
	ls, err := r.Admin().ListUsers(ctx, connect.NewRequest(&podiumv1.ListUsersRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	groups := map[string]string{}
	for _, u := range ls.Msg.Users {
		groups[u.Name] = strings.Join(u.Groups, ",")
	}
	if groups["alice"] != "infra,ml" || groups["dave"] != "infra" || groups["carol"] != "" {
		t.Errorf("ListUsers groups %v", groups)
	}

	// She leaves ml: a rerun of her ml task is refused as a submit would be.
	zero := int32(0)
	id, key := enroll(t, r)
	node := connectWith(t, ctx, r, id, key, &podiumv1.Capacity{MaxTasks: 4})
	if a := assignOf(t, node); a.TaskId != sub.Msg.Task.Id {
		// The admin's ops task may come first; take the next.
		node.send(t, status(a.TaskId, 1, 1, podiumv1.TaskState_TASK_STATE_SUCCEEDED, &zero))
		if a := assignOf(t, node); a.TaskId != sub.Msg.Task.Id {
			t.Fatalf("assigned %s, want alice's %s", a.TaskId, sub.Msg.Task.Id)
		}
	}
	node.send(t, status(sub.Msg.Task.Id, 1, 1, podiumv1.TaskState_TASK_STATE_SUCCEEDED, &zero))
	waitState(t, ctx, r, sub.Msg.Task.Id, podiumv1.TaskState_TASK_STATE_SUCCEEDED)
	if _, err := r.Admin().SetUserGroups(ctx, connect.NewRequest(&podiumv1.SetUserGroupsRequest{Name: "alice", Groups: []string{"infra"}})); err != nil {
		t.Fatal(err)
	}
	_, err = alice.tasks.Rerun(ctx, connect.NewRequest(&podiumv1.RerunRequest{Id: sub.Msg.Task.Id}))
	wantDenied(t, "alice's rerun in ml after leaving it", err, `alice may not submit to group "ml"`, "alice's groups are infra")
}

// SetUserGroups is an admin's, and refuses hostile input naming it, storing
// nothing: a name no spec's group could give, one too long, too many, an
// unknown user, a reserved name.
func TestSetUserGroupsRefusesBadInput(t *testing.T) {
	t.Parallel()
	r, _ := coordtest.New(t)
	ctx := context.Background()
	alice := as(r, addUser(t, r, "alice", "member"))
	set := func(c podiumv1connect.AdminServiceClient, name string, groups ...string) error {
		_, err := c.SetUserGroups(ctx, connect.NewRequest(&podiumv1.SetUserGroupsRequest{Name: name, Groups: groups}))
		return err
	}
	wantDenied(t, "a member setting her own groups", set(alice.admin, "alice", "ml"), "AdminService.SetUserGroups needs the admin role")
	wantCode(t, "a group with a space", set(r.Admin(), "alice", "ml sweeps"), connect.CodeInvalidArgument, `groups: "ml sweeps" is not a group name`)
	wantCode(t, "an empty group", set(r.Admin(), "alice", ""), connect.CodeInvalidArgument, `groups: "" is not a group name`)
	wantCode(t, "a group of 65 bytes", set(r.Admin(), "alice", strings.Repeat("g", 65)), connect.CodeInvalidArgument, "is not a group name", "at most 64 bytes")
	many := make([]string, 65)
	for i := range many {
		many[i] = fmt.Sprintf("g%d", i)
	}
	wantCode(t, "65 groups", set(r.Admin(), "alice", many...), connect.CodeInvalidArgument, "65 groups is more than 64")
	wantCode(t, "an unknown user", set(r.Admin(), "bob", "ml"), connect.CodeNotFound, "no user bob", "podium user add bob")
	wantCode(t, "a reserved name", set(r.Admin(), "token", "ml"), connect.CodeInvalidArgument, `"token" is reserved`)
	_, err := r.Admin().AddUser(ctx, connect.NewRequest(&podiumv1.AddUserRequest{Name: "bob", Role: "member", Groups: []string{"ml;rm"}}))
	wantCode(t, "user add with a bad group", err, connect.CodeInvalidArgument, `groups: "ml;rm" is not a group name`)
	ls, err := r.Admin().ListUsers(ctx, connect.NewRequest(&podiumv1.ListUsersRequest{}))
	if err != nil || len(ls.Msg.Users) != 1 || len(ls.Msg.Users[0].Groups) != 0 {
		t.Errorf("users after the refusals: %v, %v; want alice alone, in no group", ls, err)
	}
}

// "token" names the bootstrap token's caller (its tasks' requested_by), so
// no user may take it: user add token is refused. A row by that name left
// in the database from before is ignored for sign-in: its personal token
// opens nothing, so nobody owns the bootstrap token's tasks through it;
// user rm still removes it.
func TestTokenIsAReservedUserName(t *testing.T) {
	t.Parallel()
	r, db := coordtest.New(t)
	ctx := context.Background()
	_, err := r.Admin().AddUser(ctx, connect.NewRequest(&podiumv1.AddUserRequest{Name: "token", Role: "member"}))
	wantCode(t, "user add token", err, connect.CodeInvalidArgument, `name: "token" is reserved`, "bootstrap token", "another name")
	_, err = r.Admin().SetUserRole(ctx, connect.NewRequest(&podiumv1.SetUserRoleRequest{Name: "token", Role: "member"}))
	wantCode(t, "user set-role token", err, connect.CodeInvalidArgument, `"token" is reserved`)
	if n := countRows(t, db, "select count(*) from podium.users"); n != 0 {
		t.Fatalf("%d users stored after the refusal, want none", n)
	}

	// A row from before, with a token someone holds.
	const old = "podium_ut_left-over-token-from-before-0123456789"
	h := sha256.Sum256([]byte(old))
	conn, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `insert into podium.users (name, role, token_hash, created_by) values ('token', 'member', $1, 'psql')`, h[:]); err != nil {
		t.Fatal(err)
	}
	admins := submit(t, ctx, r, &podiumv1.TaskSpec{Image: "busybox"})
	squatter := as(r, old)
	_, err = squatter.tasks.Cancel(ctx, connect.NewRequest(&podiumv1.CancelRequest{Id: admins}))
	wantCode(t, "the left-over token row's cancel of the bootstrap token's task", err, connect.CodeUnauthenticated)
	_, err = squatter.admin.WhoAmI(ctx, connect.NewRequest(&podiumv1.WhoAmIRequest{}))
	wantCode(t, "the left-over token row's whoami", err, connect.CodeUnauthenticated)
	if tk := getTask(t, ctx, r, admins); tk.State != podiumv1.TaskState_TASK_STATE_QUEUED {
		t.Errorf("the bootstrap token's task is %s, want queued", tk.State)
	}
	// The bootstrap token's schedules are not that row's: removing the row
	// leaves them running.
	createSchedule(t, ctx, r.Schedules(), "bootstraps", "* * * * *", "allow")
	if _, err := r.Admin().RemoveUser(ctx, connect.NewRequest(&podiumv1.RemoveUserRequest{Name: "token"})); err != nil {
		t.Fatalf("user rm token: %v", err)
	}
	if sc := scheduleOf(t, ctx, r.Schedules(), "bootstraps").Schedule; sc.Paused || sc.PausedReason != "" {
		t.Errorf("removing the left-over token row paused the bootstrap token's schedule: %q", sc.PausedReason)
	}
}

// A schedule's ticks run as its owner, so one whose owner was removed, or
// made a viewer, is paused at once with the reason, and its next tick
// creates nothing; resuming it is refused until the owner may submit again,
// and then clears the reason. One whose owner left the group its spec
// names is paused by its next tick, which creates nothing.
func TestSchedulesPausedWhenTheirOwnerMayNoLongerSubmit(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	clk := newClock(t0)
	r := startScheduling(t, db.URL, clk)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	client := func(token string) podiumv1connect.ScheduleServiceClient {
		return podiumv1connect.NewScheduleServiceClient(coordtest.HTTPClient(), r.URL(), connect.WithInterceptors(tok(token)))
	}
	alice, bob := client(addUser(t, r, "alice", "member")), client(addUser(t, r, "bob", "member"))
	carolTok := addUser(t, r, "carol", "member")
	if _, err := r.Admin().SetUserGroups(ctx, connect.NewRequest(&podiumv1.SetUserGroupsRequest{Name: "carol", Groups: []string{"ml"}})); err != nil {
		t.Fatal(err)
	}
	carol := client(carolTok)
	createSchedule(t, ctx, alice, "alices", "* * * * *", "allow")
	createSchedule(t, ctx, bob, "bobs", "* * * * *", "allow")
	if _, err := carol.Create(ctx, connect.NewRequest(&podiumv1.ScheduleServiceCreateRequest{Name: "carols", Cron: "* * * * *", Overlap: "allow",
		Spec: &podiumv1.TaskSpec{Image: "busybox", Group: "ml"}})); err != nil {
		t.Fatal(err)
	}
	createSchedule(t, ctx, r.Schedules(), "witness", "* * * * *", "allow")

	if _, err := r.Admin().RemoveUser(ctx, connect.NewRequest(&podiumv1.RemoveUserRequest{Name: "alice"})); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Admin().SetUserRole(ctx, connect.NewRequest(&podiumv1.SetUserRoleRequest{Name: "bob", Role: "viewer"})); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Admin().SetUserGroups(ctx, connect.NewRequest(&podiumv1.SetUserGroupsRequest{Name: "carol", Groups: nil})); err != nil {
		t.Fatal(err)
	}
	for name, says := range map[string]string{
		"alices": "its owner alice was removed by token",
		"bobs":   "its owner bob was made a viewer by token, who may not submit tasks",
	} {
		sc := scheduleOf(t, ctx, r.Schedules(), name).Schedule
		if !sc.Paused || sc.NextRunAt != nil || !strings.Contains(sc.PausedReason, says) {
			t.Errorf("schedule %s: paused %v, next %v, reason %q; want paused saying %q", name, sc.Paused, sc.NextRunAt, sc.PausedReason, says)
		}
	}

	// The first tick: the witness fires; carol's tick finds she left ml and
	// pauses it; none of the three creates a task.
	clk.set(t0.Add(time.Minute))
	waitTicks(t, ctx, r.Schedules(), "witness", 1)
	var carols *podiumv1.Schedule
	wait.For(t, 30*time.Second, "carol's schedule to be paused by its tick", func() bool {
		carols = scheduleOf(t, ctx, r.Schedules(), "carols").Schedule
		return carols.Paused
	})
	if !strings.Contains(carols.PausedReason, `its owner carol may no longer submit its spec (spec.group: carol may not submit to group "ml"`) {
		t.Errorf("carol's schedule paused saying %q", carols.PausedReason)
	}
	for _, name := range []string{"alices", "bobs", "carols"} {
		if ticks := scheduleOf(t, ctx, r.Schedules(), name).Ticks; len(ticks) != 0 {
			t.Errorf("schedule %s ticked %v, want nothing created", name, ticks)
		}
	}
	for _, tk := range listTasks(t, ctx, r) {
		if tk.RequestedBy != "token" {
			t.Errorf("task %s of %s was created; want only the witness's", tk.Id, tk.RequestedBy)
		}
	}

	// Resuming is refused while the owner may not submit, naming why; an
	// admin pausing it by hand first changes nothing of that.
	_, err := r.Schedules().Resume(ctx, connect.NewRequest(&podiumv1.ScheduleServiceResumeRequest{Name: "alices"}))
	wantCode(t, "resuming alice's schedule", err, connect.CodeFailedPrecondition, "cannot resume schedule alices", "alice")
	if _, err := r.Schedules().Pause(ctx, connect.NewRequest(&podiumv1.ScheduleServicePauseRequest{Name: "alices"})); err != nil {
		t.Fatal(err)
	}
	_, err = r.Schedules().Resume(ctx, connect.NewRequest(&podiumv1.ScheduleServiceResumeRequest{Name: "alices"}))
	wantCode(t, "resuming alice's schedule after an admin paused it by hand", err, connect.CodeFailedPrecondition, "cannot resume schedule alices", "alice")
	_, err = r.Schedules().RunNow(ctx, connect.NewRequest(&podiumv1.ScheduleServiceRunNowRequest{Name: "bobs"}))
	wantCode(t, "running bob's schedule now", err, connect.CodeFailedPrecondition, "its owner bob is a viewer")
	// Bob is a member again and resumes his own: the reason clears and the
	// next tick creates his task.
	if _, err := r.Admin().SetUserRole(ctx, connect.NewRequest(&podiumv1.SetUserRoleRequest{Name: "bob", Role: "member"})); err != nil {
		t.Fatal(err)
	}
	res, err := bob.Resume(ctx, connect.NewRequest(&podiumv1.ScheduleServiceResumeRequest{Name: "bobs"}))
	if err != nil || res.Msg.Schedule.Paused || res.Msg.Schedule.PausedReason != "" {
		t.Fatalf("bob's resume: %v, %v; want running, the reason cleared", res, err)
	}
	clk.set(t0.Add(2 * time.Minute))
	if ticks := waitTicks(t, ctx, bob, "bobs", 1); ticks[0].TaskId == "" || taskState(t, ctx, r, ticks[0].TaskId).RequestedBy != "bob" {
		t.Errorf("bob's resumed schedule ticked %v, want a task of his", ticks)
	}
}
