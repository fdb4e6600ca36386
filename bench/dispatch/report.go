package main

import (
	"fmt"
	"io"
	"time"

	"github.com/podiumhq/podium/bench/benchkit"
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
	who := "one person's"
	if b.Users > 1 {
		who = fmt.Sprintf("from %d people (contended: fair share counts each one's tasks)", b.Users)
	}
	fmt.Fprintf(w, "\n--- throughput: %d tasks %s, %d concurrent submitters; %s ---\n", b.Tasks, who, b.Conc, what)
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
	fmt.Fprintf(w, "CPU (first Submit → last Assign): coordinator %.1f%%, Postgres %.1f%%, bench (nodes + submitters) %.1f%%, whole machine %.1f%%; a serial round trip to Postgres: p50 %s, p90 %s\n",
		b.CPU.Coord, b.CPU.PG, b.CPU.Bench, b.CPU.Machine, us(b.RTT.P50), us(b.RTT.P90))
	fmt.Fprintf(w, "CPU per task dispatched: machine %.3f ms (/proc/stat), coordinator %.3f ms, Postgres %.3f ms, bench %.3f ms\n",
		cpuMs(b.CPU.Machine, b.CPU.Window, b.Assigned), cpuMs(b.CPU.Coord, b.CPU.Window, b.Assigned),
		cpuMs(b.CPU.PG, b.CPU.Window, b.Assigned), cpuMs(b.CPU.Bench, b.CPU.Window, b.Assigned))
	perTask(w, b.Stmts, b.Finished, b.StmtWindow, b.BackgroundStmtsInWin)

}

func report(w io.Writer, cfg config, r result) {
	all := "all connected"
	if !r.AllConnected {
		all = "NOT all connected"
	}
	fmt.Fprintf(w, "\n=== %s; fair share %s ===\n", r.Mode.label, onOff(r.FairShare))
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
	if r.Contended.Users > 0 {
		printBurst(w, r.Contended)
	}

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
	fmt.Fprintf(w, "CPU (the %s of offered load): coordinator %.1f%%, Postgres %.1f%%, bench %.1f%%, whole machine %.1f%%; a serial round trip to Postgres: p50 %s, p90 %s\n",
		s.Duration, s.CPU.Coord, s.CPU.PG, s.CPU.Bench, s.CPU.Machine, us(s.RTT.P50), us(s.RTT.P90))
	fmt.Fprintf(w, "CPU per task: machine %.3f ms (/proc/stat), coordinator %.3f ms, Postgres %.3f ms\n",
		cpuMs(s.CPU.Machine, s.CPU.Window, s.Assigned), cpuMs(s.CPU.Coord, s.CPU.Window, s.Assigned), cpuMs(s.CPU.PG, s.CPU.Window, s.Assigned))
	perTask(w, s.Stmts, s.Assigned, s.StmtWindow, s.BackgroundStmtsInWin)

	fmt.Fprintf(w, "\nnodes: %d Assigns repeated, %d refused for want of a slot, %d cancels, %d other messages; %d failed Hellos, %d streams dropped\n",
		r.Repeats, r.Rejected, r.Cancels, r.Other, r.HelloRetries, r.Dropped)
	benchkit.PrintTrouble(w, r.ErrSamples, r.Warnings, r.WarnSample)

	if rv := r.River; rv != nil {
		printRiver(w, cfg, *rv)
	}
}

