package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"
	"gopkg.in/yaml.v3"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// userReqs holds what the fake's people calls received, in order.
type userReq struct{ call, name, role string }

var (
	userCallsMu sync.Mutex
	userCalls   = map[*fake][]userReq{}
)

func (f *fake) recordUser(r userReq) {
	userCallsMu.Lock()
	defer userCallsMu.Unlock()
	userCalls[f] = append(userCalls[f], r)
}

func (f *fake) userCalls() []userReq {
	userCallsMu.Lock()
	defer userCallsMu.Unlock()
	return append([]userReq(nil), userCalls[f]...)
}

func (f *fake) AddUser(_ context.Context, req *connect.Request[podiumv1.AddUserRequest]) (*connect.Response[podiumv1.AddUserResponse], error) {
	f.recordUser(userReq{"add", req.Msg.Name, req.Msg.Role})
	return connect.NewResponse(&podiumv1.AddUserResponse{Token: "podium_ut_secret",
		User: &podiumv1.User{Name: req.Msg.Name, Role: req.Msg.Role, CreatedAt: timestamppb.Now(), CreatedBy: "token"}}), nil
}

func (f *fake) ListUsers(context.Context, *connect.Request[podiumv1.ListUsersRequest]) (*connect.Response[podiumv1.ListUsersResponse], error) {
	f.recordUser(userReq{call: "ls"})
	return connect.NewResponse(&podiumv1.ListUsersResponse{Users: []*podiumv1.User{
		{Name: "alice", Role: "member", CreatedAt: timestamppb.Now(), CreatedBy: "token"},
		{Name: "bob@example.com", Role: "viewer", CreatedAt: timestamppb.Now(), CreatedBy: "alice"}}}), nil
}

func (f *fake) RemoveUser(_ context.Context, req *connect.Request[podiumv1.RemoveUserRequest]) (*connect.Response[podiumv1.RemoveUserResponse], error) {
	f.recordUser(userReq{call: "rm", name: req.Msg.Name})
	return connect.NewResponse(&podiumv1.RemoveUserResponse{}), nil
}

func (f *fake) SetUserRole(_ context.Context, req *connect.Request[podiumv1.SetUserRoleRequest]) (*connect.Response[podiumv1.SetUserRoleResponse], error) {
	f.recordUser(userReq{"set-role", req.Msg.Name, req.Msg.Role})
	return connect.NewResponse(&podiumv1.SetUserRoleResponse{User: &podiumv1.User{Name: req.Msg.Name, Role: req.Msg.Role}}), nil
}

// user add prints only the token on stdout (so T=$(podium user add …)
// works), user ls lists names and roles, set-role and rm send what was
// asked; a missing --role is refused before anything is sent.
func TestUserCommands(t *testing.T) {
	f := newFake(t)
	env := map[string]string{"PODIUM_SERVER": f.url(), "PODIUM_TOKEN": "boot"}
	cli := newTestCLI(env)
	if code := cli.run(t, "user", "add", "alice", "--role", "member"); code != 0 {
		t.Fatalf("user add: exit %d; stderr:\n%s", code, cli.errOut)
	}
	if got := cli.out.String(); got != "podium_ut_secret\n" {
		t.Errorf("user add printed %q on stdout, want only the token", got)
	}
	if !strings.Contains(cli.errOut.String(), "shown once") {
		t.Errorf("user add does not say the token is shown once:\n%s", cli.errOut)
	}
	cli = newTestCLI(env)
	if code := cli.run(t, "user", "ls"); code != 0 {
		t.Fatalf("user ls: exit %d; stderr:\n%s", code, cli.errOut)
	}
	for _, want := range []string{"NAME", "ROLE", "alice", "member", "bob@example.com", "viewer"} {
		if !strings.Contains(cli.out.String(), want) {
			t.Errorf("user ls does not show %q:\n%s", want, cli.out)
		}
	}
	for _, args := range [][]string{{"user", "set-role", "alice", "admin"}, {"user", "rm", "alice"}} {
		cli = newTestCLI(env)
		if code := cli.run(t, args...); code != 0 {
			t.Fatalf("%v: exit %d; stderr:\n%s", args, code, cli.errOut)
		}
	}
	cli = newTestCLI(env)
	if code := cli.run(t, "user", "add", "carol"); code != exitUsage || !strings.Contains(cli.errOut.String(), "--role: required") {
		t.Errorf("user add without --role: exit %d, stderr:\n%s", code, cli.errOut)
	}
	want := []userReq{{"add", "alice", "member"}, {call: "ls"}, {"set-role", "alice", "admin"}, {call: "rm", name: "alice"}}
	got := f.userCalls()
	if len(got) != len(want) {
		t.Fatalf("the coordinator received %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("call %d: %v, want %v", i, got[i], want[i])
		}
	}
}

