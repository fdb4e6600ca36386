package main

import (
	"fmt"
	"io"
	"time"

	"github.com/podiumhq/podium/internal/bench/benchkit"
)

func us(d time.Duration) string { return fmt.Sprintf("%d µs", d.Microseconds()) }

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

func verdict(ok bool) string {
	if ok {
		return "meets"
	}
	return "MISSES"
}

// perTask prints a phase's statements per finished task, with the background
// (what the idle window ran per second, times the phase's window) taken out.
func perTask(w io.Writer, st statementStats, tasks int, window time.Duration, background float64) {
	if tasks == 0 {
		fmt.Fprintln(w, "statements: no task finished")
		return
	}
	n := float64(tasks)
	fmt.Fprintf(w, "statements: %d in %s until every task had finished, about %.0f of them background (the idle rate × the window);\n",
		st.calls, window.Round(time.Millisecond), background)
	fmt.Fprintf(w, "  per task: %.1f statements (%.1f without the background), %.2f of them pg_notify; %.2f ms of Postgres execution time\n",
		float64(st.calls)/n, (float64(st.calls)-background)/n, float64(st.notify)/n, st.ms/n)
	fmt.Fprintln(w, "  most frequent (calls per task, Postgres ms per task):")
	for _, s := range st.byCalls {
		fmt.Fprintf(w, "    %6.2f  %6.3f ms  %s\n", float64(s.Calls)/n, s.Ms/n, s.Short())
	}
	fmt.Fprintln(w, "  most Postgres time (ms per task, calls per task):")
	for _, s := range st.byTime[:min(6, len(st.byTime))] {
		fmt.Fprintf(w, "    %6.3f ms  %6.2f  %s\n", s.Ms/n, float64(s.Calls)/n, s.Short())
	}
}

func printBurst(w io.Writer, b burstResult) {
	what := "each task runs its course (RUNNING and SUCCEEDED shortly after it is accepted) while the rest are dispatched"
	if b.Hold {
		what = "dispatch alone: nodes accept each task and hold it until the last is assigned, the reference's scope"
	}
	fmt.Fprintf(w, "\n--- throughput: %d tasks, %d concurrent submitters; %s ---\n", b.Tasks, b.Conc, what)
	fmt.Fprintf(w, "submit: %d calls (%d errors) in %s: %.0f tasks/s (first Submit called → last Submit returned)\n",
		b.Submitted, b.Errors, b.LastReturn.Sub(b.FirstCall).Round(time.Millisecond), b.SubmitRate)
	if b.Errors > 0 {
		fmt.Fprintf(w, "  e.g. %s\n", b.ErrSample)
	}
	if b.Assigned > 0 {
		fmt.Fprintf(w, "assign: %d received by nodes, the first %s and the last %s after the first Submit: %.0f tasks/s (first Assign → last Assign)\n",
			b.Assigned, b.FirstAssign.Sub(b.FirstCall).Round(time.Millisecond), b.LastAssign.Sub(b.FirstCall).Round(time.Millisecond), b.AssignRate)
		fmt.Fprintf(w, "end to end: %.0f tasks/s (first Submit called → last Assign received); %.0f tasks/s to the last PROVISIONING acknowledged\n",
			b.EndToEnd, b.AcceptRate)
		fmt.Fprintf(w, "wait in the burst (Submit called → Assign received, queueing included): p50 %s, p99 %s, max %s\n",
			ms(b.LatP50), ms(b.LatP99), ms(b.Max))
	} else {
		fmt.Fprintln(w, "assign: no task reached a node")
	}
	fmt.Fprintf(w, "CPU (first Submit → last Assign): coordinator %.1f%%, Postgres %.1f%%, bench (nodes + submitters) %.1f%%; a serial round trip to Postgres: p50 %s, p90 %s\n",
		b.CPU.Coord, b.CPU.PG, b.CPU.Bench, us(b.RTT.P50), us(b.RTT.P90))
	perTask(w, b.Stmts, b.Finished, b.StmtWindow, b.BackgroundStmtsInWin)

}

