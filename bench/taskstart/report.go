package main

import (
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"
)

// stats of a series of durations.
type stats struct {
	median, p90, min time.Duration
	n                int
}

func summarize(ds []time.Duration) stats {
	if len(ds) == 0 {
		return stats{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return stats{median: median(s), p90: s[nearestRank(len(s), 0.9)], min: s[0], n: len(s)}
}

// median of a sorted series: the mean of the middle two when even.
func median(sorted []time.Duration) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

// nearestRank is the index of the p-quantile by the nearest-rank method.
func nearestRank(n int, p float64) int {
	i := int(float64(n)*p+0.999999) - 1
	return min(max(i, 0), n-1)
}

func walls(rs []runResult) []time.Duration {
	out := make([]time.Duration, len(rs))
	for i, r := range rs {
		out[i] = r.wall
	}
	return out
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

func report(w io.Writer, cfg config, res *results, watch *dockerWatch) {
	p, d := summarize(walls(res.podium)), summarize(walls(res.docker))
	diff := p.median - d.median
	paired := make([]time.Duration, len(res.podium))
	for i := range res.podium {
		paired[i] = res.podium[i].wall - res.docker[i].wall
	}
	slices.Sort(paired)

	pooled := 0
	for _, r := range res.podium {
		if r.pooled {
			pooled++
		}
	}
	fmt.Fprintf(w, "\nTask start: `podium run --image %s -- true` beside `docker run --rm %s true`,\n"+
		"%d runs of each, alternating, after %d warm-up run(s) of each; wall time from exec to exit 0\n"+
		"agent: podium-agent run --network-pool %d (task networks made ahead of the tasks); %d of the %d Podium runs took a network from the pool\n\n",
		cfg.image, cfg.image, cfg.runs, cfg.warmup, cfg.networkPool, pooled, len(res.podium))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "\tmedian\tp90\tmin\t")
	fmt.Fprintf(tw, "podium run\t%s\t%s\t%s\t\n", ms(p.median), ms(p.p90), ms(p.min))
	fmt.Fprintf(tw, "docker run --rm\t%s\t%s\t%s\t\n", ms(d.median), ms(d.p90), ms(d.min))
	_ = tw.Flush()
	fmt.Fprintf(w, "\nmedian difference (Podium − docker): %s (difference of the medians); "+
		"median of the %d paired differences %s\n", ms(diff), len(paired), ms(median(paired)))
	verdict := "MET"
	if diff >= cfg.target {
		verdict = "MISSED"
	}
	fmt.Fprintf(w, "target: Podium adds under %s to docker run's median: %s (adds %s, %.2f× docker run)\n",
		ms(cfg.target), verdict, ms(diff), float64(p.median)/float64(d.median))

	fmt.Fprintf(w, "\nWhere a Podium run's time goes (each step's median over the %d runs; \"at\" is the median time from exec;\n"+
		"the last column is the steps of one run, the one with the median wall time; a run whose network came from\n"+
		"the agent's warm pool has no \"network created\" of its own, and its next step runs from PROVISIONING)\n\n", len(res.podium))
	breakdown(w, podiumMilestones, res.podium)
	fmt.Fprintf(w, "\nThe same for docker run --rm:\n\n")
	breakdown(w, dockerMilestones, res.docker)
	if watch.bad > 0 {
		fmt.Fprintf(w, "(%d docker events lines did not parse)\n", watch.bad)
	}
}

// breakdown prints, for each milestone, the median step from the milestone
// before it and the median time from exec, then the largest steps.
func breakdown(w io.Writer, stones []milestone, rs []runResult) {
	// The run with the median wall time (the lower middle when even).
	order := make([]int, len(rs))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return int(rs[a].wall - rs[b].wall) })
	one := rs[order[(len(order)-1)/2]]

	type step struct {
		name   string
		median time.Duration
	}
	var steps []step
	var total time.Duration
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  milestone\twhat happens since the milestone before\t%10s\t%10s\tone run: %s\n", "step", "at", one.id)
	from := func(r runResult, i int) int {
		if stones[i].after == "" {
			return lastSeen(r, i)
		}
		j := slices.IndexFunc(stones, func(m milestone) bool { return m.name == stones[i].after })
		if j < 0 || !r.marks[j].ok {
			return -1
		}
		return j
	}
	for i, m := range stones {
		var at, st []time.Duration
		for _, r := range rs {
			if r.marks[i].ok {
				at = append(at, r.marks[i].at)
			}
			if prev := from(r, i); prev >= 0 && r.marks[i].ok {
				st = append(st, r.marks[i].at-r.marks[prev].at)
			}
		}
		slices.Sort(at)
		slices.Sort(st)
		seen := ""
		if len(at) < len(rs) {
			seen = fmt.Sprintf(" (seen in %d of %d runs)", len(at), len(rs))
		}
		oneStep := "-"
		if prev := from(one, i); prev >= 0 && one.marks[i].ok {
			oneStep = msAligned(one.marks[i].at - one.marks[prev].at)
		}
		if i == 0 {
			fmt.Fprintf(tw, "  %s\t\t\t%s\t\n", m.name, msAligned(0))
			continue
		}
		stepMedian := median(st)
		if m.after == "" {
			steps = append(steps, step{m.name + ": " + m.step, stepMedian})
			total += stepMedian
		}
		fmt.Fprintf(tw, "  %s%s\t%s\t%s\t%s\t%s\n", m.name, seen, m.step, msAligned(stepMedian), msAligned(median(at)), oneStep)
	}
	_ = tw.Flush()
	slices.SortFunc(steps, func(a, b step) int { return int(b.median - a.median) })
	fmt.Fprintf(w, "  largest steps (of %s, the sum of the step medians):", ms(total))
	for i, s := range steps[:min(4, len(steps))] {
		sep := ";"
		if i == 0 {
			sep = ""
		}
		fmt.Fprintf(w, "%s %s %s (%.0f%%)", sep, s.name, ms(s.median), 100*float64(s.median)/float64(max(total, 1)))
	}
	fmt.Fprintln(w)
}

// lastSeen is the index of the last milestone before i the run saw, or -1.
// A step runs from it, so that a milestone a run does not have (the network
// create of a run whose network came from the agent's warm pool) folds its
// step into the next.
func lastSeen(r runResult, i int) int {
	for j := i - 1; j >= 0; j-- {
		if r.marks[j].ok {
			return j
		}
	}
	return -1
}

func msAligned(d time.Duration) string {
	return fmt.Sprintf("%7.1f ms", float64(d)/float64(time.Millisecond))
}
