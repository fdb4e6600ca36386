package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/podiumhq/podium/bench/benchkit"
)

func report(w io.Writer, cfg config, r result) {
	durability := "durable Postgres (fsync, synchronous_commit, full_page_writes on: production's settings)"
	if !cfg.durable {
		durability = "FAST Postgres (fsync, synchronous_commit, full_page_writes off: test settings, not production's)"
	}
	fmt.Fprintf(w, "\nBounded database under churn — %s\n", durability)
	var set []string
	for _, s := range r.PGSettings {
		set = append(set, s[0]+"="+s[1])
	}
	fmt.Fprintf(w, "Postgres %s: %s\n", r.PGVersion, strings.Join(set, ", "))
	store := "versitygw (S3): archives are objects, outside the database"
	if cfg.objectStore == "none" {
		store = "none: archives are compressed rows of podium.task_log_archives, inside the database"
	}
	fmt.Fprintf(w, "object store: %s\n", store)
	chunks := (cfg.output + cfg.chunk - 1) / cfg.chunk
	fmt.Fprintf(w, "fleet: %d simulated nodes × %d slots, %d nodes per HTTP/2 connection; each task: PROVISIONING, RUNNING after %s, "+
		"%s of output in %d log events over %s (build-log text, zstd %.1f×), SUCCEEDED; at most %d tasks unfinished, %d submitters\n",
		cfg.nodes, cfg.maxTasks, cfg.perConn, cfg.startDelay, size(int64(cfg.output)), chunks, cfg.runTime, r.Ratio, cfg.window, cfg.submitters)
	if cfg.rate > 0 {
		fmt.Fprintf(w, "offered load: at most %.0f tasks/s (-rate)\n", cfg.rate)
	}
	if cfg.noRetention {
		fmt.Fprintln(w, "-no-retention: the coordinator ran without the archive and retention flags in both phases")
	}
	for _, p := range []*phaseResult{r.A, r.B} {
		if p != nil {
			phase(w, cfg, p)
			timeline(w, p, cfg.timelineRows)
		}
	}
	if r.B != nil {
		summary(w, cfg, r)
	}
}

func phase(w io.Writer, cfg config, p *phaseResult) {
	title := "phase A, the reference: archive and retention off"
	if p.Name == "b" {
		title = "phase B: archive and retention on"
	}
	fmt.Fprintf(w, "\n%s — %d tasks; coordinator flags: %s\n", title, p.Tasks, strings.Join(p.Args, " "))
	fmt.Fprintf(w, "  nodes connected in %s over %d connections\n", p.ConnectTime.Round(time.Millisecond), p.Conns)
	fmt.Fprintf(w, "  dispatch: %d tasks finished in %s = %.0f tasks/s end to end (first Submit → last SUCCEEDED acknowledged), %s of output acknowledged\n",
		p.Finished, p.Elapsed.Round(time.Millisecond), p.Rate, size(p.OutBytes))
	if p.Stalled {
		fmt.Fprintf(w, "  STALLED: no task finished for %s; %d of %d submitted tasks finished\n", cfg.stall, p.Finished, p.Submitted-p.SubmitErrors)
	}
	if p.SubmitErrors > 0 {
		fmt.Fprintf(w, "  %d Submit calls failed, e.g.: %s\n", p.SubmitErrors, p.ErrSample)
	}
	fmt.Fprintf(w, "  CPU over the phase (%% of one core): coordinator %.0f %%, Postgres %.0f %%, the benchmark (fleet, submitters, sampler) %.0f %%; coordinator peak RSS %s\n",
		p.CPUCoord, p.CPUPG, p.CPUBench, size(p.PeakRSS))
	if len(p.Samples) > 1 {
		first, last := p.Samples[0], p.Samples[len(p.Samples)-1]
		fmt.Fprintf(w, "  database: %s at the start, %s at the end", size(first.DBBytes), size(last.DBBytes))
		if p.Finished > 0 {
			end := p.Samples[p.DispatchEndIdx-1]
			fmt.Fprintf(w, " (%s per task while tasks ran)", size((end.DBBytes-first.DBBytes)/p.Finished))
		}
		fmt.Fprintf(w, "; task_events %d rows, %s\n", last.Events, size(last.EventsBytes))
	}
	if p.Retries+p.Dropped+p.Rejected+p.Repeats+p.Cancels > 0 || p.SampleErrs > 0 {
		fmt.Fprintf(w, "  hello retries %d, dropped streams %d, tasks given back for want of a slot %d, repeated assigns %d, cancels %d, failed samples %d\n",
			p.Retries, p.Dropped, p.Rejected, p.Repeats, p.Cancels, p.SampleErrs)
	}
	benchkit.PrintTrouble(w, p.NodeErrs, p.Warnings, p.WarnSample)
}

