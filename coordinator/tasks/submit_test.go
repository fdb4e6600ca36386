package tasks_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/podiumhq/podium/coordinator/store"
	"github.com/podiumhq/podium/coordinator/tasks"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/proto/podium/v1/podiumv1connect"
	"github.com/podiumhq/podium/test/testenv/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// service is a task service on its own database behind the real Connect
// handler, with no scheduler: nothing but Submit touches the rows, so each
// row's xmin still names the transaction that inserted it.
type service struct {
	svc *tasks.Service
	// sql is the test's own pool on the service's database: which transaction
	// stored a row is nothing the store tells.
	sql    *pgxpool.Pool
	client podiumv1connect.TaskServiceClient
	// stop ends Run and waits for it; it fails the test if Run does not return.
	stop func()
}

func startService(t *testing.T) *service {
	t.Helper()
	db := pgtest.NewDatabase(t)
	st, err := store.Open(context.Background(), db.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	sql, err := pgxpool.New(context.Background(), db.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sql.Close)
	svc := tasks.NewService(tasks.Deps{Store: st, Log: slog.New(slog.DiscardHandler)})
	mux := http.NewServeMux()
	mux.Handle(podiumv1connect.NewTaskServiceHandler(svc))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = svc.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Error("the task service's Run did not return after its context ended")
			}
		})
	}
	t.Cleanup(stop)
	return &service{svc: svc, sql: sql, client: podiumv1connect.NewTaskServiceClient(srv.Client(), srv.URL), stop: stop}
}

// submitAll submits specs concurrently, all released at once, and returns each
// caller's own answer in the order of specs.
func (s *service) submitAll(t *testing.T, specs []*podiumv1.TaskSpec) ([]*podiumv1.Task, []error) {
	t.Helper()
	// A deadline, so that a lost answer fails the test instead of hanging it.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got := make([]*podiumv1.Task, len(specs))
	errs := make([]error, len(specs))
	release := make(chan struct{})
	var wg sync.WaitGroup
	for i, spec := range specs {
		wg.Go(func() {
			<-release
			res, err := s.client.Submit(ctx, connect.NewRequest(&podiumv1.SubmitRequest{Spec: spec}))
			if err != nil {
				errs[i] = err
				return
			}
			got[i] = res.Msg.GetTask()
		})
	}
	close(release)
	wg.Wait()
	return got, errs
}

func goodSpec(i int) *podiumv1.TaskSpec {
	return &podiumv1.TaskSpec{Image: "busybox", Command: []string{"echo", fmt.Sprint(i)}}
}

