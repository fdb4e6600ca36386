package executor_test

import (
	"context"
	"testing"
	"time"

	"github.com/podiumhq/podium/agent/executor"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// A task reads which task and which attempt it is from its environment, on
// the real engine, and the node's values win over a spec's own.
func TestTaskKnowsItsAttempt(t *testing.T) {
	t.Parallel()
	e := setup(t)
	spec := e.sh(`printf '%s %s' "$` + executor.EnvTaskID + `" "$` + executor.EnvAttempt + `"`)
	spec.Env = map[string]string{executor.EnvAttempt: "99"}
	rec := newRecorder()
	a := e.assign(t, spec)
	a.Attempt = 3
	done, err := e.exec.Start(context.Background(), a, rec.emit)
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, done, 60*time.Second)
	if st := rec.final(t, executor.Key{TaskID: a.TaskId, Attempt: a.Attempt}); st.GetState() != podiumv1.TaskState_TASK_STATE_SUCCEEDED {
		t.Fatalf("final status %v, want succeeded", st)
	}
	if got, want := string(rec.output(t, podiumv1.LogStream_LOG_STREAM_STDOUT)), a.TaskId+" 3"; got != want {
		t.Errorf("the task printed %q, want %q", got, want)
	}
}