// timeline prints the samples, every k-th so that about rows lines show, and
// always the one taken when the last task finished; tasks/s is since the
// line before.
func timeline(w io.Writer, p *phaseResult, rows int) {
	k := max(1, (len(p.Samples)+rows-1)/rows)
	fmt.Fprintf(w, "\n  %7s %9s %7s %10s %9s %10s %9s %9s %7s %10s %10s %10s %12s %6s %6s %8s\n",
		"t", "finished", "tasks/s", "db size", "tasks", "events", "archived", "backlog", "oldest", "events tbl", "tasks tbl", "arch. tbl", "store", "coord", "pg", "coord RSS")
	var prev sample
	for i, x := range p.Samples {
		if i%k != 0 && i != p.DispatchEndIdx-1 && i != len(p.Samples)-1 {
			continue
		}
		rate := 0.0
		if i > 0 && x.At > prev.At {
			rate = float64(x.Finished-prev.Finished) / (x.At - prev.At).Seconds()
		}
		st := "-"
		if x.StoreObjects >= 0 {
			st = fmt.Sprintf("%d/%s", x.StoreObjects, size(x.StoreBytes))
		}
		mark := ""
		if i == p.DispatchEndIdx-1 {
			mark = "  ← last task finished"
		}
		fmt.Fprintf(w, "  %6.0fs %9d %7.0f %10s %9d %10d %9d %9d %6.0fs %10s %10s %10s %12s %5.0f%% %5.0f%% %8s%s\n",
			x.At.Seconds(), x.Finished, rate, size(x.DBBytes), x.Tasks, x.Events, x.Archived, x.Backlog, x.BacklogAge.Seconds(),
			size(x.EventsBytes), size(x.TasksBytes), size(x.ArchiveBytes), st, x.CoordCPU, x.PGCPU, size(x.CoordRSS), mark)
		prev = x
	}
	fmt.Fprintln(w, "  (archived: rows of podium.tasks whose log is archived now; backlog: terminal tasks whose log is not, oldest: how long ago the oldest of them ended)")
}

// archivedSoFar is how many tasks' logs had been archived by a sample: the
// tasks finished less those still waiting. Tasks retention has deleted are
// no longer rows, so counting archived rows would undercount; this counts a
// task deleted before it was archived as archived, which the report flags
// when the backlog's oldest task outlived --retain-tasks.
func archivedSoFar(x sample) int64 { return max(0, x.Finished-x.Backlog) }