// storedTasks returns every stored task id with the transaction that inserted it.
func (s *service) storedTasks(t *testing.T) map[string]string {
	t.Helper()
	rows, err := s.sql.Query(context.Background(), "select id, xmin::text from podium.tasks")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var id, xmin string
		if err := rows.Scan(&id, &xmin); err != nil {
			t.Fatal(err)
		}
		out[id] = xmin
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestConcurrentSubmitsShareCommitsAndEachIsStoredOnce(t *testing.T) {
	t.Parallel()
	s := startService(t)
	const n = 200
	specs := make([]*podiumv1.TaskSpec, n)
	for i := range specs {
		specs[i] = goodSpec(i)
	}
	got, errs := s.submitAll(t, specs)

	seen := map[string]bool{}
	for i, task := range got {
		if errs[i] != nil {
			t.Fatalf("submit %d: %v", i, errs[i])
		}
		// Each caller gets its own task back, not a neighbour's from the batch.
		if cmd := task.GetSpec().GetCommand(); len(cmd) != 2 || cmd[1] != fmt.Sprint(i) {
			t.Fatalf("submit %d got back a task with command %q, want [echo %d]", i, cmd, i)
		}
		if task.GetState() != podiumv1.TaskState_TASK_STATE_QUEUED {
			t.Errorf("submit %d: task %s is %v, want queued", i, task.GetId(), task.GetState())
		}
		if seen[task.GetId()] {
			t.Fatalf("task id %s was handed to two callers", task.GetId())
		}
		seen[task.GetId()] = true
	}

	stored := s.storedTasks(t)
	if len(stored) != n {
		t.Fatalf("%d tasks stored, want %d: each submit stored exactly once", len(stored), n)
	}
	commits := map[string]int{}
	for id, xmin := range stored {
		if !seen[id] {
			t.Fatalf("task %s was stored but no caller was told of it", id)
		}
		commits[xmin]++
	}
	largest := 0
	for _, size := range commits {
		largest = max(largest, size)
	}
	t.Logf("%d submits were stored in %d commits, the largest holding %d", n, len(commits), largest)
	if largest < 2 {
		t.Fatalf("%d concurrent submits took %d commits, one each: they were not batched", n, len(commits))
	}
}

func TestBadSpecAmongGoodOnesIsRefusedAloneWithTheFieldNamed(t *testing.T) {
	t.Parallel()
	s := startService(t)
	specs := make([]*podiumv1.TaskSpec, 41)
	for i := range specs {
		specs[i] = goodSpec(i)
	}
	const bad = 20
	specs[bad] = &podiumv1.TaskSpec{Command: []string{"echo", "no image"}}
	got, errs := s.submitAll(t, specs)

	if connect.CodeOf(errs[bad]) != connect.CodeInvalidArgument || !strings.Contains(errs[bad].Error(), "spec.image") {
		t.Fatalf("the spec without an image got %v, want invalid argument naming spec.image", errs[bad])
	}
	for i, err := range errs {
		if i != bad && err != nil {
			t.Fatalf("good submit %d failed beside the bad one: %v", i, err)
		}
	}
	stored := s.storedTasks(t)
	if len(stored) != len(specs)-1 {
		t.Fatalf("%d tasks stored, want the %d good ones", len(stored), len(specs)-1)
	}
	for i, task := range got {
		if _, ok := stored[task.GetId()]; i != bad && !ok {
			t.Fatalf("good submit %d was answered with %s, which is not stored", i, task.GetId())
		}
	}
}

func TestSubmitAfterStopIsRefusedAndNothingHangs(t *testing.T) {
	t.Parallel()
	s := startService(t)
	// Submits in flight while the service stops each get an answer: their
	// task, or the refusal. submitAll's deadline turns a hang into a failure.
	specs := make([]*podiumv1.TaskSpec, 50)
	for i := range specs {
		specs[i] = goodSpec(i)
	}
	var wg sync.WaitGroup
	var got []*podiumv1.Task
	var errs []error
	wg.Go(func() { got, errs = s.submitAll(t, specs) })
	s.stop()
	wg.Wait()
	stored := s.storedTasks(t)
	for i, err := range errs {
		switch {
		case err == nil:
			if _, ok := stored[got[i].GetId()]; !ok {
				t.Errorf("submit %d was answered with task %s, which is not stored", i, got[i].GetId())
			}
		case connect.CodeOf(err) != connect.CodeUnavailable:
			t.Errorf("submit %d during shutdown got %v, want its task or unavailable", i, err)
		}
	}

	// Called directly, so the sentinel survives.
	_, err := s.svc.Submit(context.Background(), connect.NewRequest(&podiumv1.SubmitRequest{Spec: goodSpec(0)}))
	if connect.CodeOf(err) != connect.CodeUnavailable || !errors.Is(err, tasks.ErrStopped) {
		t.Fatalf("submit after stop got %v, want unavailable with ErrStopped", err)
	}
	// And over the API, the caller reads what happened and what to do.
	_, err = s.client.Submit(context.Background(), connect.NewRequest(&podiumv1.SubmitRequest{Spec: goodSpec(0)}))
	if connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "shutting down") || !strings.Contains(err.Error(), "submit again") {
		t.Fatalf("submit after stop over the API got %v, want unavailable saying the replica is shutting down", err)
	}
	if n := len(s.storedTasks(t)); n != len(stored) {
		t.Fatalf("%d tasks stored after the refused submits, want %d as before", n, len(stored))
	}
}

func TestSubmitCallerThatGivesUpStopsWaiting(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	st, err := store.Open(context.Background(), db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// Run never starts, so nothing will ever take the task.
	svc := tasks.NewService(tasks.Deps{Store: st, Log: slog.New(slog.DiscardHandler)})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err = svc.Submit(ctx, connect.NewRequest(&podiumv1.SubmitRequest{Spec: goodSpec(0)}))
	if connect.CodeOf(err) != connect.CodeDeadlineExceeded {
		t.Fatalf("a caller whose deadline passed got %v, want deadline exceeded", err)
	}
}
