package integration_test

import (
	"context"
	"crypto/sha256"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5"

	"github.com/podiumhq/podium/coordinator/coordtest"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/proto/podium/v1/podiumv1connect"
	"github.com/podiumhq/podium/test/testenv/pgtest"
)

// person is one user's clients over the local transport, with their
// personal token.
type person struct {
	tasks podiumv1connect.TaskServiceClient
	admin podiumv1connect.AdminServiceClient
}

// tok sets a bearer token on unary calls and streams alike.
type tok string

func (b tok) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc { return hdr(b).WrapUnary(next) }
func (b tok) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		c := next(ctx, spec)
		c.RequestHeader().Set("Authorization", "Bearer "+string(b))
		return c
	}
}
func (b tok) WrapStreamingHandler(n connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return n
}

func as(r *coordtest.Replica, token string) person {
	i := connect.WithInterceptors(tok(token))
	return person{tasks: podiumv1connect.NewTaskServiceClient(coordtest.HTTPClient(), r.URL(), i),
		admin: podiumv1connect.NewAdminServiceClient(coordtest.HTTPClient(), r.URL(), i)}
}

func addUser(t *testing.T, r *coordtest.Replica, name, role string) string {
	t.Helper()
	res, err := r.Admin().AddUser(context.Background(), connect.NewRequest(&podiumv1.AddUserRequest{Name: name, Role: role}))
	if err != nil {
		t.Fatalf("add %s as %s: %v", name, role, err)
	}
	if res.Msg.User.GetCreatedBy() != "token" || res.Msg.User.GetRole() != role {
		t.Fatalf("added %v, want role %s created by the bootstrap token", res.Msg.User, role)
	}
	return res.Msg.Token
}

func wantDenied(t *testing.T, what string, err error, says ...string) {
	t.Helper()
	if connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Fatalf("%s: %v, want PermissionDenied", what, err)
	}
	for _, s := range says {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("%s: %q does not say %q", what, err, s)
		}
	}
}

