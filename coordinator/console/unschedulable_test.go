package console_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/podiumhq/podium/coordinator/dispatch"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// The task page says "unschedulable" of a task no node could ever run, with
// its reason and, when it has a queue timeout, when it fails; a task that
// waits for a slot is not called so.
func TestTaskPageSaysUnschedulable(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	ctx := context.Background()
	if _, err := e.sql.Exec(ctx, "update podium.nodes set max_tasks = 1 where id = $1", e.node); err != nil {
		t.Fatal(err)
	}
	e.task("alice", &podiumv1.TaskSpec{Image: "busybox"}, true) // holds the node's one slot
	never := e.task("alice", &podiumv1.TaskSpec{Image: "busybox", Labels: []string{"gpu"}}, false)
	if _, err := e.sql.Exec(ctx, "update podium.tasks set queue_timeout_seconds = 600, queue_deadline = now() + interval '10 minutes' where id = $1", never); err != nil {
		t.Fatal(err)
	}
	slot := e.task("alice", &podiumv1.TaskSpec{Image: "busybox"}, false)
	fleet, err := e.st.Fleet(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.st.DispatchPass(ctx, 100, dispatch.PlaceOn(dispatch.Fleet(fleet), time.Now())); err != nil {
		t.Fatal(err)
	}
	c := e.as("vera")
	_, body := get(t, c, e.srv.URL, "/console/tasks/"+never)
	for _, want := range []string{`<span id="task-unschedulable" class="unschedulable"`, ">unschedulable</span>",
		"— cannot run on any node: no node has every label the task needs (gpu)", `<dd id="queue-deadline">fails at `,
		"unschedulable: cannot run on any node"} { // the note in its log
		if !strings.Contains(body, want) {
			t.Errorf("the unschedulable task's page lacks %q:\n%s", want, body)
		}
	}
	_, body = get(t, c, e.srv.URL, "/console/tasks/"+slot)
	if strings.Contains(body, `id="task-unschedulable"`) || !strings.Contains(body, "— every node that could run the task is busy") {
		t.Errorf("the task waiting for a slot is called unschedulable, or does not say it waits for a slot:\n%s", body)
	}
}
