package agent

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// An engine that does not answer refuses assignments, naming the engine and
// since when, and is reported down; one that answers again takes them and
// is reported nothing. The engine is asked at most once per engineFresh.
func TestEngineWatch(t *testing.T) {
	t.Parallel()
	var up atomic.Bool
	var asked atomic.Int32
	w := &engineWatch{host: "unix:///run/docker.sock", log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		answers: func(context.Context) bool { asked.Add(1); return up.Load() }}
	ctx := context.Background()
	up.Store(true)

	if why := w.refusal(ctx); why != "" {
		t.Fatalf("an engine that answers refuses a task: %q", why)
	}
	up.Store(false)
	for range 3 {
		if why := w.refusal(ctx); why != "" {
			t.Fatalf("an answer less than %s old was asked again: refusal %q", engineFresh, why)
		}
	}
	if n := asked.Load(); n != 1 {
		t.Fatalf("a burst of four assignments asked the engine %d times, want once", n)
	}

	w.asked = time.Time{} // the answer is stale
	before := time.Now()
	why := w.refusal(ctx)
	if !strings.Contains(why, "Docker engine has not answered since ") || !strings.Contains(why, "unix:///run/docker.sock") {
		t.Fatalf("an engine that does not answer: refusal %q, want one naming the engine and since when", why)
	}
	c := &podiumv1.Capacity{}
	w.report(ctx, c)
	if since := c.GetEngineDownSince(); since == nil || since.AsTime().Before(before) {
		t.Fatalf("reported engine down since %v; want a time from %s on", since, before)
	}

	up.Store(true)
	w.asked = time.Time{}
	if why := w.refusal(ctx); why != "" {
		t.Fatalf("the engine answers again and still refuses: %q", why)
	}
	c = &podiumv1.Capacity{}
	w.report(ctx, c)
	if c.GetEngineDownSince() != nil {
		t.Fatalf("the engine that answers again is reported down since %v", c.GetEngineDownSince())
	}
}