// tasks --mine and --user ask the coordinator for one person's tasks;
// both at once is a usage error, sent nowhere.
func TestTasksMineAndUser(t *testing.T) {
	f := newFake(t)
	env := map[string]string{"PODIUM_SERVER": f.url()}
	cli := newTestCLI(env)
	if code := cli.run(t, "tasks", "--mine"); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, cli.errOut)
	}
	if r := f.listReq; !r.Mine || r.RequestedBy != "" {
		t.Errorf("tasks --mine sent %v", r)
	}
	cli = newTestCLI(env)
	if code := cli.run(t, "tasks", "--user", "bob@example.com"); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, cli.errOut)
	}
	if r := f.listReq; r.Mine || r.RequestedBy != "bob@example.com" {
		t.Errorf("tasks --user sent %v", r)
	}
	n := len(f.recorded())
	cli = newTestCLI(env)
	if code := cli.run(t, "tasks", "--mine", "--user", "bob"); code != exitUsage {
		t.Errorf("--mine with --user: exit %d, want %d", code, exitUsage)
	}
	if len(f.recorded()) != n {
		t.Error("--mine with --user sent a request")
	}
}

// podium login reads the token from stdin, checks it with the coordinator,
// and stores server and token in ~/.config/podium/config.yaml, 0600 in a
// 0700 directory. Later commands use them; PODIUM_TOKEN wins over the
// stored token, and a server chosen with --server never receives it.
func TestLogin(t *testing.T) {
	f, other := newFake(t), newFake(t)
	home := t.TempDir()
	cli := newTestCLI(map[string]string{"HOME": home, "PODIUM_SERVER": f.url()})
	cli.stdin = strings.NewReader("podium_ut_mine\n")
	if code := cli.run(t, "login"); code != 0 {
		t.Fatalf("login: exit %d; stderr:\n%s", code, cli.errOut)
	}
	if got := f.recorded()[0].auth; got != "Bearer podium_ut_mine" {
		t.Errorf("login checked the token with %q", got)
	}
	path := filepath.Join(home, ".config", "podium", "config.yaml")
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("%s has mode %v, want 0600", path, st.Mode().Perm())
	}
	if dir, err := os.Stat(filepath.Dir(path)); err != nil || dir.Mode().Perm() != 0o700 {
		t.Errorf("the config directory: %v, %v; want 0700", dir.Mode().Perm(), err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var fc fileConfig
	if err := yaml.Unmarshal(b, &fc); err != nil || fc.Server != f.url() || fc.Token != "podium_ut_mine" {
		t.Errorf("config.yaml = %q (%v), want the server and the token", b, err)
	}
	if strings.Contains(cli.errOut.String(), "podium_ut_mine") || strings.Contains(cli.out.String(), "podium_ut_mine") {
		t.Error("login echoed the token")
	}

	// With only HOME set, the stored server and token are used.
	cli = newTestCLI(map[string]string{"HOME": home})
	if code := cli.run(t, "tasks"); code != 0 {
		t.Fatalf("tasks after login: exit %d; stderr:\n%s", code, cli.errOut)
	}
	rec := f.recorded()
	if last := rec[len(rec)-1]; last.auth != "Bearer podium_ut_mine" || !strings.HasSuffix(last.path, "/List") {
		t.Errorf("tasks after login sent %v, want List with the stored token", last)
	}
	// The environment wins.
	cli = newTestCLI(map[string]string{"HOME": home, "PODIUM_TOKEN": "from-env"})
	if code := cli.run(t, "tasks"); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, cli.errOut)
	}
	rec = f.recorded()
	if last := rec[len(rec)-1]; last.auth != "Bearer from-env" {
		t.Errorf("with PODIUM_TOKEN set, tasks sent %q", last.auth)
	}
	// Another server does not get the stored token.
	cli = newTestCLI(map[string]string{"HOME": home})
	if code := cli.run(t, "--server", other.url(), "tasks"); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, cli.errOut)
	}
	if got := other.recorded()[0].auth; got != "" {
		t.Errorf("a server given with --server received the stored token: %q", got)
	}
}

