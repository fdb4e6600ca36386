package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/podiumhq/podium/bench/benchkit"
)

func ms(d time.Duration) string { return d.Round(time.Millisecond).String() }

// printDetails prints one fleet size's figures as soon as they are measured,
// with what explains them: B's busiest statements and CPU profile during the
// switch, its warnings.
func printDetails(w io.Writer, r result) {
	fmt.Fprintf(w, "\n--- %d nodes, %d tasks ---\n", r.Nodes, r.Tasks)
	fmt.Fprintf(w, "reference: the fleet connected to replica A from nothing in %s (in waves of %d)\n", ms(r.ColdConnect), r.Batch)
	fmt.Fprintf(w, "re-home after SIGKILL of A: first node on B %s, last %s (p50 %s, p99 %s), %d of %d; podium.nodes all online on B at %s; %d streams ended in all\n",
		ms(r.First), ms(r.Last), ms(r.RehomeP50), ms(r.RehomeP99), r.Rehomed, r.Nodes, stored(r), r.StreamsLost)
	probe := placed(r)
	if r.ProbeErr != nil {
		probe += fmt.Sprintf(" (%v)", r.ProbeErr)
	}
	fmt.Fprintf(w, "leader: B led %s after the kill; the task submitted to B at the kill reached a node %s after it\n", ms(r.LeaderAt), probe)
	fmt.Fprintf(w, "tasks: %d of %d succeeded, %d in a later attempt, %d on another node; logs byte-exact %d, wrong or unfinished %d; lines written %d, stored %d (a line a node still holds unacknowledged is not lost, but not stored either)\n",
		r.Succeeded, r.Tasks+1, r.Requeued, r.Moved, r.LogsExact, r.LogsWrong, r.LinesWritten, r.LinesStored)
	for _, s := range r.WrongSample {
		fmt.Fprintf(w, "  %s\n", s)
	}
	fmt.Fprintf(w, "replica B from the kill to the last node: CPU %.0f%% of one core; Postgres %.0f%%; statements by time in Postgres:\n", r.BCPU, r.PGCPU)
	for _, s := range r.Top {
		fmt.Fprintf(w, "  %8d calls %9.1f ms  %s\n", s.Calls, s.Ms, s.Short())
	}
	if r.Goroutines != "" {
		fmt.Fprintln(w, "replica B's goroutines while the fleet arrives (count, Podium frames innermost first):")
		for _, l := range strings.Split(strings.TrimSpace(r.Goroutines), "\n") {
			fmt.Fprintf(w, "  %s\n", l)
		}
	}
	if r.ProfileText != "" {
		fmt.Fprintf(w, "replica B's CPU profile from the kill (%s), heaviest cumulative:\n", r.Profile)
		for _, l := range strings.Split(strings.TrimSpace(r.ProfileText), "\n") {
			fmt.Fprintf(w, "  %s\n", l)
		}
	}
	benchkit.PrintTrouble(w, nil, r.Warnings, r.WarnSample)
}

func placed(r result) string {
	if r.ProbePlaced == 0 {
		return "never"
	}
	return ms(r.ProbePlaced)
}

func stored(r result) string {
	if r.StoredAll == 0 {
		return "never"
	}
	return ms(r.StoredAll)
}

// printTable prints the summary, one row per fleet size, and the verdict
// against the goals.
func printTable(w io.Writer, cfg config, rs []result) {
	pg := "durable Postgres (fsync, synchronous_commit, full_page_writes on)"
	if !cfg.Durable {
		pg = "FAST Postgres (fsync, synchronous_commit, full_page_writes off: the test settings, not production's)"
	}
	pool := "the default Postgres pool (pgxpool: max(4, CPUs) connections per replica)"
	if cfg.poolMaxConns > 0 {
		pool = fmt.Sprintf("a Postgres pool of %d connections per replica (pool_max_conns)", cfg.poolMaxConns)
	}
	fmt.Fprintf(w, "\nFailover: replica A SIGKILLed, nodes re-home to replica B; %s; %s; one TCP connection per node; the agent's own session code\n\n", pg, pool)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "nodes\tcold connect (ref)\tfirst on B\tlast on B\tstored online\tleader\tfirst placement\tlogs exact\tlines not stored\trequeued\t")
	for _, r := range rs {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%d/%d\t%d\t%d\t\n", r.Nodes, ms(r.ColdConnect), ms(r.First), ms(r.Last),
			stored(r), ms(r.LeaderAt), placed(r), r.LogsExact, r.Tasks+1, r.LinesWritten-r.LinesStored, r.Requeued)
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
	for _, r := range rs {
		goal, ok := goals[r.Nodes]
		if !ok {
			continue
		}
		met := r.Rehomed == r.Nodes && r.Last <= goal && r.LogsWrong == 0 && r.Requeued == 0 && r.Moved == 0
		verdict := "MET"
		if !met {
			verdict = "MISSED"
		}
		fmt.Fprintf(w, "%d nodes re-homed in %s (goal ≤ %s, every log byte-exact, no task requeued): %s\n", r.Nodes, ms(r.Last), goal, verdict)
	}
}