func printRiver(w io.Writer, cfg config, rv riverResult) {
	b, s := rv.Burst, rv.Steady
	fmt.Fprintf(w, "\n--- peer: River v0.51.2 (riverpgxv5), each job inserted one at a time (Client.Insert), dispatched when its worker starts; FetchCooldown %s, MaxWorkers 100 ---\n", rv.Cooldown)
	fmt.Fprintf(w, "burst: %d jobs from %d inserters (%d errors), %d started: %.0f jobs/s (first Insert called → last worker started); inserts alone %.0f/s; wait p50 %.1f ms, p99 %.1f ms\n",
		b.Jobs+b.Errors, cfg.submitters, b.Errors, b.Started, b.Rate, b.InsertPS, b.P50, b.P99)
	if b.Error != "" {
		fmt.Fprintf(w, "  e.g. %s\n", b.Error)
	}
	fmt.Fprintf(w, "CPU: River's process %.1f%%, Postgres %.1f%%, whole machine %.1f%%; per job: machine %.3f ms, River %.3f ms, Postgres %.3f ms\n",
		b.CPU.Coord, b.CPU.PG, b.CPU.Machine, cpuMs(b.CPU.Machine, b.CPU.Window, b.Started),
		cpuMs(b.CPU.Coord, b.CPU.Window, b.Started), cpuMs(b.CPU.PG, b.CPU.Window, b.Started))
	printStatements(w, b.Stmts, b.Started)
	fmt.Fprintf(w, "steady: %.0f jobs/s offered for %s, %d started: Insert called → worker started p50 %.1f ms, p90 %.1f ms, p99 %.1f ms, max %.1f ms\n",
		cfg.rate, cfg.steadyTime, s.Started, s.P50, s.P90, s.P99, s.Max)
	fmt.Fprintf(w, "CPU per job at %.0f jobs/s: machine %.3f ms, River %.3f ms, Postgres %.3f ms; %.1f statements per job\n", cfg.rate,
		cpuMs(s.CPU.Machine, s.CPU.Window, s.Started), cpuMs(s.CPU.Coord, s.CPU.Window, s.Started), cpuMs(s.CPU.PG, s.CPU.Window, s.Started),
		perJob(s.Stmts.calls, s.Started))
}

// printStatements prints the peer's statements per job, the most frequent
// first.
func printStatements(w io.Writer, st statementStats, jobs int) {
	fmt.Fprintf(w, "statements: %.1f per job (until every job completed), %.3f ms of Postgres execution time per job; most frequent:\n",
		perJob(st.calls, jobs), st.ms/float64(max(1, jobs)))
	for _, s := range st.byCalls {
		fmt.Fprintf(w, "    %6.2f  %6.3f ms  %s\n", perJob(s.Calls, jobs), s.Ms/float64(max(1, jobs)), s.Short())
	}
}

func perJob(calls int64, jobs int) float64 {
	if jobs == 0 {
		return 0
	}
	return float64(calls) / float64(jobs)
}

