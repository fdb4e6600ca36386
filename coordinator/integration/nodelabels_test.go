package integration_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/coordinator/coordtest"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// labelsOf renders a node's labels with their sources, "label:source[:by]",
// in its order.
func labelsOf(n *podiumv1.Node) string {
	var out []string
	for _, l := range n.GetLabelSources() {
		s := l.GetLabel() + ":" + l.GetSource()
		if l.GetSetBy() != "" {
			s += ":" + l.GetSetBy()
		}
		out = append(out, s)
	}
	return strings.Join(out, " ")
}

func nodeByID(t *testing.T, ctx context.Context, r *coordtest.Replica, id string) *podiumv1.Node {
	t.Helper()
	res, err := r.Admin().ListNodes(ctx, connect.NewRequest(&podiumv1.ListNodesRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range res.Msg.GetNodes() {
		if n.GetId() == id {
			return n
		}
	}
	t.Fatalf("no node %s in %v", id, res.Msg.GetNodes())
	return nil
}

// enrollAuditRows lists the audit log's NodeService.Enroll rows, oldest
// first, as "role|target|result".
func enrollAuditRows(t *testing.T, ctx context.Context, r *coordtest.Replica) []string {
	t.Helper()
	res, err := r.Admin().ListAudit(ctx, connect.NewRequest(&podiumv1.ListAuditRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for i := len(res.Msg.GetEntries()) - 1; i >= 0; i-- {
		if e := res.Msg.GetEntries()[i]; e.GetAction() == "NodeService.Enroll" {
			out = append(out, fmt.Sprintf("%s|%s|%s", e.GetRole(), e.GetTarget(), e.GetResult()))
		}
	}
	return out
}

// TestNodeCannotChooseItsLabels reproduces issue 28's hole 3: whoever holds
// an enrollment token asks for the label that steers production's secrets
// (`podium-agent enroll --label prod-trusted`). The enrollment is refused,
// naming the label and the ways to get it; no node is created, the refusal
// is audited, and the token is not spent, so the same token enrolls the node
// with the labels it grants.
func TestNodeCannotChooseItsLabels(t *testing.T) {
	t.Parallel()
	r, _ := coordtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tok, err := r.Admin().CreateEnrollmentToken(ctx, connect.NewRequest(&podiumv1.CreateEnrollmentTokenRequest{Labels: []string{"linux"}}))
	if err != nil {
		t.Fatal(err)
	}
	if tok.Msg.GetAllowNodeLabels() {
		t.Fatal("a token allows node labels without being asked to")
	}
	_, err = r.NodeClient().Enroll(ctx, connect.NewRequest(&podiumv1.EnrollRequest{Token: tok.Msg.Token, Hostname: "thief",
		Labels: []string{"linux", "prod-trusted"}}))
	if connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Fatalf("enrolling with a label the token does not grant: %v, want PermissionDenied", err)
	}
	for _, want := range []string{`"prod-trusted"`, "--allow-node-labels", "podium node label", "not used"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), `"linux"`) {
		t.Errorf("refusal %q names linux, which the token grants", err)
	}
	res, err := r.Admin().ListNodes(ctx, connect.NewRequest(&podiumv1.ListNodesRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Msg.GetNodes()) != 0 {
		t.Fatalf("the refused enrollment left nodes %v", res.Msg.GetNodes())
	}
	if got := enrollAuditRows(t, ctx, r); len(got) != 1 || got[0] != "node|thief asking for labels linux,prod-trusted|permission_denied" {
		t.Errorf("audit rows of enrollments %q, want the one refusal", got)
	}

	// The token was not spent: without the label it enrolls, with exactly
	// the token's labels.
	en, err := r.NodeClient().Enroll(ctx, connect.NewRequest(&podiumv1.EnrollRequest{Token: tok.Msg.Token, Hostname: "box",
		Labels: []string{"linux"}}))
	if err != nil {
		t.Fatalf("the same token without the label: %v", err)
	}
	if strings.Join(en.Msg.GetLabels(), ",") != "linux" {
		t.Errorf("enrolled with labels %v, want linux", en.Msg.GetLabels())
	}
	n := nodeByID(t, ctx, r, en.Msg.GetNodeId())
	if got := labelsOf(n); got != "linux:token" {
		t.Errorf("node labels and sources %q, want linux:token", got)
	}
	if got := enrollAuditRows(t, ctx, r); len(got) != 2 || got[1] != "node|box asking for labels linux|ok" {
		t.Errorf("audit rows of enrollments %q, want the refusal and the enrollment", got)
	}
	// Spent now, by the enrollment that succeeded.
	_, err = r.NodeClient().Enroll(ctx, connect.NewRequest(&podiumv1.EnrollRequest{Token: tok.Msg.Token, Hostname: "again"}))
	if connect.CodeOf(err) != connect.CodeUnauthenticated || !strings.Contains(err.Error(), "already used") {
		t.Errorf("a third enrollment with the token: %v, want Unauthenticated 'already used'", err)
	}
}

// A token made with --allow-node-labels lets the node add labels of its
// own, and `podium node get` (ListNodes) says which labels came from the
// token, which from the node and which from an admin, and keeps saying it
// through label changes and a rekey.
func TestNodeLabelSources(t *testing.T) {
	t.Parallel()
	r, _ := coordtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tok, err := r.Admin().CreateEnrollmentToken(ctx, connect.NewRequest(&podiumv1.CreateEnrollmentTokenRequest{
		Labels: []string{"linux"}, AllowNodeLabels: true}))
	if err != nil {
		t.Fatal(err)
	}
	if !tok.Msg.GetAllowNodeLabels() {
		t.Fatal("the token's answer does not say it allows node labels")
	}
	en, err := r.NodeClient().Enroll(ctx, connect.NewRequest(&podiumv1.EnrollRequest{Token: tok.Msg.Token, Hostname: "box",
		Labels: []string{"gpu=a100", "linux", "ssd"}}))
	if err != nil {
		t.Fatal(err)
	}
	id := en.Msg.GetNodeId()
	if got := labelsOf(nodeByID(t, ctx, r, id)); got != "linux:token gpu=a100:node ssd:node" {
		t.Errorf("after enrollment: %q, want linux from the token, gpu=a100 and ssd from the node", got)
	}

	// An admin adds a label (and vouches for one the node chose) and takes
	// one off: the sources follow.
	lab, err := r.Admin().SetNodeLabels(ctx, connect.NewRequest(&podiumv1.SetNodeLabelsRequest{NodeId: id,
		Add: []string{"prod-trusted", "gpu=a100"}, Remove: []string{"ssd"}}))
	if err != nil {
		t.Fatal(err)
	}
	want := "gpu=a100:admin:token linux:token prod-trusted:admin:token"
	if got := labelsOf(lab.Msg.GetNode()); got != want {
		t.Errorf("SetNodeLabels answered %q, want %q", got, want)
	}
	if got := labelsOf(nodeByID(t, ctx, r, id)); got != want {
		t.Errorf("after node label: %q, want %q", got, want)
	}
	_, err = r.Admin().SetNodeLabels(ctx, connect.NewRequest(&podiumv1.SetNodeLabelsRequest{NodeId: id,
		Add: []string{"x"}, Remove: []string{"x"}}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), `"x" is both added and removed`) {
		t.Errorf("adding and removing one label: %v, want InvalidArgument naming it", err)
	}

	// A rekey keeps the labels and their sources; a rekey that asks for a
	// label the node lacks is refused and leaves the token usable.
	rk, err := r.Admin().RekeyNode(ctx, connect.NewRequest(&podiumv1.RekeyNodeRequest{NodeId: id}))
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.NodeClient().Enroll(ctx, connect.NewRequest(&podiumv1.EnrollRequest{Token: rk.Msg.Token, Hostname: "box2",
		Labels: []string{"linux", "db-primary"}}))
	if connect.CodeOf(err) != connect.CodePermissionDenied || !strings.Contains(err.Error(), `"db-primary"`) ||
		!strings.Contains(err.Error(), "podium node label "+id) {
		t.Fatalf("a rekey asking for a new label: %v, want PermissionDenied naming db-primary and `podium node label`", err)
	}
	re, err := r.NodeClient().Enroll(ctx, connect.NewRequest(&podiumv1.EnrollRequest{Token: rk.Msg.Token, Hostname: "box2",
		Labels: []string{"linux"}}))
	if err != nil {
		t.Fatalf("the rekey token after the refusal: %v", err)
	}
	if re.Msg.GetNodeId() != id {
		t.Fatalf("rekeyed node %s, want %s", re.Msg.GetNodeId(), id)
	}
	if got := labelsOf(nodeByID(t, ctx, r, id)); got != want {
		t.Errorf("after the rekey: %q, want %q", got, want)
	}
}