func report(w io.Writer, cfg config, r result) {
	all := "all connected"
	if !r.AllConnected {
		all = "NOT all connected"
	}
	fmt.Fprintf(w, "\n--- setup ---\n")
	fmt.Fprintf(w, "%d nodes with %d slots each over %d HTTP/2 connections: %s in %s; the coordinator holds %d Postgres connections; peak RSS %.0f MiB\n",
		r.Nodes, r.MaxTasks, r.Conns, all, r.ConnectTime.Round(time.Millisecond), r.PGConns, r.PeakRSSMiB)
	fmt.Fprintf(w, "idle (%s, fleet connected, nothing to dispatch): coordinator CPU %.1f%%, Postgres CPU %.1f%%, bench CPU %.1f%%; %.1f statements/s, most frequent:\n",
		cfg.settle, r.IdleCPU.Coord, r.IdleCPU.PG, r.IdleCPU.Bench, r.IdleStmtsPerSec)
	for _, s := range r.IdleTop {
		fmt.Fprintf(w, "  %8.1f/s  %s\n", float64(s.Calls)/cfg.settle.Seconds(), s.Short())
	}
	fmt.Fprintf(w, "a serial round trip to Postgres (`select 1` every 10 ms from the bench): p50 %s, p90 %s idle\n", us(r.IdleRTT.P50), us(r.IdleRTT.P90))

	printBurst(w, r.Dispatch)
	printBurst(w, r.Burst)

	s := r.Steady
	fmt.Fprintf(w, "\n--- latency: %.0f tasks/s offered for %s (open loop) ---\n", s.Rate, s.Duration)
	fmt.Fprintf(w, "submitted %d (%d skipped: too many in flight, %d errors); assigned %d\n", s.Submitted, s.Skipped, s.Errors, s.Assigned)
	if s.Errors > 0 {
		fmt.Fprintf(w, "  e.g. %s\n", s.ErrSample)
	}
	fmt.Fprintf(w, "Submit called → Assign received: p50 %s, p90 %s, p99 %s, max %s\n", ms(s.P50), ms(s.P90), ms(s.P99), ms(s.Max))
	fmt.Fprintf(w, "  Submit returned → Assign received: p50 %s, p99 %s; the Submit call itself: p50 %s, p99 %s\n",
		ms(s.RetP50), ms(s.RetP99), ms(s.RPCP50), ms(s.RPCP99))
	fmt.Fprintf(w, "  Assign received → its PROVISIONING acknowledged: p50 %s, p99 %s\n", ms(s.AccP50), ms(s.AccP99))
	fmt.Fprintf(w, "CPU (the %s of offered load): coordinator %.1f%%, Postgres %.1f%%, bench %.1f%%; a serial round trip to Postgres: p50 %s, p90 %s\n",
		s.Duration, s.CPU.Coord, s.CPU.PG, s.CPU.Bench, us(s.RTT.P50), us(s.RTT.P90))
	perTask(w, s.Stmts, s.Assigned, s.StmtWindow, s.BackgroundStmtsInWin)

	fmt.Fprintf(w, "\nnodes: %d Assigns repeated, %d refused for want of a slot, %d cancels, %d other messages; %d failed Hellos, %d streams dropped\n",
		r.Repeats, r.Rejected, r.Cancels, r.Other, r.HelloRetries, r.Dropped)
	benchkit.PrintTrouble(w, r.ErrSamples, r.Warnings, r.WarnSample)

	b, d := r.Burst, r.Dispatch
	fmt.Fprintf(w, "\nDispatch: one coordinator replica, %d simulated nodes, %d tasks, %d submitters (CPU %% is of one core)\n\n", r.Nodes, b.Tasks, b.Conc)
	ratio := func(x float64) float64 {
		if r.RefTPS > 0 {
			return x / r.RefTPS
		}
		return 0
	}
	fmt.Fprintf(w, "  Podium, Submit → Assign received, dispatch alone       %8.0f tasks/s   (submit %.0f/s, assign %.0f/s)\n", d.EndToEnd, d.SubmitRate, d.AssignRate)
	fmt.Fprintf(w, "  Podium, Submit → Assign received, tasks running along  %8.0f tasks/s   (submit %.0f/s, assign %.0f/s)\n", b.EndToEnd, b.SubmitRate, b.AssignRate)
	if r.RefTPS > 0 {
		fmt.Fprintf(w, "  raw SQL, pgbench (%d clients)                          %8.0f tasks/s   (insert + claim SKIP LOCKED + mark scheduled)\n", cfg.PgbenchClients, r.RefTPS)
		fmt.Fprintf(w, "  ratio Podium / raw SQL                                 %8.2f dispatch alone, %.2f with tasks running along\n", ratio(d.EndToEnd), ratio(b.EndToEnd))
	}
	fmt.Fprintf(w, "  latency at %.0f tasks/s, Submit called → Assign received: p50 %s, p90 %s, p99 %s, max %s\n", s.Rate, ms(s.P50), ms(s.P90), ms(s.P99), ms(s.Max))
	fmt.Fprintf(w, "  machine CPU per dispatched task (coordinator + Postgres + the bench's fleet and submitters): %.2f ms dispatch alone, %.2f ms with tasks running along\n",
		cpuPerTask(d), cpuPerTask(b))
	if b.Finished > 0 {
		fmt.Fprintf(w, "  coordinator CPU %.1f%% in the burst, %.1f%% at %.0f tasks/s; %.1f statements per task (%.1f without background)\n",
			b.CPU.Coord, s.CPU.Coord, s.Rate, float64(b.Stmts.calls)/float64(b.Finished),
			(float64(b.Stmts.calls)-b.BackgroundStmtsInWin)/float64(b.Finished))
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "targets (dispatch alone, the reference's scope): ≥ 1,000 tasks/s: %s (%.0f); ≥ half the raw SQL rate: %s (%.2f); p99 < 100 ms at %.0f tasks/s: %s (%s)\n",
		verdict(d.EndToEnd >= 1000), d.EndToEnd,
		verdict(r.RefTPS > 0 && ratio(d.EndToEnd) >= 0.5), ratio(d.EndToEnd),
		s.Rate, verdict(s.Assigned > 0 && s.P99 < 100*time.Millisecond), ms(s.P99))
	fmt.Fprintf(w, "         (tasks running along): ≥ 1,000 tasks/s: %s (%.0f); ≥ half the raw SQL rate: %s (%.2f)\n",
		verdict(b.EndToEnd >= 1000), b.EndToEnd, verdict(r.RefTPS > 0 && ratio(b.EndToEnd) >= 0.5), ratio(b.EndToEnd))
}

// cpuPerTask is the CPU the whole machine spent per task dispatched in a
// phase: the coordinator, Postgres and the benchmark itself share two cores.
func cpuPerTask(b burstResult) float64 {
	if b.Assigned == 0 {
		return 0
	}
	window := b.LastAssign.Sub(b.FirstCall).Seconds()
	return (b.CPU.Coord + b.CPU.PG + b.CPU.Bench) / 100 * window * 1000 / float64(b.Assigned)
}