// The bootstrap token adds people with roles; each gets a personal token
// shown once, of which Postgres holds only the SHA-256. A person's token
// identifies them (WhoAmI, requested_by), and the one authorization table
// decides what their role may do, each refusal naming the role needed and
// how to get it. Removing a person ends their token at once.
func TestPeopleRolesOverLocal(t *testing.T) {
	t.Parallel()
	r, db := coordtest.New(t)
	ctx := context.Background()
	aliceTok := addUser(t, r, "alice", "member")
	vicTok := addUser(t, r, "vic", "viewer")
	if !strings.HasPrefix(aliceTok, "podium_ut_") || aliceTok == vicTok {
		t.Fatalf("tokens %q, %q: want distinct podium_ut_ tokens", aliceTok, vicTok)
	}
	alice, vic := as(r, aliceTok), as(r, vicTok)

	// Only the hash is stored, and the listing carries no token.
	conn, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var dump string
	if err := conn.QueryRow(ctx, `select string_agg(u::text, ' ') from podium.users u`).Scan(&dump); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(dump, aliceTok) || strings.Contains(dump, strings.TrimPrefix(aliceTok, "podium_ut_")) {
		t.Errorf("podium.users holds alice's token: %s", dump)
	}
	h := sha256.Sum256([]byte(aliceTok))
	var n int
	if err := conn.QueryRow(ctx, `select count(*) from podium.users where name = 'alice' and token_hash = $1`, h[:]).Scan(&n); err != nil || n != 1 {
		t.Errorf("alice's row with her token's SHA-256: %d rows, %v", n, err)
	}
	ls, err := r.Admin().ListUsers(ctx, connect.NewRequest(&podiumv1.ListUsersRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if len(ls.Msg.Users) != 2 || ls.Msg.Users[0].Name != "alice" || ls.Msg.Users[1].Name != "vic" ||
		strings.Contains(ls.Msg.String(), aliceTok) {
		t.Errorf("ListUsers = %v, want alice and vic and no token", ls.Msg)
	}

	who, err := alice.admin.WhoAmI(ctx, connect.NewRequest(&podiumv1.WhoAmIRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if who.Msg.Kind != podiumv1.CallerKind_CALLER_KIND_USER || who.Msg.Login != "alice" || who.Msg.Role != "member" || who.Msg.RoleFrom != "user" {
		t.Errorf("alice's WhoAmI = %v", who.Msg)
	}
	who, err = r.Admin().WhoAmI(ctx, connect.NewRequest(&podiumv1.WhoAmIRequest{}))
	if err != nil || who.Msg.Role != "admin" || who.Msg.RoleFrom != "bootstrap token" {
		t.Errorf("the bootstrap token's WhoAmI = %v, %v; want admin from the bootstrap token", who.Msg, err)
	}

	// A viewer reads but does not submit; the refusal says what to do.
	spec := &podiumv1.TaskSpec{Image: "busybox"}
	_, err = vic.tasks.Submit(ctx, connect.NewRequest(&podiumv1.SubmitRequest{Spec: spec}))
	wantDenied(t, "a viewer's submit", err, "TaskService.Submit needs the member role", "vic is a viewer", "podium user set-role vic member")
	if _, err := vic.tasks.List(ctx, connect.NewRequest(&podiumv1.ListRequest{})); err != nil {
		t.Errorf("a viewer's list: %v", err)
	}
	// A member submits, and what they submit is theirs.
	sub, err := alice.tasks.Submit(ctx, connect.NewRequest(&podiumv1.SubmitRequest{Spec: spec}))
	if err != nil {
		t.Fatal(err)
	}
	if sub.Msg.Task.RequestedBy != "alice" {
		t.Errorf("requested_by %q, want alice", sub.Msg.Task.RequestedBy)
	}
	// Admin calls are the admin's alone.
	_, err = alice.admin.CreateEnrollmentToken(ctx, connect.NewRequest(&podiumv1.CreateEnrollmentTokenRequest{}))
	wantDenied(t, "a member's enrollment token", err, "needs the admin role", "alice is a member", "ask an admin to do it")
	if strings.Contains(err.Error(), "set-role") {
		t.Errorf("a member refused an admin's call is told to change her role: %v", err)
	}
	_, err = alice.admin.AddUser(ctx, connect.NewRequest(&podiumv1.AddUserRequest{Name: "mallory", Role: "admin"}))
	wantDenied(t, "a member adding an admin", err, "AdminService.AddUser needs the admin role")
	// The fleet is read by everyone who reads tasks, as the console shows
	// it to them; changing it is the admin's.
	if _, err := alice.admin.ListNodes(ctx, connect.NewRequest(&podiumv1.ListNodesRequest{})); err != nil {
		t.Errorf("a member listing nodes: %v", err)
	}
	_, err = alice.admin.DrainNode(ctx, connect.NewRequest(&podiumv1.DrainNodeRequest{NodeId: "node_01AAAAAAAAAAAAAAAAAAAAAAAA"}))
	wantDenied(t, "a member draining a node", err, "AdminService.DrainNode needs the admin role", "ask an admin to do it")

	// Roles change from the next call on.
	if _, err := r.Admin().SetUserRole(ctx, connect.NewRequest(&podiumv1.SetUserRoleRequest{Name: "vic", Role: "member"})); err != nil {
		t.Fatal(err)
	}
	if _, err := vic.tasks.Submit(ctx, connect.NewRequest(&podiumv1.SubmitRequest{Spec: spec})); err != nil {
		t.Errorf("vic's submit after becoming a member: %v", err)
	}
	// Removing a person ends their token.
	if _, err := r.Admin().RemoveUser(ctx, connect.NewRequest(&podiumv1.RemoveUserRequest{Name: "alice"})); err != nil {
		t.Fatal(err)
	}
	_, err = alice.tasks.List(ctx, connect.NewRequest(&podiumv1.ListRequest{}))
	if connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("a removed user's list: %v, want Unauthenticated", err)
	}
	_, err = r.Admin().RemoveUser(ctx, connect.NewRequest(&podiumv1.RemoveUserRequest{Name: "alice"}))
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("removing alice twice: %v, want NotFound", err)
	}
}

// Names are bounded and validated, roles are one of three, and a name is
// added once.
func TestPeopleHostileNames(t *testing.T) {
	t.Parallel()
	r, _ := coordtest.New(t)
	ctx := context.Background()
	for _, name := range []string{"", "../etc", "Alice Smith", "a;drop table", strings.Repeat("a", 65), strings.Repeat("a", 120) + "@example.com", "-x", "x\n"} {
		_, err := r.Admin().AddUser(ctx, connect.NewRequest(&podiumv1.AddUserRequest{Name: name, Role: "member"}))
		if connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("add %q: %v, want InvalidArgument", name, err)
		}
	}
	_, err := r.Admin().AddUser(ctx, connect.NewRequest(&podiumv1.AddUserRequest{Name: "bob", Role: "root"}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "admin, member or viewer") {
		t.Errorf("role root: %v, want InvalidArgument naming the roles", err)
	}
	addUser(t, r, "Alice.Smith+ci@example.com", "viewer")
	_, err = r.Admin().AddUser(ctx, connect.NewRequest(&podiumv1.AddUserRequest{Name: "Alice.Smith+ci@example.com", Role: "admin"}))
	if connect.CodeOf(err) != connect.CodeAlreadyExists {
		t.Errorf("adding a login twice: %v, want AlreadyExists", err)
	}
	_, err = as(r, strings.Repeat("x", 10000)).tasks.List(ctx, connect.NewRequest(&podiumv1.ListRequest{}))
	if connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("a 10 kB token: %v, want Unauthenticated", err)
	}
}

// Every task is its submitter's: members cancel and message only their own,
// see other people's tasks without env values, and list their own or one
// person's; an admin sees and cancels any.
func TestTaskOwnership(t *testing.T) {
	t.Parallel()
	r, _ := coordtest.New(t)
	ctx := context.Background()
	alice, bob := as(r, addUser(t, r, "alice", "member")), as(r, addUser(t, r, "bob", "member"))
	spec := &podiumv1.TaskSpec{Image: "busybox", Env: map[string]string{"API_KEY": "hunter2-alice"},
		Sidecars: []*podiumv1.Sidecar{{Name: "db", Image: "postgres", Env: map[string]string{"POSTGRES_PASSWORD": "pw-alice"}}}}
	sub, err := alice.tasks.Submit(ctx, connect.NewRequest(&podiumv1.SubmitRequest{Spec: spec}))
	if err != nil {
		t.Fatal(err)
	}
	id := sub.Msg.Task.Id
	if _, err := bob.tasks.Submit(ctx, connect.NewRequest(&podiumv1.SubmitRequest{Spec: &podiumv1.TaskSpec{Image: "busybox"}})); err != nil {
		t.Fatal(err)
	}

	// Alice and the admin see her env; bob sees its names only.
	for who, c := range map[string]podiumv1connect.TaskServiceClient{"alice": alice.tasks, "the admin": r.Tasks()} {
		got, err := c.Get(ctx, connect.NewRequest(&podiumv1.GetRequest{Id: id}))
		if err != nil {
			t.Fatal(err)
		}
		if got.Msg.Task.EnvHidden || got.Msg.Task.Spec.Env["API_KEY"] != "hunter2-alice" || got.Msg.Task.Spec.Sidecars[0].Env["POSTGRES_PASSWORD"] != "pw-alice" {
			t.Errorf("%s's get of alice's task: %v, want its env", who, got.Msg.Task.Spec)
		}
	}
	got, err := bob.tasks.Get(ctx, connect.NewRequest(&podiumv1.GetRequest{Id: id}))
	if err != nil {
		t.Fatal(err)
	}
	if s := got.Msg.Task.String(); strings.Contains(s, "hunter2") || strings.Contains(s, "pw-alice") || !got.Msg.Task.EnvHidden {
		t.Errorf("bob's get of alice's task shows env values or does not say they are hidden: %s", s)
	}
	if _, ok := got.Msg.Task.Spec.Env["API_KEY"]; !ok {
		t.Errorf("bob's get lost the env's names: %v", got.Msg.Task.Spec.Env)
	}
	all, err := bob.tasks.List(ctx, connect.NewRequest(&podiumv1.ListRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if len(all.Msg.Tasks) != 2 || strings.Contains(all.Msg.String(), "hunter2") {
		t.Errorf("bob's list: %d tasks, env values shown: %v", len(all.Msg.Tasks), strings.Contains(all.Msg.String(), "hunter2"))
	}
	ev, err := bob.tasks.Events(ctx, connect.NewRequest(&podiumv1.EventsRequest{Id: id}))
	if err != nil {
		t.Fatal(err)
	}
	for ev.Receive() {
		if strings.Contains(ev.Msg().String(), "hunter2") {
			t.Errorf("bob's events of alice's task show her env: %v", ev.Msg())
		}
	}
	if err := ev.Err(); err != nil {
		t.Fatal(err)
	}

	// --mine and --user.
	for _, c := range []struct {
		who  string
		tc   podiumv1connect.TaskServiceClient
		req  *podiumv1.ListRequest
		want string
	}{
		{"bob", bob.tasks, &podiumv1.ListRequest{Mine: true}, "bob"},
		{"alice", alice.tasks, &podiumv1.ListRequest{Mine: true}, "alice"},
		{"bob", bob.tasks, &podiumv1.ListRequest{RequestedBy: "alice"}, "alice"},
	} {
		ls, err := c.tc.List(ctx, connect.NewRequest(c.req))
		if err != nil {
			t.Fatal(err)
		}
		if len(ls.Msg.Tasks) != 1 || ls.Msg.Tasks[0].RequestedBy != c.want {
			t.Errorf("%s's list %v: %v, want %s's one task", c.who, c.req, ls.Msg.Tasks, c.want)
		}
	}

	// Bob may neither cancel nor message alice's task; the refusal says whose it is.
	_, err = bob.tasks.Cancel(ctx, connect.NewRequest(&podiumv1.CancelRequest{Id: id}))
	wantDenied(t, "bob cancelling alice's task", err, "is alice's", "members may cancel only their own tasks")
	_, err = bob.tasks.Send(ctx, connect.NewRequest(&podiumv1.SendRequest{Id: id, Text: "hi"}))
	wantDenied(t, "bob messaging alice's task", err, "is alice's", "members may message only their own tasks")
	got, err = r.Tasks().Get(ctx, connect.NewRequest(&podiumv1.GetRequest{Id: id}))
	if err != nil || got.Msg.Task.State != podiumv1.TaskState_TASK_STATE_QUEUED {
		t.Fatalf("alice's task after bob's refused cancel: %v, %v; want still queued", got.Msg.GetTask().GetState(), err)
	}
	// Alice may.
	c, err := alice.tasks.Cancel(ctx, connect.NewRequest(&podiumv1.CancelRequest{Id: id}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Msg.Task.State != podiumv1.TaskState_TASK_STATE_CANCELLED || !strings.Contains(c.Msg.Task.Reason, "cancelled by alice") {
		t.Errorf("alice's cancel: %v %q", c.Msg.Task.State, c.Msg.Task.Reason)
	}
}

// lockedBuffer collects a replica's log.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A personal token reaches no log line: not when it is made, used, refused
// after the user is removed, nor when a wrong one is presented. The log
// names the user and who added them.
func TestPersonalTokensAreNotLogged(t *testing.T) {
	t.Parallel()
	logs := &lockedBuffer{}
	db := pgtest.NewDatabase(t)
	r := coordtest.Start(t, db.URL, coordtest.Options{
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	ctx := context.Background()
	tok := addUser(t, r, "alice", "member")
	alice := as(r, tok)
	if _, err := alice.tasks.Submit(ctx, connect.NewRequest(&podiumv1.SubmitRequest{Spec: &podiumv1.TaskSpec{Image: "busybox"}})); err != nil {
		t.Fatal(err)
	}
	wrong := "podium_ut_" + strings.Repeat("x", 43)
	if _, err := as(r, wrong).tasks.List(ctx, connect.NewRequest(&podiumv1.ListRequest{})); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("a wrong token: %v", err)
	}
	if _, err := r.Admin().RemoveUser(ctx, connect.NewRequest(&podiumv1.RemoveUserRequest{Name: "alice"})); err != nil {
		t.Fatal(err)
	}
	if _, err := alice.tasks.List(ctx, connect.NewRequest(&podiumv1.ListRequest{})); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("a removed user's token: %v", err)
	}
	out := logs.String()
	secret := strings.TrimPrefix(tok, "podium_ut_")
	if strings.Contains(out, secret) || strings.Contains(out, strings.TrimPrefix(wrong, "podium_ut_")) {
		t.Errorf("a token is in the coordinator's log:\n%s", out)
	}
	if !strings.Contains(out, "user added") || !strings.Contains(out, "user=alice") || !strings.Contains(out, "by=token") {
		t.Errorf("the log does not say who added alice:\n%s", out)
	}
}
