package agent

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// engineFresh is how long an answer of the engine's (or its silence) stands
// before the engine is asked again: a burst of assignments asks it once.
const engineFresh = 2 * time.Second

// engineWatch asks the node's Docker engine whether it answers, and keeps
// since when it has not: it reports that with every heartbeat
// (podiumv1.Capacity.engine_down_since), and refuses assignments while it
// lasts. A node that takes tasks while its engine is down fails each at
// once ("Cannot connect to the Docker daemon"), which turns it into a black
// hole for the whole queue.
type engineWatch struct {
	// answers pings the engine on a fresh connection, with a short
	// deadline (executor.Executor.EngineAnswers).
	answers func(context.Context) bool
	// host names the engine for the log and the refusal (DOCKER_HOST).
	host string
	log  *slog.Logger

	mu    sync.Mutex // held while the engine is asked, so one asks at a time
	asked time.Time  // when the engine was last asked
	down  condition
}

// check returns since when the engine has not answered (zero while it
// answers), asking it afresh unless it was asked within engineFresh.
func (w *engineWatch) check(ctx context.Context) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	if time.Since(w.asked) < engineFresh {
		return w.down.since()
	}
	answers := w.answers(ctx)
	if ctx.Err() != nil {
		// The agent is stopping: no answer is no news of the engine.
		return w.down.since()
	}
	w.asked = time.Now()
	since, began, lasted := w.down.update(!answers)
	switch {
	case began:
		w.log.Warn("the Docker engine does not answer; the node takes no new tasks until it does", "docker_host", w.host)
	case lasted > 0:
		w.log.Info("the Docker engine answers again; the node takes tasks", "docker_host", w.host,
			"was_down_for", lasted.Round(time.Second))
	}
	return since
}

// report adds since when the engine has not answered to a capacity about
// to be sent.
func (w *engineWatch) report(ctx context.Context, c *podiumv1.Capacity) {
	if since := w.check(ctx); !since.IsZero() {
		c.EngineDownSince = timestamppb.New(since)
	}
}

// refusal says why the node cannot take a task now: its engine does not
// answer. "" takes it.
func (w *engineWatch) refusal(ctx context.Context) string {
	since := w.check(ctx)
	if since.IsZero() {
		return ""
	}
	return fmt.Sprintf("node's Docker engine has not answered since %s (%s): the node takes no new tasks until it does "+
		"(systemctl status docker on the node)", since.UTC().Format(time.RFC3339), w.host)
}
