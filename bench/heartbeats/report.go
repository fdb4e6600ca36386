package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/podiumhq/podium/bench/benchkit"
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
	fmt.Fprintf(w, "fleet: %d nodes on %d HTTP/2 connections (%d per connection)\n", r.Nodes, r.Conns, r.PerConn)
	if r.Shared != "" {
		fmt.Fprintf(w, "  NOT one connection per node: %s\n", r.Shared)
	}
	fmt.Fprintf(w, "connect: %s in %s; Hello→HelloAck p50 %s, p99 %s; failed Hellos %d; streams dropped %d; holding %d at the end\n",
		all, r.ConnectTime.Round(time.Millisecond),
		r.HelloP50.Round(time.Microsecond), r.HelloP99.Round(time.Microsecond), r.HelloRetries, r.Dropped, r.Connected)
	fmt.Fprintf(w, "ramp: coordinator CPU %.1f%%, Postgres CPU %.1f%%, bench CPU %.1f%%; %.1f statements per node connected "+
		"(connected nodes' polling included), most frequent:\n",
		r.RampCoordCPU, r.RampPGCPU, r.RampBenchCPU, r.StmtsPerHello)
	for _, s := range r.RampTop {
		fmt.Fprintf(w, "  %8.2f per node  %s\n", float64(s.Calls)/r.held(), s.Short())
	}
	fmt.Fprintf(w, "memory: RSS %.0f MiB with no nodes, %.0f MiB holding %d: %.1f KiB per node held in all, %.1f KiB per node held above the empty replica\n",
		r.BaseRSSMiB, r.RSSMiB, r.Connected, r.RSSMiB*1024/r.held(), (r.RSSMiB-r.BaseRSSMiB)*1024/r.held())
	printProfile(w, r)
	fmt.Fprintf(w, "window %s: coordinator CPU %.1f%%, RSS %.0f MiB (peak %.0f MiB), %d open fds, %d Postgres connections; Postgres CPU %.1f%%; bench CPU %.1f%%\n",
		r.Window.Round(time.Millisecond), r.CoordCPU, r.RSSMiB, r.PeakMiB, r.CoordFDs, r.PGConns, r.PGCPU, r.BenchCPU)
	fmt.Fprintf(w, "heartbeats: sent %.1f/s, written %.1f rows/s (need %.0f) in %.2f statements/s; %d flushes, %.2f heartbeat statements per flush; stale %d, not online %d (a node that never connected is both)\n",
		float64(r.BeatsSent)/r.Window.Seconds(), r.HBRows, r.NeedRows, r.HBStmts, r.Flushes, r.HBPerFlush, r.Stale, r.NotOnline)
	fmt.Fprintf(w, "every statement the coordinator ran: %.1f/s; most frequent:\n", r.AllStmts)
	for _, s := range r.Top {
		fmt.Fprintf(w, "  %8.1f/s %9.1f rows/s  %s\n", float64(s.Calls)/r.Window.Seconds(), float64(s.Rows)/r.Window.Seconds(), s.Short())
	}
	benchkit.PrintTrouble(w, r.ErrSamples, r.Warnings, r.WarnSample)
}

// printProfile says where the replica's memory goes: the runtime's heap and
// stacks per node, the kinds of goroutine it runs per node, and the heap
// profile's top allocators.
func printProfile(w io.Writer, r result) {
	p := r.Profile
	if p.Sys == 0 {
		return
	}
	n := r.held()
	fmt.Fprintf(w, "  runtime: heap in use %.0f MiB (%.1f KiB per node), stacks %.0f MiB (%.1f KiB per node), from the OS %.0f MiB; "+
		"%d goroutines (%.2f per node)\n", mib(p.HeapInuse), kib(p.HeapInuse)/n, mib(p.StackInuse), kib(p.StackInuse)/n,
		mib(p.Sys), p.Goroutines, float64(p.Goroutines)/n)
	for _, g := range p.Groups[:min(6, len(p.Groups))] {
		fmt.Fprintf(w, "  %8d goroutines (%.2f per node)  %s\n", g.Count, float64(g.Count)/n, g.Func)
	}
	if len(p.Top) > 0 {
		fmt.Fprintf(w, "  heap in use by allocation site (go tool pprof -top %s):\n", p.HeapFile)
		for _, l := range p.Top {
			fmt.Fprintf(w, "    %s\n", l)
		}
	}
}

