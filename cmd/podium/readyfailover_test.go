package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// TestUnaryPassesOverUnreadyReplicas sends a command to a list whose first
// address answers /readyz 503 and whose second answers nothing at all, both
// holding any call they get until it is given up (a replica cut off from
// Postgres): the command is answered by the third, at once rather than after
// the call's deadline, and stderr says it moved on from each.
func TestUnaryPassesOverUnreadyReplicas(t *testing.T) {
	hang := func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }
	unready := h2cServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" {
			http.Error(w, "not ready: Postgres does not answer", http.StatusServiceUnavailable)
			return
		}
		hang(w, r)
	})
	silent := h2cServer(t, hang)
	b := newFake(t)
	b.setTask(func(t *podiumv1.Task) { t.State = podiumv1.TaskState_TASK_STATE_RUNNING })
	tc := newTestCLI(map[string]string{"PODIUM_SERVER": unready.URL + "," + silent.URL + "," + b.url()})
	if code := tc.run(t, "task", "get", "task_01TEST"); code != 0 {
		t.Fatalf("exit %d, want 0; stderr:\n%s", code, tc.errOut)
	}
	if !strings.Contains(tc.out.String(), "task_01TEST") {
		t.Errorf("stdout should show the task:\n%s", tc.out)
	}
	errText := tc.errOut.String()
	for _, want := range []string{
		"the coordinator at " + unready.URL + ": it is not ready (not ready: Postgres does not answer); trying " + silent.URL,
		"the coordinator at " + silent.URL + ": it did not answer /readyz within 3s; trying " + b.url(),
	} {
		if !strings.Contains(errText, want) {
			t.Errorf("stderr should say %q:\n%s", want, errText)
		}
	}
}

// h2cServer serves h on HTTP/1.1 and h2c, as the coordinator does; requests
// it still holds are cut when the test ends.
func h2cServer(t *testing.T, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	s := httptest.NewUnstartedServer(h)
	s.Config.Protocols = new(http.Protocols)
	s.Config.Protocols.SetHTTP1(true)
	s.Config.Protocols.SetUnencryptedHTTP2(true)
	s.Start()
	t.Cleanup(func() {
		s.CloseClientConnections()
		s.Close()
	})
	return s
}
