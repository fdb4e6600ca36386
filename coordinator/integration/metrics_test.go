package integration_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/podiumhq/podium/coordinator/coordtest"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

func scrape(t *testing.T, r *coordtest.Replica) string {
	t.Helper()
	res, err := http.Get(r.URL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != 200 {
		t.Fatalf("/metrics: %d %s", res.StatusCode, b)
	}
	return string(b)
}

// /metrics shows the fleet from Postgres and what this replica did.
func TestMetrics(t *testing.T) {
	t.Parallel()
	r, _ := coordtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id, key := enroll(t, r)
	node, _ := connectNode(t, ctx, r, id, key)
	task := submit(t, ctx, r, &podiumv1.TaskSpec{Image: "busybox"})
	a := assignOf(t, node)
	zero := int32(0)
	node.send(t, status(task, a.Attempt, 1, podiumv1.TaskState_TASK_STATE_RUNNING, nil),
		logEv(task, a.Attempt, 2, 0, podiumv1.LogStream_LOG_STREAM_STDOUT, "12345"),
		status(task, a.Attempt, 3, podiumv1.TaskState_TASK_STATE_SUCCEEDED, &zero))
	want := []string{
		`podium_tasks{state="succeeded"} 1`,
		`podium_nodes{status="online"} 1`,
		"podium_events_ingested_total 3",
		"podium_log_bytes_ingested_total 5",
		"podium_dispatch_latency_seconds_count 1",
		"podium_node_sessions 1",
		`podium_bus_deliveries_total{channel="podium_submit"}`,
	}
	// A scrape reads the counters and the tables at slightly different
	// moments, so one taken while the task finishes may see only one side:
	// scrape until every line is there.
	var m string
	var missing []string
	for deadline := time.Now().Add(10 * time.Second); ; {
		m = scrape(t, r)
		missing = nil
		for _, w := range want {
			if !strings.Contains(m, w) {
				missing = append(missing, w)
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, w := range missing {
		t.Errorf("/metrics lacks %q:\n%s", w, m)
	}
}
