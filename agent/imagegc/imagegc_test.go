package imagegc_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"

	"github.com/podiumhq/podium/agent/attempt"
	"github.com/podiumhq/podium/agent/executor"
	"github.com/podiumhq/podium/agent/imagegc"
	"github.com/podiumhq/podium/agent/internal/agenttest"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/dockertest"
	"github.com/podiumhq/podium/test/testenv/wait"
)

func TestMain(m *testing.M) { os.Exit(agenttest.Main(m)) }

var imageSeq atomic.Int64

// throwaway builds an image of its own (its own id: a label no other image
// has, over the test image's layers), tagged with a name no other test
// uses, and removes it when the test ends if the collector did not.
func throwaway(t *testing.T, dc *client.Client, role string) (ref, id string) {
	t.Helper()
	base := dockertest.EnsureImage(t)
	ref = fmt.Sprintf("podium-gc-test-%d-%d/%s:local", os.Getpid(), imageSeq.Add(1), role)
	dockerfile := fmt.Sprintf("FROM %s\nLABEL podium.test.image=%q\n", base, ref)
	var out bytes.Buffer
	cmd := exec.Command("docker", "build", "-q", "-t", ref, "-")
	cmd.Stdin = strings.NewReader(dockerfile)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("docker build %s: %v\n%s", ref, err, out.String())
	}
	info, err := dc.ImageInspect(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = dc.ImageRemove(context.Background(), ref, image.RemoveOptions{Force: true, PruneChildren: true})
	})
	return ref, info.ID
}

func exists(t *testing.T, dc *client.Client, id string) bool {
	t.Helper()
	_, err := dc.ImageInspect(context.Background(), id)
	return err == nil
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// A node under its free-space threshold (100%: the real disk always is)
// removes the images no task used for --image-gc-unused, least recently
// used first, and keeps the one a queued task needs (its sidecar is not
// ready, so its own container is not made yet: only the executor knows it
// needs the image), the one --image-keep matches, and the one used
// recently. Every other image of the engine is first seen by this
// collector now, so it is recent too, and stays.
func TestPassRemovesLeastRecentlyUsedUnneededImages(t *testing.T) {
	t.Parallel()
	dc := dockertest.Client(t)
	older, olderID := throwaway(t, dc, "older")
	old, oldID := throwaway(t, dc, "old")
	needed, neededID := throwaway(t, dc, "needed")
	keep, keepID := throwaway(t, dc, "keep")
	recent, recentID := throwaway(t, dc, "recent")
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))

	nodeID := agenttest.NodeID(t)
	ex, err := executor.New(executor.Config{Docker: dc, NodeID: nodeID, RunnerPath: agenttest.Runner(t), TasksDir: t.TempDir(), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	keepPattern, _, _ := strings.Cut(keep, "/")
	patterns, err := imagegc.ParsePatterns([]string{keepPattern + "/*"})
	if err != nil {
		t.Fatal(err)
	}
	gc, err := imagegc.New(imagegc.Config{
		Docker: dc, DataDir: t.TempDir(), Unused: time.Hour, LowFree: 100, Keep: patterns,
		Hold: ex.HoldImages, Logger: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	gc.Used(olderID, now.Add(-72*time.Hour))
	gc.Used(oldID, now.Add(-48*time.Hour))
	gc.Used(neededID, now.Add(-96*time.Hour))
	gc.Used(keepID, now.Add(-120*time.Hour))
	gc.Used(recentID, now.Add(-time.Minute))

	// The queued task: its sidecar never becomes ready.
	a := &podiumv1.Assign{TaskId: fmt.Sprintf("t-%d-gc-queued", os.Getpid()), Attempt: 1, Spec: &podiumv1.TaskSpec{
		Image: needed, Command: []string{"true"},
		Sidecars: []*podiumv1.Sidecar{{Name: "db", Image: dockertest.Image, Command: []string{"sleep", "600"},
			Readiness: &podiumv1.Readiness{TcpPort: 9, TimeoutSeconds: 600}}},
	}}
	var states atomic.Value
	done, err := ex.Start(context.Background(), a, func(ev *podiumv1.TaskEvent, _ *attempt.Cursor) {
		if s := ev.GetStatus(); s != nil {
			states.Store(s.GetState())
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ex.Cancel(a.TaskId, 1, "the test is over", time.Second)
		wait.Closed(t, time.Minute, "the queued task to end", done)
		ex.Wait()
		agenttest.AssertNoContainers(t, dc, nodeID)
	})

	// Queued for good: its sidecar runs, and is waited for.
	wait.For(t, 60*time.Second, "the queued task's sidecar to run", func() bool {
		cs, err := dc.ContainerList(context.Background(), container.ListOptions{Filters: filters.NewArgs(
			filters.Arg("label", executor.LabelNode+"="+nodeID), filters.Arg("label", executor.LabelSidecar+"=db"))})
		return err == nil && len(cs) == 1 && cs[0].State == "running"
	})

	removed, err := gc.Pass(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range removed {
		got = append(got, r.Image.ID)
	}
	if want := []string{olderID, oldID}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("removed %v, want %s (least recently used) then %s, and nothing else", got, older, old)
	}
	for _, id := range []string{olderID, oldID} {
		if exists(t, dc, id) {
			t.Errorf("image %s is still in the engine after its removal", id)
		}
	}
	for ref, id := range map[string]string{needed: neededID, keep: keepID, recent: recentID, dockertest.Image: ""} {
		if id == "" {
			id = ref
		}
		if !exists(t, dc, id) {
			t.Errorf("image %s was removed; it must stay", ref)
		}
	}
	if s, _ := states.Load().(podiumv1.TaskState); s != podiumv1.TaskState_TASK_STATE_PROVISIONING {
		t.Errorf("the queued task is %v, want still PROVISIONING", s)
	}
	if st := gc.Stats(); st.Removed != 2 || st.Bytes <= 0 {
		t.Errorf("stats %+v, want 2 removed with their bytes", st)
	}

}
