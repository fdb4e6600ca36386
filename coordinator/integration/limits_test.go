package integration_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/podiumhq/podium/coordinator/coordtest"
	"github.com/podiumhq/podium/internal/taskspec"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// wantRefused checks that err is InvalidArgument and its message names every
// one of says.
func wantRefused(t *testing.T, what string, err error, says ...string) {
	t.Helper()
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeInvalidArgument {
		t.Fatalf("%s: got %v, want InvalidArgument", what, err)
	}
	for _, s := range says {
		if !strings.Contains(ce.Message(), s) {
			t.Errorf("%s: the message %q does not say %q", what, ce.Message(), s)
		}
	}
}

func taskCount(t *testing.T, ctx context.Context, r *coordtest.Replica) int {
	t.Helper()
	list, err := r.Tasks().List(ctx, connect.NewRequest(&podiumv1.ListRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	return len(list.Msg.Tasks)
}

// Specs past taskspec's limits are refused by the API with the field named,
// and nothing is stored: the same rules the CLI applies before sending.
func TestSubmitPastLimitsIsRefused(t *testing.T) {
	t.Parallel()
	r, _ := coordtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	env := func(n, size int) map[string]string {
		m := map[string]string{}
		for i := range n {
			m[fmt.Sprintf("K%d", i)] = strings.Repeat("v", size)
		}
		return m
	}
	labels := func(n int) []string {
		var l []string
		for i := range n {
			l = append(l, fmt.Sprintf("l%d", i))
		}
		return l
	}
	sidecars := func(n int) []*podiumv1.Sidecar {
		var s []*podiumv1.Sidecar
		for i := range n {
			s = append(s, &podiumv1.Sidecar{Name: fmt.Sprintf("s%d", i), Image: "busybox"})
		}
		return s
	}
	unknown := &podiumv1.TaskSpec{Image: "busybox"}
	unknown.ProtoReflect().SetUnknown(protowire.AppendString(protowire.AppendTag(nil, 99, protowire.BytesType), "new"))
	for _, tc := range []struct {
		name  string
		spec  *podiumv1.TaskSpec
		field string
		says  string
	}{
		{"a spec over 256 KiB", &podiumv1.TaskSpec{Image: "busybox", Env: env(10, 30<<10)}, "spec:", "more than 262144"},
		{"257 env entries", &podiumv1.TaskSpec{Image: "busybox", Env: env(257, 1)}, "spec.env:", "more than 256"},
		{"an env value over 32 KiB", &podiumv1.TaskSpec{Image: "busybox", Env: map[string]string{"A": strings.Repeat("v", 32<<10+1)}},
			`spec.env["A"]`, "more than 32768"},
		{"an env key over 256 bytes", &podiumv1.TaskSpec{Image: "busybox", Env: map[string]string{strings.Repeat("K", 257): "v"}},
			"spec.env[", "longer than 256"},
		{"65 labels", &podiumv1.TaskSpec{Image: "busybox", Labels: labels(65)}, "spec.labels:", "more than 64"},
		{"9 sidecars", &podiumv1.TaskSpec{Image: "busybox", Sidecars: sidecars(9)}, "spec.sidecars:", "more than 8"},
		{"a command over 64 KiB", &podiumv1.TaskSpec{Image: "busybox", Command: []string{"echo", strings.Repeat("x", 64<<10)}},
			"spec.command:", "more than 65536"},
		{"an argument over MAX_ARG_STRLEN", &podiumv1.TaskSpec{Image: "busybox", Command: []string{"echo", strings.Repeat("x", 128<<10)}},
			"spec.command[1]", "MAX_ARG_STRLEN"},
		{"a timeout of 10^10 s", &podiumv1.TaskSpec{Image: "busybox", TimeoutSeconds: 1e10}, "spec.timeout_seconds", "a year"},
		{"a cancel grace of 10^18 s", &podiumv1.TaskSpec{Image: "busybox", CancelGraceSeconds: 1e18}, "spec.cancel_grace_seconds", "a year"},
		{"a readiness timeout of 10^12 s", &podiumv1.TaskSpec{Image: "busybox", Sidecars: []*podiumv1.Sidecar{{Name: "db", Image: "postgres:16",
			Readiness: &podiumv1.Readiness{TcpPort: 5432, TimeoutSeconds: 1e12}}}}, "spec.sidecars[0].readiness.timeout_seconds", "a year"},
		{"BusyBox:Latest", &podiumv1.TaskSpec{Image: "BusyBox:Latest"}, "spec.image", "must be lowercase"},
		{"busybox;rm${IFS}-rf", &podiumv1.TaskSpec{Image: "busybox;rm${IFS}-rf"}, "spec.image", "not an image reference"},
		{"--help", &podiumv1.TaskSpec{Image: "--help"}, "spec.image", "not an image reference"},
		{"a field the coordinator does not know", unknown, "spec:", "field number 99"},
		{"too much memory", &podiumv1.TaskSpec{Image: "busybox", Resources: &podiumv1.Resources{MemoryMb: 1 << 50}},
			"spec.resources.memory_mb", "more than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := r.Tasks().Submit(ctx, connect.NewRequest(&podiumv1.SubmitRequest{Spec: tc.spec}))
			wantRefused(t, tc.name, err, tc.field, tc.says)
			if err != nil && len(err.Error()) > 1024 {
				t.Errorf("the error is %d bytes: it must not quote the value whole", len(err.Error()))
			}
		})
	}
	if n := taskCount(t, ctx, r); n != 0 {
		t.Fatalf("refused submits stored %d tasks", n)
	}
}

// postJSON calls a unary procedure of the API with a JSON body, as curl or a
// script would, and returns the HTTP status and the body.
func postJSON(t *testing.T, ctx context.Context, r *coordtest.Replica, procedure, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.URL()+procedure, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+coordtest.Token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, string(b)
}

// A JSON request with a field the API does not know is refused naming it,
// instead of the field being dropped: `"timeout": "10m"` (the spec file's key)
// used to submit a task with no timeout at all.
func TestJSONWithAnUnknownFieldIsRefused(t *testing.T) {
	t.Parallel()
	r, _ := coordtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const submit = "/podium.v1.TaskService/Submit"
	for _, body := range []string{
		`{"spec": {"image": "busybox", "timeout": "10m"}}`,
		`{"spec": {"image": "busybox", "resources": {"memory": 512}}}`,
		`{"spec": {"image": "busybox"}, "dryRun": true}`,
	} {
		status, got := postJSON(t, ctx, r, submit, body)
		var e struct{ Code, Message string }
		if err := json.Unmarshal([]byte(got), &e); err != nil || status != http.StatusBadRequest || e.Code != "invalid_argument" {
			t.Fatalf("%s: got %d %s, want 400 and invalid_argument", body, status, got)
		}
		if !strings.Contains(e.Message, "unknown field") {
			t.Errorf("%s: the message %q does not say which field is unknown", body, e.Message)
		}
	}
	if status, got := postJSON(t, ctx, r, submit, `{"spec": {"image": "busybox", "timeout": "10m"}}`); !strings.Contains(got, `unknown field \"timeout\"`) {
		t.Errorf("got %d %s, want the field named", status, got)
	}
	if n := taskCount(t, ctx, r); n != 0 {
		t.Fatalf("refused JSON submits stored %d tasks", n)
	}
	// The API's own names, in either spelling protojson takes, still work.
	for _, body := range []string{
		`{"spec": {"image": "busybox", "timeoutSeconds": "600"}}`,
		`{"spec": {"image": "busybox", "timeout_seconds": 600}}`,
	} {
		if status, got := postJSON(t, ctx, r, submit, body); status != http.StatusOK || !strings.Contains(got, `"timeoutSeconds":"600"`) {
			t.Fatalf("%s: got %d %s, want the task with its timeout", body, status, got)
		}
	}
	// The admin API is held to the same.
	if status, got := postJSON(t, ctx, r, "/podium.v1.AdminService/ListNodes", `{"all": true}`); status != http.StatusBadRequest ||
		!strings.Contains(got, "unknown field") {
		t.Errorf("admin API with an unknown field: got %d %s, want it refused", status, got)
	}
}

// A cancel's reason is bounded: a longer one is refused and the task is left
// as it was.
func TestCancelReasonIsBounded(t *testing.T) {
	t.Parallel()
	r, _ := coordtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	id := submit(t, ctx, r, &podiumv1.TaskSpec{Image: "busybox"})
	_, err := r.Tasks().Cancel(ctx, connect.NewRequest(&podiumv1.CancelRequest{Id: id, Reason: strings.Repeat("r", taskspec.MaxCancelReasonBytes+1)}))
	wantRefused(t, "a 1025-byte reason", err, "reason:", "more than 1024")
	if got := getTask(t, ctx, r, id); got.State != podiumv1.TaskState_TASK_STATE_QUEUED {
		t.Fatalf("after a refused cancel the task is %v, want it still queued", got.State)
	}
	if _, err := r.Tasks().Cancel(ctx, connect.NewRequest(&podiumv1.CancelRequest{Id: id, Reason: strings.Repeat("r", taskspec.MaxCancelReasonBytes)})); err != nil {
		t.Fatalf("a reason of 1024 bytes: %v", err)
	}
}
