package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"time"

	"github.com/podiumhq/podium/internal/bench/benchkit"
	"github.com/podiumhq/podium/internal/testenv/pgtest"
)

var tpsLine = regexp.MustCompile(`tps = ([0-9.]+)`)

// runPgbench measures the naive alternative to batching: one autocommitted
// UPDATE per heartbeat, for a random one of the n nodes, as fast as the
// clients can go. Its rate is the ceiling a coordinator writing heartbeats one
// by one would hit on this machine, beside which N/10 rows/s (what the fleet
// needs) and the coordinator's ~1 statement/s are read.
//
// The server runs with synchronous_commit off (pgtest's setting), the same as
// the coordinator's flush, so the comparison is statement for statement, not
// fsync against no fsync.
func runPgbench(ctx context.Context, socketDir, db string, n, clients int, d time.Duration, dir string) (float64, error) {
	script := filepath.Join(dir, "naive-heartbeat.sql")
	body := fmt.Sprintf("\\set n random(1, %d)\n"+
		"update podium.nodes set last_heartbeat_at = now() where id = '%s' || lpad(:n::text, 6, '0');\n", n, benchkit.NodePrefix)
	if err := os.WriteFile(script, []byte(body), 0o644); err != nil {
		return 0, err
	}
	bin := filepath.Join(pgtest.BinDir, "pgbench")
	if d := os.Getenv("PODIUM_PG_BIN"); d != "" {
		bin = filepath.Join(d, "pgbench")
	}
	// pgbench is only a client, so unlike the server it runs fine as root.
	cmd := exec.CommandContext(ctx, bin, "-h", socketDir, "-U", "postgres", "-n", "-M", "prepared",
		"-c", strconv.Itoa(clients), "-j", strconv.Itoa(min(clients, 2)),
		"-T", strconv.Itoa(int(d.Seconds())), "-f", script, db)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("pgbench: %v\n%s", err, out)
	}
	m := tpsLine.FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("pgbench printed no tps line:\n%s", out)
	}
	return strconv.ParseFloat(string(m[1]), 64)
}
