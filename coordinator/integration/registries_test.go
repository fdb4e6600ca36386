package integration_test

import (
	"context"
	"encoding/hex"
	"log/slog"
	"sort"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/podiumhq/podium/coordinator/coordtest"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/pgtest"
)

func registryLogin(t *testing.T, r *coordtest.Replica, host, user, pw string) {
	t.Helper()
	if _, err := r.Admin().RegistryLogin(context.Background(), connect.NewRequest(&podiumv1.RegistryLoginRequest{
		Host: host, Username: user, Password: []byte(pw)})); err != nil {
		t.Fatalf("registry login %s: %v", host, err)
	}
}

// Registry logins are an admin's: a member or a viewer can neither log in,
// list nor remove them (each refusal names the admin role); what an admin
// does is in the audit log with the host as target; ListRegistries shows
// host, user, who and when, and no password; neither the audit log, pg_dump
// of the database (in the clear or hex) nor the coordinator's log holds a
// password. Bad hosts (a URL, a path, too long, a Docker Hub alias that
// images never name), empty or oversized user names and passwords are
// refused.
func TestRegistryLoginsAreAdminOnlyAndAudited(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	var logs syncBuffer
	r := coordtest.Start(t, db.URL, coordtest.Options{SecretsKeyFile: coordtest.KeyFile(t),
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	ctx := context.Background()
	const pw = "registry-pa55-only-nodes-see"
	registryLogin(t, r, "registry.example.com:5000", "ci-bot", pw)
	for _, role := range []string{"member", "viewer"} {
		p := as(r, addUser(t, r, "p-"+role, role))
		_, err := p.admin.RegistryLogin(ctx, connect.NewRequest(&podiumv1.RegistryLoginRequest{Host: "registry.example.com:5000", Username: "x", Password: []byte("other")}))
		wantDenied(t, role+" logging in to a registry", err, "admin")
		_, err = p.admin.ListRegistries(ctx, connect.NewRequest(&podiumv1.ListRegistriesRequest{}))
		wantDenied(t, role+" listing registries", err, "admin")
		_, err = p.admin.RemoveRegistry(ctx, connect.NewRequest(&podiumv1.RemoveRegistryRequest{Host: "registry.example.com:5000"}))
		wantDenied(t, role+" removing a registry login", err, "admin")
	}
	for _, bad := range []*podiumv1.RegistryLoginRequest{
		{Host: "https://registry.example.com", Username: "u", Password: []byte("p")},
		{Host: "registry.example.com/path", Username: "u", Password: []byte("p")},
		{Host: strings.Repeat("a", 254), Username: "u", Password: []byte("p")},
		{Host: "index.docker.io", Username: "u", Password: []byte("p")},
		{Host: "registry.example.com", Username: "", Password: []byte("p")},
		{Host: "registry.example.com", Username: strings.Repeat("u", 257), Password: []byte("p")},
		{Host: "registry.example.com", Username: "u"},
		{Host: "registry.example.com", Username: "u", Password: make([]byte, 4<<10+1)},
	} {
		if _, err := r.Admin().RegistryLogin(ctx, connect.NewRequest(bad)); connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("RegistryLogin(host %.40q, user of %d bytes, password of %d bytes) = %v, want InvalidArgument",
				bad.Host, len(bad.Username), len(bad.Password), err)
		}
	}
	ls, err := r.Admin().ListRegistries(ctx, connect.NewRequest(&podiumv1.ListRegistriesRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	js, _ := protojson.Marshal(ls.Msg)
	if len(ls.Msg.Registries) != 1 || ls.Msg.Registries[0].Host != "registry.example.com:5000" || ls.Msg.Registries[0].Username != "ci-bot" ||
		ls.Msg.Registries[0].SetBy != "token" || ls.Msg.Registries[0].SetAt == nil || strings.Contains(string(js), pw) {
		t.Fatalf("ListRegistries = %s; want registry.example.com:5000 as ci-bot set by token, and no password", js)
	}
	if dump := pgDump(t, db); strings.Contains(dump, pw) || strings.Contains(dump, hex.EncodeToString([]byte(pw))) || !strings.Contains(dump, "ci-bot") {
		t.Fatal("pg_dump of the database holds the registry password, in the clear or in hex (or not even the login's user name)")
	}
	if _, err := r.Admin().RemoveRegistry(ctx, connect.NewRequest(&podiumv1.RemoveRegistryRequest{Host: "registry.example.com:5000"})); err != nil {
		t.Fatal(err)
	}
	_, err = r.Admin().RemoveRegistry(ctx, connect.NewRequest(&podiumv1.RemoveRegistryRequest{Host: "registry.example.com:5000"}))
	if connect.CodeOf(err) != connect.CodeNotFound || !strings.Contains(err.Error(), "podium registry ls") {
		t.Fatalf("removing it again: %v, want NotFound pointing at podium registry ls", err)
	}
	res, err := r.Admin().ListAudit(ctx, connect.NewRequest(&podiumv1.ListAuditRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range res.Msg.Entries {
		if strings.Contains(e.String(), pw) {
			t.Fatalf("the audit log holds a registry password: %v", e)
		}
		if strings.Contains(e.Action, "Registr") && e.Result != "invalid_argument" {
			got = append(got, e.Who+" "+e.Action+" "+e.Target+" "+e.Result)
		}
	}
	want := []string{ // newest first; a list is a read, which is not audited
		"token AdminService.RemoveRegistry registry.example.com:5000 not_found",
		"token AdminService.RemoveRegistry registry.example.com:5000 ok",
		"p-viewer AdminService.RemoveRegistry registry.example.com:5000 permission_denied",
		"p-viewer AdminService.RegistryLogin registry.example.com:5000 permission_denied",
		"p-member AdminService.RemoveRegistry registry.example.com:5000 permission_denied",
		"p-member AdminService.RegistryLogin registry.example.com:5000 permission_denied",
		"token AdminService.RegistryLogin registry.example.com:5000 ok",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("audit rows of registry calls:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if l := logs.String(); strings.Contains(l, pw) || !strings.Contains(l, "registry login set") {
		t.Fatalf("the coordinator's log holds the password, or lacks the line that would have shown it:\n%s", l)
	}
}

// A node's Assign carries the logins for exactly the registry hosts of the
// task's image and its sidecars' images: with logins stored for three hosts,
// a task pulling from two of them gets those two (and their passwords), a
// task on a public image gets none, and the third host's password never
// reaches the node. The coordinator's debug log of every Assign holds no
// password.
func TestAssignCarriesOnlyItsImagesRegistryLogins(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	var logs syncBuffer
	r := coordtest.Start(t, db.URL, coordtest.Options{SecretsKeyFile: coordtest.KeyFile(t),
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	registryLogin(t, r, "reg-a.example:5000", "user-a", "password-of-a")
	registryLogin(t, r, "reg-b.example", "user-b", "password-of-b")
	registryLogin(t, r, "reg-c.example", "user-c", "password-of-c")
	id, key := enroll(t, r)
	node, _ := connectNode(t, ctx, r, id, key)
	defer cancelStream(node)

	task := submit(t, ctx, r, &podiumv1.TaskSpec{Image: "reg-a.example:5000/team/app:1.0",
		Sidecars: []*podiumv1.Sidecar{{Name: "db", Image: "reg-b.example/postgres:15"}, {Name: "cache", Image: "redis:7"}}})
	a := assignOf(t, node)
	var got []string
	for _, ra := range a.RegistryAuths {
		got = append(got, ra.Host+" "+ra.Username+" "+ra.Password)
	}
	sort.Strings(got)
	want := []string{"reg-a.example:5000 user-a password-of-a", "reg-b.example user-b password-of-b"}
	if a.TaskId != task || strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("Assign of %s carries registry logins %q, want exactly %q", task, got, want)
	}
	node.send(t, status(task, a.Attempt, 1, podiumv1.TaskState_TASK_STATE_SUCCEEDED, nil))
	waitState(t, ctx, r, task, podiumv1.TaskState_TASK_STATE_SUCCEEDED)

	public := submit(t, ctx, r, &podiumv1.TaskSpec{Image: "busybox"})
	a = assignOf(t, node)
	if a.TaskId != public || len(a.RegistryAuths) != 0 {
		t.Fatalf("Assign of %s (image busybox, on docker.io) carries registry logins %v, want none", public, a.RegistryAuths)
	}
	if l := logs.String(); !strings.Contains(l, "assigning task") || strings.Contains(l, "password-of-") {
		t.Fatalf("the coordinator's log holds a registry password, or lacks the Assign lines that would have shown one:\n%s", l)
	}
}
