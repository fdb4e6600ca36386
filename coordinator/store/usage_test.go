package store_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/podiumhq/podium/coordinator/store"
	"github.com/podiumhq/podium/internal/ids"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

func f64(v float64) *float64 { return &v }
func i64(v int64) *int64     { return &v }

func endWith(seq uint64, u *podiumv1.Usage) *podiumv1.TaskEvent {
	zero := int32(0)
	return &podiumv1.TaskEvent{Seq: seq, Body: &podiumv1.TaskEvent_Status{Status: &podiumv1.StatusChange{
		State: podiumv1.TaskState_TASK_STATE_SUCCEEDED, ExitCode: &zero, Usage: u}}}
}

// backdate moves an attempt's assignment into the past, as if it had run
// for a while before the test reports its end.
func (f *ingestFixture) backdate(t *testing.T, task string, by time.Duration) {
	t.Helper()
	if _, err := f.sql.Exec(context.Background(), `update podium.attempts set assigned_at = now() - make_interval(secs => $2)
		where task_id = $1`, task, by.Seconds()); err != nil {
		t.Fatal(err)
	}
}

// An attempt's end stores the usage its node reported; the coordinator
// counts the output it stored and the artifacts' bytes itself (a replaced
// artifact by its new size), whatever the node says of them; a replayed or
// late end changes nothing; and a wall time longer than the attempt has
// existed is cut, the outcome saying so.
func TestUsageIsStoredWithTheAttemptsEnd(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f, tasks := newIngestFixture(t, 1, 2)
	honest, liar := tasks[0], tasks[1]
	f.backdate(t, honest, time.Hour)
	f.backdate(t, liar, time.Minute)

	u := &podiumv1.Usage{CpuSeconds: f64(1.5), PeakMemoryBytes: i64(100 << 20), WallSeconds: f64(2), OutputBytes: 1 << 40}
	out, err := f.st.IngestBatch(ctx, []store.IngestItem{
		f.item(honest, statusEv(1, podiumv1.TaskState_TASK_STATE_RUNNING), logEv(2, "hello"), logEv(3, "world!"), endWith(4, u)),
		f.item(liar, statusEv(1, podiumv1.TaskState_TASK_STATE_RUNNING), endWith(2, &podiumv1.Usage{WallSeconds: f64(86400)})),
	})
	if err != nil {
		t.Fatal(err)
	}
	if out[0].Err != nil || out[0].Result.UsageCut != "" {
		t.Fatalf("honest report: %+v; want stored, nothing cut", out[0])
	}
	if cut := out[1].Result.UsageCut; !strings.HasPrefix(cut, "wall time 86400.000 s is longer than the attempt has existed; stored 6") {
		t.Fatalf("a day of wall time for an attempt assigned a minute ago: cut %q, want it cut to about 60 s", cut)
	}

	got, err := f.st.AttemptUsage(ctx, honest, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got.GetCpuSeconds() != 1.5 || got.GetPeakMemoryBytes() != 100<<20 || got.GetWallSeconds() != 2 || got.GetOutputBytes() != 11 ||
		got.GetArtifactBytes() != 0 {
		t.Fatalf("stored usage %v; want cpu 1.5 s, peak 100 MiB, wall 2 s, the 11 bytes of output stored, no artifacts", got)
	}
	liarUsage, err := f.st.AttemptUsage(ctx, liar, 1)
	if err != nil {
		t.Fatal(err)
	}
	if w := liarUsage.GetWallSeconds(); w < 59 || w > 120 || liarUsage.CpuSeconds != nil || liarUsage.PeakMemoryBytes != nil {
		t.Fatalf("the liar's usage %v; want wall about 60 s, cpu and peak unknown (not reported)", liarUsage)
	}

	// The same end again (a replay), and a late one with other figures: the
	// attempt keeps what its real end said.
	late := endWith(5, &podiumv1.Usage{CpuSeconds: f64(999)})
	if _, err := f.st.IngestBatch(ctx, []store.IngestItem{f.item(honest, endWith(4, u), late)}); err != nil {
		t.Fatal(err)
	}
	if again, _ := f.st.AttemptUsage(ctx, honest, 1); again.GetCpuSeconds() != 1.5 || again.GetOutputBytes() != 11 {
		t.Fatalf("after a replay and a late end: %v; want cpu 1.5 s and 11 bytes as before", again)
	}

	put := func(name string, size int64) {
		t.Helper()
		id := ids.New("art")
		a := store.Artifact{ID: id, TaskID: honest, Attempt: 1, NodeID: f.onNode[honest], Name: name, Size: size,
			SHA256: strings.Repeat("ab", 32), ObjectKey: "tasks/" + honest + "/" + id}
		if _, _, err := f.st.PutArtifact(ctx, a, func(bool) string { return "artifact " + name }); err != nil {
			t.Fatal(err)
		}
	}
	put("a.bin", 1000)
	put("b.bin", 500)
	put("a.bin", 300) // replaces the first
	if got, _ := f.st.AttemptUsage(ctx, honest, 1); got.GetArtifactBytes() != 800 {
		t.Fatalf("artifact bytes %d after 1000 + 500 and the 1000 replaced by 300; want 800", got.GetArtifactBytes())
	}
	if got, err := f.st.AttemptUsage(ctx, honest, 2); got != nil || err != nil {
		t.Fatalf("an attempt that never was: %v, %v; want nil, nil", got, err)
	}
}

// usageRow is a row of podium.usage.
type usageRow struct {
	Day                        time.Time
	RequestedBy                string
	Label                      *string
	Attempts, CPUUnknown       int64
	CPU, Wall                  float64
	Peak                       *int64
	OutputBytes, ArtifactBytes int64
}

func (r usageRow) key() string {
	l := "-"
	if r.Label != nil {
		l = *r.Label
	}
	return fmt.Sprintf("%s %s %s", r.Day.Format("01-02"), r.RequestedBy, l)
}

// podium.usage sums what the attempts that ended used by the day they ended,
// who submitted the task and each of its labels, with a total per user and
// day (label null) that counts every task once, labelled or not; an attempt
// whose CPU time is unknown is counted apart and left out of the sums; an
// attempt still running is not in it.
func TestUsageViewSumsByUserLabelAndDay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, db := openStore(t)
	sql := rawSQL(t, db)
	if _, err := sql.Exec(ctx, `insert into podium.nodes (id, key_hash, labels) values ('node_u', '\x00', '{team:ml,gpu}')`); err != nil {
		t.Fatal(err)
	}
	n, err := st.StartSession(ctx, store.SessionStart{NodeID: "node_u", Replica: "r1", MaxTasks: 100})
	if err != nil {
		t.Fatal(err)
	}
	type job struct {
		by     string
		labels []string
		day    string // when it ended; "" still running
		usage  *podiumv1.Usage
	}
	jobs := []job{
		{"ann", []string{"team:ml", "gpu"}, "2026-11-02", &podiumv1.Usage{CpuSeconds: f64(1), WallSeconds: f64(2), PeakMemoryBytes: i64(100)}},
		{"ann", []string{"team:ml"}, "2026-11-02", &podiumv1.Usage{CpuSeconds: f64(2.5), WallSeconds: f64(3), PeakMemoryBytes: i64(300)}},
		{"ann", []string{"team:ml"}, "2026-11-03", &podiumv1.Usage{CpuSeconds: f64(4), WallSeconds: f64(5)}},
		{"bob", nil, "2026-11-02", &podiumv1.Usage{CpuSeconds: f64(10), WallSeconds: f64(10), PeakMemoryBytes: i64(7)}},
		{"bob", nil, "2026-11-02", &podiumv1.Usage{WallSeconds: f64(1)}}, // CPU unknown
		{"bob", nil, "", nil}, // still running
	}
	var in []store.NewTask
	for _, j := range jobs {
		in = append(in, store.NewTask{ID: ids.New("task"), Spec: &podiumv1.TaskSpec{Image: "busybox", Labels: j.labels}, RequestedBy: j.by})
	}
	if _, err := st.InsertTasks(ctx, in); err != nil {
		t.Fatal(err)
	}
	if placed, _ := runPass(t, st, len(in)); len(placed) != len(in) {
		t.Fatalf("placed %d of %d", len(placed), len(in))
	}
	if _, err := sql.Exec(ctx, "update podium.attempts set assigned_at = now() - interval '1 hour'"); err != nil {
		t.Fatal(err)
	}
	var items []store.IngestItem
	for i, j := range jobs {
		evs := []*podiumv1.TaskEvent{statusEv(1, podiumv1.TaskState_TASK_STATE_RUNNING), logEv(2, strings.Repeat("x", i+1))}
		if j.day != "" {
			evs = append(evs, endWith(3, j.usage))
		}
		items = append(items, store.IngestItem{NodeID: "node_u", Epoch: n.SessionEpoch, TaskID: in[i].ID, Attempt: 1, Events: evs})
	}
	if _, err := st.IngestBatch(ctx, items); err != nil {
		t.Fatal(err)
	}
	for i, j := range jobs {
		if j.day == "" {
			continue
		}
		if _, err := sql.Exec(ctx, `update podium.attempts set finished_at = ($2::date + time '12:00') at time zone 'UTC',
				artifact_bytes = 1000 where task_id = $1`, in[i].ID, j.day); err != nil {
			t.Fatal(err)
		}
	}

	rows, err := sql.Query(ctx, `select day, requested_by, label, attempts, attempts_cpu_unknown, cpu_seconds, wall_seconds,
		peak_memory_bytes, output_bytes, artifact_bytes from podium.usage`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[usageRow])
	if err != nil {
		t.Fatal(err)
	}
	byKey := map[string]usageRow{}
	for _, r := range got {
		byKey[r.key()] = r
	}
	want := map[string]string{
		// day user label: attempts unknown cpu wall peak output artifacts
		"11-02 ann team:ml": "2 0 3.5 5 300 3 2000",
		"11-02 ann gpu":     "1 0 1 2 100 1 1000",
		"11-02 ann -":       "2 0 3.5 5 300 3 2000", // ann's total: the gpu task once
		"11-03 ann team:ml": "1 0 4 5 - 3 1000",
		"11-03 ann -":       "1 0 4 5 - 3 1000",
		"11-02 bob -":       "2 1 10 11 7 9 2000",
	}
	for k, w := range want {
		r, ok := byKey[k]
		peak := "-"
		if r.Peak != nil {
			peak = fmt.Sprint(*r.Peak)
		}
		if g := fmt.Sprintf("%d %d %g %g %s %d %d", r.Attempts, r.CPUUnknown, r.CPU, r.Wall, peak, r.OutputBytes, r.ArtifactBytes); !ok || g != w {
			t.Errorf("podium.usage row %q: %q (present %v), want %q", k, g, ok, w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("podium.usage has %d rows, want %d (the running attempt is in none): %v", len(got), len(want), byKey)
	}
}
