package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/podiumhq/podium/bench/benchkit"
)

// report prints the figures beside their references and goals.
func report(w io.Writer, cfg config, r result) {
	settings := "durable"
	if !cfg.durable {
		settings = "FAST (fsync, synchronous_commit, full_page_writes off: not what production runs)"
	}
	fmt.Fprintf(w, "\nlog ingest, %s Postgres:", settings)
	for _, kv := range r.PGSettings {
		fmt.Fprintf(w, " %s=%s", kv[0], kv[1])
	}
	fmt.Fprintf(w, "\nfleet: %d nodes over %d connections, %d tasks each at once; %d tasks of %s in %s events, window %s per task, messages up to %s\n",
		cfg.nodes, r.Conns, cfg.perNode, r.Tasks, size(cfg.output), size(int64(cfg.chunk)), size(int64(cfg.window)), size(int64(cfg.message)))

	ingest, copyRate := mbps(r.Bytes, r.Elapsed), mbps(r.CopyBytes, r.CopyElapsed)
	fmt.Fprintf(w, "\n%-44s %10s %10s %s\n", "", "MiB/s", "vs COPY", "")
	fmt.Fprintf(w, "%-44s %10.1f %10s %s in %s\n", fmt.Sprintf("COPY, %d connections, %d rows per COPY", cfg.nodes, cfg.copyRows),
		copyRate, "1.00", size(r.CopyBytes), r.CopyElapsed.Round(time.Millisecond))
	fmt.Fprintf(w, "%-44s %10.1f %10.2f %s in %s; goal >= 0.70 of COPY: %s\n", "ingest, node stream → stored (acked)",
		ingest, ingest/copyRate, size(r.Bytes), r.Elapsed.Round(time.Millisecond), metOrMissed(ingest >= 0.7*copyRate && r.Bad == 0))
	fmt.Fprintf(w, "%-44s %10.1f %10s %d of %d tasks byte-exact (sha256 and offsets)\n", "read back through the API (Go client)",
		mbps(r.Bytes, r.ReadBack), "", r.Exact, r.Tasks)
	for _, s := range r.BadSample {
		fmt.Fprintf(w, "  NOT EXACT: %s\n", s)
	}
	cli(w, "podium run (live, to a pipe)", r.Run)
	if r.RunStored > 0 {
		fmt.Fprintf(w, "%-44s %10.1f %10s one task on one node: the most podium run can be shown live\n", "  its task stored (node stream → acked)",
			mbps(r.Run.Bytes, r.RunStored), "")
	}
	cli(w, "podium logs (stored, to a pipe)", r.Logs)

	mb := float64(r.Bytes) / (1 << 20)
	fmt.Fprintf(w, "\ncost per MiB stored: coordinator %.2f ms CPU, Postgres %.2f ms CPU (COPY: Postgres %.2f ms), simulated fleet %.2f ms\n",
		ms(r.CoordCPU)/mb, ms(r.PGCPU)/mb, ms(r.CopyPGCPU)/(float64(r.CopyBytes)/(1<<20)), ms(r.BenchCPU)/mb)
	fmt.Fprintf(w, "coordinator RSS: %.0f MiB at most during the ingest\n", float64(r.PeakRSS)/1024)
	fmt.Fprintf(w, "on disk: podium.task_events %s, the COPY table %s (for %s of output each)\n", size(r.EventsSize), size(r.CopySize), size(r.Bytes))
	statements(w, "statements during the ingest", r.Statements, r.Bytes)
	statements(w, "statements of the COPY reference", r.CopyStatements, r.CopyBytes)
	if r.Profile != "" {
		fmt.Fprintf(w, "\ncoordinator CPU profile during the ingest (flat):\n%s", indent(r.Profile))
	}
	benchkit.PrintTrouble(w, r.NodeErrs, r.Warnings, r.WarnSample)
}

func cli(w io.Writer, name string, c cliRun) {
	if !c.Done {
		fmt.Fprintf(w, "%-44s %10s %10s failed: %s\n", name, "-", "", c.Err)
		return
	}
	exact := "byte-exact"
	if !c.Exact {
		exact = "NOT BYTE-EXACT"
	}
	fmt.Fprintf(w, "%-44s %10.1f %10s %s in %s (first byte after %s), %s; goal >= 50 MiB/s: %s; CPU: podium %s, coordinator %s, Postgres %s\n",
		name, c.Delivery(), "", size(c.Bytes), c.Total.Round(time.Millisecond), c.FirstByte.Round(time.Millisecond), exact,
		metOrMissed(c.Exact && c.Delivery() >= 50), c.CPU.Round(time.Millisecond), c.CoordCPU.Round(time.Millisecond), c.PGCPU.Round(time.Millisecond))
}

// statements prints what ran in the database, most costly first.
func statements(w io.Writer, what string, all []benchkit.Statement, bytes int64) {
	st := slices.Clone(all)
	slices.SortFunc(st, func(a, b benchkit.Statement) int {
		switch {
		case a.Ms > b.Ms:
			return -1
		case a.Ms < b.Ms:
			return 1
		}
		return 0
	})
	var total float64
	for _, s := range st {
		total += s.Ms
	}
	fmt.Fprintf(w, "\n%s (pg_stat_statements), by time inside Postgres (%.0f ms in all):\n", what, total)
	fmt.Fprintf(w, "  %8s %10s %10s %10s  %s\n", "calls", "rows", "ms", "ms/MiB", "query")
	mb := float64(bytes) / (1 << 20)
	for _, s := range st[:min(len(st), 8)] {
		fmt.Fprintf(w, "  %8d %10d %10.0f %10.2f  %s\n", s.Calls, s.Rows, s.Ms, s.Ms/mb, s.Short())
	}
}

func metOrMissed(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func size(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", n>>30)
	case n >= 1<<20:
		return fmt.Sprintf("%.0fMiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.0fKiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%dB", n)
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n  ") + "\n"
}
