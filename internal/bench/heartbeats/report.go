package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/podiumhq/podium/internal/bench/benchkit"
)

// printDetails prints one node count's context as soon as it is measured: the
// figures behind the summary row and whatever explains them (failed Hellos,
// the coordinator's warnings, the statements it runs most).
func printDetails(w io.Writer, r result) {
	fmt.Fprintf(w, "\n--- %d nodes ---\n", r.Nodes)
	all := "all connected"
	if !r.AllConnected {
		all = "NOT all connected"
	}
	fmt.Fprintf(w, "connect: %s in %s (%s); Hello→HelloAck p50 %s, p99 %s; failed Hellos %d; streams dropped %d; holding %d at the end\n",
		all, r.ConnectTime.Round(time.Millisecond), fmt.Sprintf("%d HTTP/2 connections", r.Conns),
		r.HelloP50.Round(time.Microsecond), r.HelloP99.Round(time.Microsecond), r.HelloRetries, r.Dropped, r.Connected)
	fmt.Fprintf(w, "ramp: coordinator CPU %.1f%%, Postgres CPU %.1f%%, bench CPU %.1f%%; %.1f statements per node connected "+
		"(connected nodes' polling included), most frequent:\n",
		r.RampCoordCPU, r.RampPGCPU, r.RampBenchCPU, r.StmtsPerHello)
	for _, s := range r.RampTop {
		fmt.Fprintf(w, "  %8.2f per node  %s\n", float64(s.Calls)/float64(r.Nodes), s.Short())
	}
	fmt.Fprintf(w, "memory: RSS %.0f MiB with no nodes, %.0f MiB holding them: %.1f KiB per node\n",
		r.BaseRSSMiB, r.RSSMiB, (r.RSSMiB-r.BaseRSSMiB)*1024/float64(r.Nodes))
	fmt.Fprintf(w, "window %s: coordinator CPU %.1f%%, RSS %.0f MiB (peak %.0f MiB), %d open fds, %d Postgres connections; Postgres CPU %.1f%%; bench CPU %.1f%%\n",
		r.Window.Round(time.Millisecond), r.CoordCPU, r.RSSMiB, r.PeakMiB, r.CoordFDs, r.PGConns, r.PGCPU, r.BenchCPU)
	fmt.Fprintf(w, "heartbeats: sent %.1f/s, written %.1f rows/s (need %.0f) in %.2f statements/s; stale %d, not online %d\n",
		float64(r.BeatsSent)/r.Window.Seconds(), r.HBRows, r.NeedRows, r.HBStmts, r.Stale, r.NotOnline)
	fmt.Fprintf(w, "every statement the coordinator ran: %.1f/s; most frequent:\n", r.AllStmts)
	for _, s := range r.Top {
		fmt.Fprintf(w, "  %8.1f/s %9.1f rows/s  %s\n", float64(s.Calls)/r.Window.Seconds(), float64(s.Rows)/r.Window.Seconds(), s.Short())
	}
	benchkit.PrintTrouble(w, r.ErrSamples, r.Warnings, r.WarnSample)
}

// printTable prints the summary, one row per node count, and the verdict
// against the design's target.
func printTable(w io.Writer, cfg config, rs []result) {
	fmt.Fprintf(w, "\nHeartbeats: one coordinator replica, %s interval, %s window (CPU %% is of one core)\n\n", cfg.interval, cfg.duration)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "nodes\tconnect\tcoord CPU\tRSS MiB (peak)\thb stmts/s\thb rows/s\tneeded rows/s\tstale\t\tpgbench naive rows/s\tpg CPU\tbench CPU\t")
	for _, r := range rs {
		connect := r.ConnectTime.Round(10 * time.Millisecond).String()
		if !r.AllConnected {
			connect = fmt.Sprintf("%d only", r.Connected)
		}
		fmt.Fprintf(tw, "%d\t%s\t%.1f%%\t%.0f (%.0f)\t%.2f\t%.1f\t%.0f\t%d\t\t%.0f\t%.1f%%\t%.1f%%\t\n",
			r.Nodes, connect, r.CoordCPU, r.RSSMiB, r.PeakMiB, r.HBStmts, r.HBRows, r.NeedRows, r.Stale,
			r.PgbenchRows, r.PGCPU, r.BenchCPU)
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
	for _, r := range rs {
		ok := r.AllConnected && r.Stale == 0 && r.PeakMiB < 1024
		verdict := "meets"
		if !ok {
			verdict = "MISSES"
		}
		fmt.Fprintf(w, "%d nodes %s the target (all connected, none stale, peak RSS < 1 GiB): peak %.0f MiB, %d stale; "+
			"%.2f heartbeat statements/s for %.0f rows/s, where one UPDATE per heartbeat would need %.0f statements/s (pgbench ceiling here %.0f/s)\n",
			r.Nodes, verdict, r.PeakMiB, r.Stale, r.HBStmts, r.HBRows, r.NeedRows, r.PgbenchRows)
	}
}
