package main

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

func (f *fake) SetGroupWeight(_ context.Context, req *connect.Request[podiumv1.SetGroupWeightRequest]) (*connect.Response[podiumv1.SetGroupWeightResponse], error) {
	// The weight is kept where a user call keeps its role.
	f.recordUser(userReq{call: "group set-weight", name: req.Msg.Name, role: strconv.Itoa(int(req.Msg.Weight))})
	return connect.NewResponse(&podiumv1.SetGroupWeightResponse{Group: &podiumv1.Group{Name: req.Msg.Name, Weight: req.Msg.Weight}}), nil
}

func (f *fake) ListGroups(context.Context, *connect.Request[podiumv1.ListGroupsRequest]) (*connect.Response[podiumv1.ListGroupsResponse], error) {
	f.recordUser(userReq{call: "group ls"})
	return connect.NewResponse(&podiumv1.ListGroupsResponse{Groups: []*podiumv1.Group{
		{Name: "ml-sweeps", Weight: 3, SetAt: timestamppb.Now(), SetBy: "alice", Running: 40, Queued: 4960},
		{Name: "ops", Weight: 1, Running: 2}}}), nil
}

// group set-weight sends the group and its weight; a weight out of 1..1000
// is refused before anything is sent. group ls shows each group's weight,
// running and queued tasks, and who set the weight ("-" for the default).
func TestGroupCommands(t *testing.T) {
	f := newFake(t)
	env := map[string]string{"PODIUM_SERVER": f.url(), "PODIUM_TOKEN": "boot"}
	cli := newTestCLI(env)
	if code := cli.run(t, "group", "set-weight", "ml-sweeps", "3"); code != 0 {
		t.Fatalf("group set-weight: exit %d; stderr:\n%s", code, cli.errOut)
	}
	if !strings.Contains(cli.errOut.String(), "group ml-sweeps now has weight 3") {
		t.Errorf("group set-weight does not say what it set:\n%s", cli.errOut)
	}
	for _, w := range []string{"0", "1001", "two"} {
		cli = newTestCLI(env)
		if code := cli.run(t, "group", "set-weight", "ml-sweeps", w); code != exitUsage || !strings.Contains(cli.errOut.String(), "from 1 to 1000") {
			t.Errorf("group set-weight ml-sweeps %s: exit %d, stderr:\n%s", w, code, cli.errOut)
		}
	}
	cli = newTestCLI(env)
	if code := cli.run(t, "group", "ls"); code != 0 {
		t.Fatalf("group ls: exit %d; stderr:\n%s", code, cli.errOut)
	}
	lines := strings.Split(strings.TrimSpace(cli.out.String()), "\n")
	if len(lines) != 3 || strings.Join(strings.Fields(lines[0]), " ") != "NAME WEIGHT RUNNING QUEUED SET BY" {
		t.Fatalf("group ls printed:\n%s", cli.out)
	}
	if got := strings.Fields(lines[1]); got[0] != "ml-sweeps" || got[1] != "3" || got[2] != "40" || got[3] != "4960" || got[5] != "alice" {
		t.Errorf("group ls row %q, want ml-sweeps, 3, 40, 4960, its age, alice", lines[1])
	}
	if got := strings.Fields(lines[2]); strings.Join(got, " ") != "ops 1 2 0 - -" {
		t.Errorf("group ls row %q, want ops 1 2 0 - -", lines[2])
	}
	want := []userReq{{call: "group set-weight", name: "ml-sweeps", role: "3"}, {call: "group ls"}}
	got := f.userCalls()
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("the coordinator received %v, want %v", got, want)
	}
}