// held is how many nodes the replica held when its memory was read: the
// per-node figures are of those, which is all of them unless some never
// connected.
func (r result) held() float64 { return float64(max(r.Connected, 1)) }

func mib(b uint64) float64 { return float64(b) / (1 << 20) }
func kib(b uint64) float64 { return float64(b) / (1 << 10) }

// The goals for one replica (issue 17): 50,000 nodes in under 2 GiB,
// which is at most 40 KiB per node in all; every flush one statement; no node
// stale; every node connected within a minute.
const (
	goalKiBPerNode = 40
	goalRSSMiB     = 2048
	goalConnect    = 60 * time.Second
)

// printTable prints the summary, one row per node count, and the verdict
// against the goals.
func printTable(w io.Writer, cfg config, setup *benchkit.Setup, rs []result) {
	transport := "cleartext HTTP/2"
	if setup.TLS != nil {
		transport = "HTTP/2 over TLS"
	}
	fmt.Fprintf(w, "\nHeartbeats: one coordinator replica, %s interval, %s window, %s (CPU %% is of one core)\n", cfg.interval, cfg.duration, transport)
	fmt.Fprintln(w, setup.Postgres())
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "nodes\tconns\tconnect\tRSS MiB (peak)\tKiB/node\tgoroutines/node\tcoord CPU\thb stmts/flush\thb rows/s\tneeded rows/s\tstale\t\tpgbench naive rows/s\tpg CPU\tbench CPU\t")
	for _, r := range rs {
		connect := r.ConnectTime.Round(10 * time.Millisecond).String()
		if !r.AllConnected {
			connect = fmt.Sprintf("%d only", r.Connected)
		}
		fmt.Fprintf(tw, "%d\t%d\t%s\t%.0f (%.0f)\t%.1f\t%.2f\t%.1f%%\t%.2f\t%.1f\t%.0f\t%d\t\t%.0f\t%.1f%%\t%.1f%%\t\n",
			r.Nodes, r.Conns, connect, r.RSSMiB, r.PeakMiB, r.RSSMiB*1024/r.held(),
			float64(r.Profile.Goroutines)/r.held(), r.CoordCPU, r.HBPerFlush, r.HBRows, r.NeedRows, r.Stale,
			r.PgbenchRows, r.PGCPU, r.BenchCPU)
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
	for _, r := range rs {
		perNode := r.RSSMiB * 1024 / r.held()
		var missed []string
		if !r.AllConnected {
			missed = append(missed, fmt.Sprintf("only %d of %d connected", r.Connected, r.Nodes))
		} else if r.ConnectTime >= goalConnect {
			missed = append(missed, "connect-all "+r.ConnectTime.Round(time.Second).String())
		}
		if r.RSSMiB >= goalRSSMiB || perNode > goalKiBPerNode {
			missed = append(missed, fmt.Sprintf("RSS %.0f MiB, %.1f KiB per node", r.RSSMiB, perNode))
		}
		if r.Flushes == 0 || r.HBPerFlush > 1 {
			missed = append(missed, fmt.Sprintf("%.2f heartbeat statements per flush", r.HBPerFlush))
		}
		if r.Stale > 0 || r.NotOnline > 0 {
			missed = append(missed, fmt.Sprintf("%d stale, %d not online", r.Stale, r.NotOnline))
		}
		if r.Shared != "" {
			missed = append(missed, fmt.Sprintf("not one connection per node (%d per connection: the open-file limit)", r.PerConn))
		}
		verdict := "meets"
		if len(missed) > 0 {
			verdict = "MISSES (" + strings.Join(missed, "; ") + ")"
		}
		fmt.Fprintf(w, "%d nodes %s the goals (connect-all < %s, RSS < %d MiB and <= %d KiB per node, one heartbeat statement per flush, none stale): "+
			"connect %s, RSS %.0f MiB = %.1f KiB per node, %.2f statements per flush, %d stale; "+
			"%.0f rows/s where one UPDATE per heartbeat would need %.0f statements/s (pgbench ceiling here %.0f/s)\n",
			r.Nodes, verdict, goalConnect, goalRSSMiB, goalKiBPerNode, r.ConnectTime.Round(10*time.Millisecond), r.RSSMiB, perNode,
			r.HBPerFlush, r.Stale, r.HBRows, r.NeedRows, r.PgbenchRows)
	}
}