func summary(w io.Writer, cfg config, r result) {
	b := r.B
	fmt.Fprintln(w, "\nsummary")
	if r.A != nil && r.A.Rate > 0 {
		fmt.Fprintf(w, "  dispatch, end to end: phase A (jobs off) %.0f tasks/s, phase B (jobs on) %.0f tasks/s: B/A = %.2f\n", r.A.Rate, b.Rate, b.Rate/r.A.Rate)
		if b.MarkElapsed > 0 {
			mr := float64(b.Mark) / b.MarkElapsed.Seconds()
			fmt.Fprintf(w, "  the first %d tasks of B (as many as A ran): %.0f tasks/s: B/A = %.2f\n", b.Mark, mr, mr/r.A.Rate)
		}
	} else {
		fmt.Fprintf(w, "  dispatch, end to end: phase B %.0f tasks/s (no phase A to compare with)\n", b.Rate)
	}
	if len(b.Samples) < 3 || b.DispatchEndIdx < 3 {
		fmt.Fprintln(w, "  too few samples for a plateau or an archive rate: run more tasks or sample more often")
		return
	}
	during := b.Samples[:b.DispatchEndIdx]
	end := during[len(during)-1]

	// Archive throughput while tasks ran, from its first archived task on.
	var first *sample
	for i := range during {
		if archivedSoFar(during[i]) > 0 {
			first = &during[i]
			break
		}
	}
	var peak int64
	var oldest time.Duration
	for _, x := range b.Samples {
		peak, oldest = max(peak, x.Backlog), max(oldest, x.BacklogAge)
	}
	if first == nil {
		fmt.Fprintln(w, "  archive: no task's log was archived while tasks ran (is the archive job there and on?)")
	} else {
		dt := (end.At - first.At).Seconds()
		rate := 0.0
		if dt > 0 {
			rate = float64(archivedSoFar(end)-archivedSoFar(*first)) / dt
		}
		fmt.Fprintf(w, "  archive, while tasks ran: %d of %d tasks archived, %.0f tasks/s from the first archive on (dispatch: %.0f tasks/s); backlog at most %d tasks, the oldest %s after it ended\n",
			archivedSoFar(end), end.Finished, rate, b.Rate, peak, oldest.Round(time.Second))
	}
	if after := b.Samples[b.DispatchEndIdx-1:]; len(after) > 1 {
		last := after[len(after)-1]
		dt := (last.At - after[0].At).Seconds()
		n := archivedSoFar(last) - archivedSoFar(after[0])
		state := "backlog empty"
		if !b.ArchiveDrained {
			state = fmt.Sprintf("backlog still %d after %s", last.Backlog, cfg.archiveDrain)
		}
		if n > 0 && dt > 0 {
			fmt.Fprintf(w, "  archive, catching up after the last task: %d tasks in %.0f s = %.0f tasks/s (%s)\n", n, dt, float64(n)/dt, state)
		}
	}
	if rt, err := parseRetention(cfg.retainTasks); err == nil && !cfg.noRetention && oldest > rt {
		fmt.Fprintf(w, "  NOTE: a task waited %s for its archive, longer than --retain-tasks %s: retention may have deleted tasks before their log was archived, and the archived counts above are then an upper bound\n",
			oldest.Round(time.Second), cfg.retainTasks)
	}

	// The plateau: the largest size in the last third of the run against the
	// middle third, and the slope over the last third.
	T := end.At
	var midMax, lastMax int64
	var xs, ys []float64
	for _, x := range during {
		switch {
		case x.At >= 2*T/3:
			lastMax = max(lastMax, x.DBBytes)
			xs, ys = append(xs, x.At.Minutes()), append(ys, float64(x.DBBytes)/(1<<20))
		case x.At >= T/3:
			midMax = max(midMax, x.DBBytes)
		}
	}
	if midMax == 0 || len(xs) < 2 {
		fmt.Fprintln(w, "  plateau: too few samples in the middle and last thirds of phase B")
		return
	}
	growth := float64(lastMax)/float64(midMax) - 1
	slope := slopeOf(xs, ys)
	verdict := "PLATEAU: the last third is within 5 % of the middle third"
	if growth > 0.05 {
		verdict = "STILL GROWING"
	}
	fmt.Fprintf(w, "  database size: max %s in the middle third of phase B, %s in the last third (%+.1f %%), %+.1f MiB/min over the last third: %s\n",
		size(midMax), size(lastMax), 100*growth, slope, verdict)
	if !cfg.noRetention {
		window := 0 * time.Second
		for _, v := range []string{cfg.archiveAfter, cfg.retainTasks, cfg.retentionEvery} {
			d, _ := parseRetention(v)
			window += d
		}
		if T < 3*window {
			fmt.Fprintf(w, "  NOTE: phase B's tasks ran for %s, less than three times archive-after + retain-tasks + retention-every (%s): too short for the plateau to show; run more tasks\n",
				T.Round(time.Second), window)
		}
	}
	// What a run of the default size would take at these rates.
	const full, fullA = 1_000_000, 50_000
	est := time.Duration(float64(full)/b.Rate*float64(time.Second)) + 30*time.Second
	if r.A != nil && r.A.Rate > 0 {
		est += time.Duration(float64(fullA)/r.A.Rate*float64(time.Second)) + 30*time.Second
	}
	fmt.Fprintf(w, "  at this run's rates, -tasks %d -phase-a-tasks %d would take about %s (plus the archive's catch-up)\n", full, fullA, est.Round(time.Minute))
}

// slopeOf is the least-squares slope of ys over xs.
func slopeOf(xs, ys []float64) float64 {
	n := float64(len(xs))
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx, sy, sxx, sxy = sx+xs[i], sy+ys[i], sxx+xs[i]*xs[i], sxy+xs[i]*ys[i]
	}
	d := n*sxx - sx*sx
	if d == 0 {
		return 0
	}
	return (n*sxy - sx*sy) / d
}

func size(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
