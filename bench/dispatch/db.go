package main

import (
	"context"
	"slices"
	"strings"

	"github.com/podiumhq/podium/bench/benchkit"
)

const (
	// dbName is the coordinator's database; refDBName is pgbench's, a second
	// copy of the same schema on the same server, so the reference's tasks
	// never show up in the coordinator's queue or in its statement counts.
	dbName    = "bench"
	refDBName = "bench_ref"
)

// statementStats is what a phase's statements say.
type statementStats struct {
	calls   int64   // every statement the coordinator ran
	ms      float64 // their execution time, summed
	notify  int64   // pg_notify calls (each is its own notifying commit)
	byCalls []benchkit.Statement
	byTime  []benchkit.Statement
}

// statements reads what the coordinator ran since the last reset, with the
// top statements by calls and by Postgres time.
func statements(ctx context.Context, db *benchkit.StatsDB, top int) (statementStats, error) {
	all, err := db.Statements(ctx)
	if err != nil {
		return statementStats{}, err
	}
	var s statementStats
	for _, st := range all {
		s.calls += st.Calls
		s.ms += st.Ms
		if strings.Contains(st.Query, "pg_notify") {
			s.notify += st.Calls
		}
	}
	s.byCalls = all[:min(top, len(all))]
	byTime := slices.Clone(all)
	slices.SortFunc(byTime, func(a, b benchkit.Statement) int {
		switch {
		case a.Ms > b.Ms:
			return -1
		case a.Ms < b.Ms:
			return 1
		}
		return 0
	})
	s.byTime = byTime[:min(top, len(byTime))]
	return s, nil
}
