package tasks_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podiumhq/podium/internal/ids"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// List through the real handler: the filters reach the store, a cursor pages
// through every task once, and each bad filter is refused naming the field
// and what to give.
func TestListFiltersPagesAndBounds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := startService(t)
	var submitted []string
	for i := range 5 {
		spec := goodSpec(i)
		if i%2 == 0 {
			spec.Labels = []string{"team=ml"}
		}
		if i%3 == 0 {
			spec.Name = "deploy-web"
		}
		res, err := s.client.Submit(ctx, connect.NewRequest(&podiumv1.SubmitRequest{Spec: spec}))
		if err != nil {
			t.Fatal(err)
		}
		submitted = append(submitted, res.Msg.GetTask().GetId())
	}
	list := func(req *podiumv1.ListRequest) ([]string, error) {
		res, err := s.client.List(ctx, connect.NewRequest(req))
		if err != nil {
			return nil, err
		}
		var out []string
		for _, task := range res.Msg.GetTasks() {
			out = append(out, task.GetId())
		}
		return out, nil
	}

	all, err := list(&podiumv1.ListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if want := slices.Clone(submitted); !slices.Equal(slices.Sorted(slices.Values(all)), slices.Sorted(slices.Values(want))) {
		t.Fatalf("listed %v, want the %d submitted", all, len(want))
	}
	var paged []string
	after := ""
	for {
		page, err := list(&podiumv1.ListRequest{Limit: 2, After: after})
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		paged, after = append(paged, page...), page[len(page)-1]
	}
	if !slices.Equal(paged, all) {
		t.Errorf("paging by 2 listed %v, want %v", paged, all)
	}
	labelled, err := list(&podiumv1.ListRequest{Label: "team=ml", Since: timestamppb.New(time.Now().Add(-time.Hour))})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{submitted[0], submitted[2], submitted[4]}; !slices.Equal(slices.Sorted(slices.Values(labelled)), slices.Sorted(slices.Values(want))) {
		t.Errorf("label team=ml listed %v, want %v", labelled, want)
	}

	named, err := list(&podiumv1.ListRequest{Name: "deploy-web"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{submitted[0], submitted[3]}; !slices.Equal(slices.Sorted(slices.Values(named)), slices.Sorted(slices.Values(want))) {
		t.Errorf("name deploy-web listed %v, want %v", named, want)
	}
	if none, err := list(&podiumv1.ListRequest{Name: "deploy"}); err != nil || len(none) != 0 {
		t.Errorf("name deploy (a prefix of deploy-web) listed %v (%v), want none: a name matches exactly", none, err)
	}

	for _, tc := range []struct {
		name string
		req  *podiumv1.ListRequest
		code connect.Code
		msg  string
	}{
		{"limit over 1000", &podiumv1.ListRequest{Limit: 1001}, connect.CodeInvalidArgument, "limit: 1001 is out of range: give 1 to 1000"},
		{"negative limit", &podiumv1.ListRequest{Limit: -1}, connect.CodeInvalidArgument, "limit: -1 is out of range"},
		{"bad label", &podiumv1.ListRequest{Label: "a b"}, connect.CodeInvalidArgument, `label: label "a b"`},
		{"long label", &podiumv1.ListRequest{Label: strings.Repeat("l", 129)}, connect.CodeInvalidArgument, "longer than 128 bytes"},
		{"long user", &podiumv1.ListRequest{RequestedBy: strings.Repeat("u", 129)}, connect.CodeInvalidArgument, "requested_by: name: 129 bytes is more than 128"},
		{"bad name", &podiumv1.ListRequest{Name: "deploy web"}, connect.CodeInvalidArgument, `name: "deploy web" is not a task name`},
		{"long name", &podiumv1.ListRequest{Name: strings.Repeat("n", 129)}, connect.CodeInvalidArgument, "at most 128 bytes"},
		{"bad node", &podiumv1.ListRequest{Node: "web-1"}, connect.CodeInvalidArgument, `node: "web-1" is not a node id`},
		{"bad cursor", &podiumv1.ListRequest{After: "task_x"}, connect.CodeInvalidArgument, `after: "task_x" is not a task id`},
		{"future since", &podiumv1.ListRequest{Since: timestamppb.New(time.Now().Add(time.Hour))}, connect.CodeInvalidArgument, "is in the future: give a time in the past"},
		{"unknown cursor", &podiumv1.ListRequest{After: ids.New("task")}, connect.CodeNotFound, "start the list again without it"},
	} {
		_, err := list(tc.req)
		if connect.CodeOf(err) != tc.code || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: %v, want %v containing %q", tc.name, err, tc.code, tc.msg)
		}
	}
}