// summary prints every mode's headline figures side by side, with the
// issue's goals: at least River's one-at-a-time rate, p99 under 10 ms at the
// offered load, and at most 0.35 ms of machine CPU per dispatched task.
func summary(w io.Writer, cfg config, rs []result) {
	fmt.Fprintf(w, "\nDispatch: one coordinator replica, %d simulated nodes, bursts of %d tasks from %d submitters (River: as many one-at-a-time inserters), %.0f tasks/s offered for %s\n\n",
		cfg.nodes, cfg.tasks, cfg.submitters, cfg.rate, cfg.steadyTime)
	row := func(label string, cell func(r result) string) {
		fmt.Fprintf(w, "  %-66s", label)
		for _, r := range rs {
			fmt.Fprintf(w, " %26s", cell(r))
		}
		fmt.Fprintln(w)
	}
	// peer is a cell that needs River's figures: "-" when it did not run.
	peer := func(f func(r result, rv riverResult) string) func(r result) string {
		return func(r result) string {
			if r.River == nil || r.River.Burst.Started == 0 {
				return "-"
			}
			return f(r, *r.River)
		}
	}
	ratio := func(a, b float64) float64 {
		if b <= 0 {
			return 0
		}
		return a / b
	}
	row("Postgres, fair share (the coordinator's --fair-share)", func(r result) string {
		return fmt.Sprintf("%s, fair share %s", r.Mode.name, onOff(r.FairShare))
	})
	row("Podium, Submit → Assign received, dispatch alone", func(r result) string { return fmt.Sprintf("%.0f tasks/s", r.Dispatch.EndToEnd) })
	row("Podium, the same with tasks running along", func(r result) string { return fmt.Sprintf("%.0f tasks/s", r.Burst.EndToEnd) })
	if cfg.users > 0 {
		row(fmt.Sprintf("Podium, dispatch alone, tasks from %d people (contended)", cfg.users), func(r result) string {
			return fmt.Sprintf("%.0f tasks/s", r.Contended.EndToEnd)
		})
		row("  its wait, Submit called → Assign received: p50 / p99", func(r result) string {
			return fmt.Sprintf("%s / %s", ms(r.Contended.LatP50), ms(r.Contended.LatP99))
		})
		row("  coordinator / Postgres CPU per task", func(r result) string {
			c := r.Contended
			return fmt.Sprintf("%.3f / %.3f ms", cpuMs(c.CPU.Coord, c.CPU.Window, c.Assigned), cpuMs(c.CPU.PG, c.CPU.Window, c.Assigned))
		})
	}
	row("River, one-at-a-time Insert → worker started", peer(func(_ result, rv riverResult) string { return fmt.Sprintf("%.0f jobs/s", rv.Burst.Rate) }))
	row("  Podium / River, dispatch alone (goal ≥ 1.0)", peer(func(r result, rv riverResult) string {
		x := ratio(r.Dispatch.EndToEnd, rv.Burst.Rate)
		return fmt.Sprintf("%.2f %s", x, verdict(x >= 1))
	}))
	row("raw SQL, pgbench (insert + claim SKIP LOCKED + mark scheduled)", func(r result) string { return fmt.Sprintf("%.0f tx/s", r.RefTPS) })
	row("  Podium / raw SQL, dispatch alone (stretch ≥ 0.5)", func(r result) string {
		x := ratio(r.Dispatch.EndToEnd, r.RefTPS)
		return fmt.Sprintf("%.2f %s", x, verdict(x >= 0.5))
	})
	row(fmt.Sprintf("Podium at %.0f tasks/s, Submit called → Assign: p50 / p99", cfg.rate), func(r result) string {
		return fmt.Sprintf("%s / %s", ms(r.Steady.P50), ms(r.Steady.P99))
	})
	row("  p99 < 10 ms", func(r result) string { return verdict(r.Steady.Assigned > 0 && r.Steady.P99 < 10*time.Millisecond) })
	row(fmt.Sprintf("River at %.0f jobs/s, Insert called → worker started: p50 / p99", cfg.rate), peer(func(_ result, rv riverResult) string {
		return fmt.Sprintf("%.1f ms / %.1f ms", rv.Steady.P50, rv.Steady.P99)
	}))
	row("machine CPU per task, dispatch alone (/proc/stat; goal ≤ 0.35 ms)", func(r result) string {
		d := r.Dispatch
		x := cpuMs(d.CPU.Machine, d.CPU.Window, d.Assigned)
		return fmt.Sprintf("%.3f ms %s", x, verdict(d.Assigned > 0 && x <= 0.35))
	})
	row("  of it coordinator + Postgres + bench (fleet, submitters)", func(r result) string {
		d := r.Dispatch
		return fmt.Sprintf("%.3f ms", cpuMs(d.CPU.Coord+d.CPU.PG+d.CPU.Bench, d.CPU.Window, d.Assigned))
	})
	row("coordinator CPU per task: dispatch alone / at the offered load", func(r result) string {
		d, s := r.Dispatch, r.Steady
		return fmt.Sprintf("%.3f / %.3f ms", cpuMs(d.CPU.Coord, d.CPU.Window, d.Assigned), cpuMs(s.CPU.Coord, s.CPU.Window, s.Assigned))
	})
	row("SQL statements per task, its whole life (background out)", func(r result) string {
		d := r.Dispatch
		if d.Finished == 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f", (float64(d.Stmts.calls)-d.BackgroundStmtsInWin)/float64(d.Finished))
	})
	row("River per job: machine CPU / River's CPU / statements", peer(func(_ result, rv riverResult) string {
		b := rv.Burst
		return fmt.Sprintf("%.3f / %.3f ms / %.1f", cpuMs(b.CPU.Machine, b.CPU.Window, b.Started), cpuMs(b.CPU.Coord, b.CPU.Window, b.Started), perJob(b.Stmts.calls, b.Started))
	}))
	if len(rs) > 0 && rs[0].River != nil {
		fmt.Fprintf(w, "\n  River: FetchCooldown %s (its default, 100 ms, puts its latency near 100 ms); its statements counted until every job completed\n", rs[0].River.Cooldown)
	}
}
