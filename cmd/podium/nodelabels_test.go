package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/podiumhq/podium/agent/identity"
	"github.com/podiumhq/podium/coordinator/coordtest"
	"github.com/podiumhq/podium/test/testenv/pgtest"
)

// What a person sees of issue 28's hole 3 on a real coordinator: a token
// made without --allow-node-labels does not let the machine that enrolls
// with it (the agent's own enrollment client) pick `prod-trusted`; the
// refusal says which label and how to get it, and the token still enrolls
// the machine without it. Under a token made with --allow-node-labels the
// node's own label is accepted, and podium node get says where each label
// came from, an admin's with the admin's name.
func TestNodeLabelsOnARealCoordinator(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	r := coordtest.Start(t, db.URL, coordtest.Options{})
	env := map[string]string{"PODIUM_SERVER": r.URL(), "PODIUM_TOKEN": coordtest.Token}
	podium := func(args ...string) (int, string, string) {
		tc := newTestCLI(env)
		code := tc.run(t, args...)
		return code, tc.out.String(), tc.errOut.String()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	enroll := func(token string, labels ...string) (*identity.Identity, error) {
		return identity.Enroll(ctx, identity.EnrollParams{DataDir: t.TempDir(), CoordinatorURL: r.URL(), Token: token,
			Labels: labels, Hostname: "worker", AgentVersion: "test"})
	}

	code, out, errOut := podium("token", "create", "--label", "linux")
	if code != 0 {
		t.Fatalf("token create: exit %d:\n%s", code, errOut)
	}
	if strings.Contains(errOut, "may add labels") {
		t.Errorf("a token without --allow-node-labels says it allows them:\n%s", errOut)
	}
	token := strings.TrimSpace(out)
	_, err := enroll(token, "prod-trusted")
	if err == nil {
		t.Fatal("a node enrolled with --label prod-trusted under a token that grants only linux")
	}
	for _, want := range []string{`"prod-trusted"`, "podium token create --allow-node-labels", "podium node label", "the token was not used"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the agent's refusal %q does not say %q", err, want)
		}
	}
	if code, out, _ := podium("nodes"); code != 0 || strings.Contains(out, "worker") {
		t.Fatalf("podium nodes after the refusal: exit %d:\n%s", code, out)
	}
	id, err := enroll(token)
	if err != nil {
		t.Fatalf("the same token without --label: %v", err)
	}
	if code, out, errOut := podium("node", "get", id.NodeID); code != 0 || !strings.Contains(out, "labels: ") ||
		!strings.Contains(out, "linux (from the enrollment token)") {
		t.Errorf("node get: exit %d:\n%s%s", code, out, errOut)
	}

	code, out, errOut = podium("token", "create", "--label", "linux", "--allow-node-labels")
	if code != 0 || !strings.Contains(errOut, "the node may add labels of its own") {
		t.Fatalf("token create --allow-node-labels: exit %d:\n%s", code, errOut)
	}
	id, err = enroll(strings.TrimSpace(out), "gpu=a100")
	if err != nil {
		t.Fatalf("--label under a token that allows node labels: %v", err)
	}
	if code, _, errOut := podium("node", "label", id.NodeID, "--add", "prod-trusted"); code != 0 {
		t.Fatalf("node label: exit %d:\n%s", code, errOut)
	}
	code, out, errOut = podium("node", "get", id.NodeID)
	want := "gpu=a100 (asked for by the node), linux (from the enrollment token), prod-trusted (added by token)"
	if code != 0 || !strings.Contains(out, want) {
		t.Errorf("node get: exit %d, want labels %q:\n%s\n%s", code, want, out, errOut)
	}
	code, out, _ = podium("node", "get", "--json", id.NodeID)
	if code != 0 || !strings.Contains(out, `"source": "node"`) || !strings.Contains(out, `"set_by": "token"`) {
		t.Errorf("node get --json shows no label sources:\n%s", out)
	}
}