var auditReqs sync.Map // *fake → *podiumv1.ListAuditRequest

func (f *fake) ListAudit(_ context.Context, req *connect.Request[podiumv1.ListAuditRequest]) (*connect.Response[podiumv1.ListAuditResponse], error) {
	auditReqs.Store(f, req.Msg)
	return connect.NewResponse(&podiumv1.ListAuditResponse{Entries: []*podiumv1.AuditEntry{
		{Id: 2, At: timestamppb.Now(), Who: "alice", Role: "member", Transport: "local", Action: "TaskService.Cancel", Target: "task_01X", Result: "ok"}}}), nil
}

// podium audit sends --since as a time that long ago, --user as given, and
// prints who did what to what with the result.
func TestAudit(t *testing.T) {
	f := newFake(t)
	cli := newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
	before := time.Now()
	if code := cli.run(t, "audit", "--since", "24h", "--user", "alice"); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, cli.errOut)
	}
	after := time.Now()
	v, _ := auditReqs.Load(f)
	req := v.(*podiumv1.ListAuditRequest)
	since := req.GetSince().AsTime()
	if req.User != "alice" || since.Before(before.Add(-24*time.Hour)) || since.After(after.Add(-24*time.Hour)) {
		t.Errorf("audit sent %v, want user alice since 24 h ago", req)
	}
	for _, want := range []string{"WHO", "alice", "member", "TaskService.Cancel", "task_01X", "ok"} {
		if !strings.Contains(cli.out.String(), want) {
			t.Errorf("audit does not show %q:\n%s", want, cli.out)
		}
	}
	cli = newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
	if code := cli.run(t, "audit", "--since", "last tuesday"); code != exitUsage {
		t.Errorf("--since 'last tuesday': exit %d, want %d", code, exitUsage)
	}
	if got, err := parseSince("2026-12-01", time.Now()); err != nil || got.Day() != 1 {
		t.Errorf("parseSince(2026-12-01) = %v, %v", got, err)
	}
}

func (f *fake) SetUserWeight(_ context.Context, req *connect.Request[podiumv1.SetUserWeightRequest]) (*connect.Response[podiumv1.SetUserWeightResponse], error) {
	f.recordUser(userReq{"set-weight", req.Msg.Name, strconv.Itoa(int(req.Msg.Weight))})
	return connect.NewResponse(&podiumv1.SetUserWeightResponse{User: &podiumv1.User{Name: req.Msg.Name, Role: "member", Weight: req.Msg.Weight}}), nil
}

// user set-weight sends the weight and says what it is now; a weight that
// is not a whole number from 1 to 1000 is a usage error, sent nowhere.
func TestUserSetWeight(t *testing.T) {
	f := newFake(t)
	env := map[string]string{"PODIUM_SERVER": f.url(), "PODIUM_TOKEN": "boot"}
	cli := newTestCLI(env)
	if code := cli.run(t, "user", "set-weight", "alice", "2"); code != 0 {
		t.Fatalf("user set-weight: exit %d; stderr:\n%s", code, cli.errOut)
	}
	if !strings.Contains(cli.errOut.String(), "alice now has weight 2") {
		t.Errorf("user set-weight does not say the new weight:\n%s", cli.errOut)
	}
	for _, bad := range []string{"0", "1001", "two", "1.5"} {
		cli = newTestCLI(env)
		if code := cli.run(t, "user", "set-weight", "alice", bad); code != exitUsage || !strings.Contains(cli.errOut.String(), "WEIGHT: ") ||
			!strings.Contains(cli.errOut.String(), "from 1 to 1000") {
			t.Errorf("user set-weight alice %s: exit %d, stderr:\n%s", bad, code, cli.errOut)
		}
	}
	if got, want := f.userCalls(), []userReq{{"set-weight", "alice", "2"}}; len(got) != 1 || got[0] != want[0] {
		t.Errorf("the coordinator received %v, want %v", got, want)
	}
}
