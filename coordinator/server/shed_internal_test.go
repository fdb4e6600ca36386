package server

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/podiumhq/podium/test/testenv/wait"
)

// call POSTs an empty Connect JSON request to path and returns the status,
// the Retry-After header and the body.
func call(t *testing.T, url, path string) (int, string, string) {
	t.Helper()
	res, err := http.Post(url+path, "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Header.Get("Retry-After"), string(b)
}

// A people's call past --max-requests (a stream past --max-streams) is
// answered at once with 503, Retry-After and Connect's "unavailable" saying
// which bound; the node API is never shed; a slot frees when its call ends.
func TestShedderBoundsCallsInFlight(t *testing.T) {
	release := make(chan struct{})
	inside := make(chan struct{}, 4)
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/Block") || strings.HasSuffix(r.URL.Path, "/Events") {
			inside <- struct{}{}
			<-release
		}
		w.WriteHeader(http.StatusOK)
	})
	srv := httptest.NewServer(newShedder(ShedConfig{MaxRequests: 1, MaxStreams: 1}, next, slog.New(slog.DiscardHandler)))
	defer srv.Close()

	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, p := range []string{"/podium.v1.TaskService/Block", "/podium.v1.TaskService/Events"} {
			if res, err := http.Post(srv.URL+p, "application/json", strings.NewReader("{}")); err == nil {
				res.Body.Close()
			}
		}
	}()
	<-inside
	code, after, body := call(t, srv.URL, "/podium.v1.TaskService/Get")
	if code != http.StatusServiceUnavailable || after != "1" || !strings.Contains(body, `"code":"unavailable"`) ||
		!strings.Contains(body, "shedding load") || !strings.Contains(body, "--max-requests") {
		t.Fatalf("a call past --max-requests got %d, Retry-After %q: %s; want 503, Retry-After 1, unavailable naming --max-requests", code, after, body)
	}
	if code, _, body := call(t, srv.URL, "/podium.v1.NodeService/Heartbeat"); code != http.StatusOK {
		t.Fatalf("the node API was shed: %d %s", code, body)
	}
	// The blocked call ends; the same client then holds the only stream
	// slot, and another stream is shed while a request is not.
	release <- struct{}{}
	<-inside
	code, _, body = call(t, srv.URL, "/podium.v1.TaskService/Events")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "--max-streams") {
		t.Fatalf("a stream past --max-streams got %d: %s", code, body)
	}
	wait.For(t, 10*time.Second, "a request slot to be free again", func() bool {
		code, _, _ := call(t, srv.URL, "/podium.v1.TaskService/Get")
		return code == http.StatusOK
	})
	close(release)
	<-done
}

// Past the memory limit every people's call is shed, naming --memory-limit.
func TestShedderShedsNearTheMemoryLimit(t *testing.T) {
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	// The runtime of any Go test holds more than a megabyte.
	srv := httptest.NewServer(newShedder(ShedConfig{MemoryLimit: 1 << 20}, next, slog.New(slog.DiscardHandler)))
	defer srv.Close()
	code, after, body := call(t, srv.URL, "/podium.v1.TaskService/List")
	if code != http.StatusServiceUnavailable || after != "2" || !strings.Contains(body, "--memory-limit") {
		t.Fatalf("a call past the memory limit got %d, Retry-After %q: %s", code, after, body)
	}
	if code, _, _ := call(t, srv.URL, "/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz was shed: %d", code)
	}
}

func TestMemoryLimitFor(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "1GiB") // so that the test does not set the runtime's
	for _, tc := range []struct {
		in   string
		want int64
		bad  bool
	}{{"off", 0, false}, {"2GiB", 2 << 30, false}, {"512MiB", 512 << 20, false}, {"lots", 0, true}, {"0", 0, true}} {
		got, _, err := MemoryLimitFor(tc.in)
		if (err != nil) != tc.bad || got != tc.want {
			t.Errorf("MemoryLimitFor(%q) = %d, %v; want %d, error %t", tc.in, got, err, tc.want, tc.bad)
		}
	}
}
