package main

import (
	"context"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/coordinator/coordtest"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/proto/podium/v1/podiumv1connect"
	"github.com/podiumhq/podium/test/testenv/pgtest"
)

// A task's notify URL (a chat webhook's URL is itself the credential to post
// there) is shown by podium task get to its owner and to admins only:
// another member and a viewer see "(hidden)", and --json has no URL and
// notify_hidden true.
func TestTaskGetHidesNotifyURLsFromOthers(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	r := coordtest.Start(t, db.URL, coordtest.Options{})
	ctx := context.Background()
	tokens := map[string]string{"admin": coordtest.Token}
	for name, role := range map[string]string{"alice": "member", "bob": "member", "vera": "viewer"} {
		res, err := r.Admin().AddUser(ctx, connect.NewRequest(&podiumv1.AddUserRequest{Name: name, Role: role}))
		if err != nil {
			t.Fatal(err)
		}
		tokens[name] = res.Msg.Token
	}
	const hook = "https://hooks.chat.example/services/T0001/B0002/webhook-credential-xyz"
	alice := podiumv1connect.NewTaskServiceClient(r.HTTPClient(), r.URL(), connect.WithInterceptors(bearerToken(tokens["alice"])))
	sub, err := alice.Submit(ctx, connect.NewRequest(&podiumv1.SubmitRequest{Spec: &podiumv1.TaskSpec{Image: "busybox",
		Notify: []*podiumv1.Notify{{Url: hook, Events: []string{"task.finished"}}}}}))
	if err != nil {
		t.Fatal(err)
	}
	id := sub.Msg.Task.Id
	for who, sees := range map[string]bool{"alice": true, "admin": true, "bob": false, "vera": false} {
		tc := newTestCLI(map[string]string{"PODIUM_SERVER": r.URL(), "PODIUM_TOKEN": tokens[who]})
		if code := tc.run(t, "task", "get", id); code != 0 {
			t.Fatalf("%s: task get: exit %d\n%s", who, code, tc.errOut.String())
		}
		out := tc.out.String()
		if strings.Contains(out, "webhook-credential") != sees {
			t.Errorf("%s's task get shows the notify URL: %t, want %t:\n%s", who, !sees, sees, out)
		}
		if !sees && !strings.Contains(out, "notify:") || !sees && !strings.Contains(out, "(hidden) (task.finished)") {
			t.Errorf("%s's task get does not say the notify URL is hidden:\n%s", who, out)
		}
		tc = newTestCLI(map[string]string{"PODIUM_SERVER": r.URL(), "PODIUM_TOKEN": tokens[who]})
		if code := tc.run(t, "task", "get", "--json", id); code != 0 {
			t.Fatalf("%s: task get --json: exit %d\n%s", who, code, tc.errOut.String())
		}
		js := tc.out.String()
		if strings.Contains(js, "webhook-credential") != sees || strings.Contains(js, `"notify_hidden": true`) == sees {
			t.Errorf("%s's task get --json: URL shown %t, want %t; notify_hidden must be set exactly when it is not:\n%s",
				who, strings.Contains(js, "webhook-credential"), sees, js)
		}
	}
}

type bearerToken string

func (b bearerToken) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		req.Header().Set("Authorization", "Bearer "+string(b))
		return next(ctx, req)
	}
}

func (b bearerToken) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (b bearerToken) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}
