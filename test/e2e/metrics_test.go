package e2e

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/podiumhq/podium/coordinator/coordtest"
)

// The agent's /metrics shows its stream, its slots and its work.
func TestAgentMetrics(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	e := newEnvWith(t, []string{"--metrics-listen", addr})
	scrape := func() string {
		res, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return ""
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return string(b)
	}
	r := e.podium("run", "--detach", "--image", e.image, "--", "sleep", "600")
	id := strings.TrimSpace(string(r.stdout))
	if r.code != 0 || !taskIDRe.MatchString(id) {
		t.Fatalf("podium run --detach: exit %d, stdout %q", r.code, r.stdout)
	}
	defer e.podium("task", "cancel", id)
	coordtest.Eventually(t, 30*time.Second, "the agent's metrics to show the running task", func() bool {
		m := scrape()
		return strings.Contains(m, "podium_agent_running_tasks 1") &&
			strings.Contains(m, "podium_agent_free_slots 3") &&
			strings.Contains(m, "podium_agent_stream_connected 1") &&
			strings.Contains(m, "podium_agent_events_spooled") &&
			strings.Contains(m, "podium_agent_unacked_bytes")
	})
}
