package benchkit

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"time"

	"github.com/podiumhq/podium/test/testenv/pgtest"
)

// Pgbench is one run of pgbench: the raw-SQL reference a benchmark prints
// beside Podium's figure, measured on the same server in the same run.
type Pgbench struct {
	DB      string // the database it runs in
	Name    string // the script's file name in the work directory
	Script  string // the custom script (pgbench -f)
	Clients int
	Threads int
	Time    time.Duration
}

var tpsLine = regexp.MustCompile(`tps = ([0-9.]+)`)

// Run runs the script against the cluster for p.Time and returns the
// transactions per second and the command line (for the report).
//
// The server runs with synchronous_commit off (pgtest's setting), which the
// coordinator's transactions get too, so a commit costs the same on both
// sides. Prepared statements, like pgx's statement cache in the coordinator.
// pgbench is only a client, so unlike the server it runs fine as root.
func (p Pgbench) Run(ctx context.Context, cluster *pgtest.Cluster, dir string) (float64, string, error) {
	script := filepath.Join(dir, p.Name)
	if err := os.WriteFile(script, []byte(p.Script), 0o644); err != nil {
		return 0, "", err
	}
	bin := filepath.Join(pgtest.BinDir, "pgbench")
	if d := os.Getenv("PODIUM_PG_BIN"); d != "" {
		bin = filepath.Join(d, "pgbench")
	}
	cmd := exec.CommandContext(ctx, bin, "-h", cluster.SocketDir, "-U", "postgres", "-n", "-M", "prepared",
		"-c", strconv.Itoa(p.Clients), "-j", strconv.Itoa(max(1, p.Threads)),
		"-T", strconv.Itoa(int(p.Time.Seconds())), "-f", script, p.DB)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return 0, "", fmt.Errorf("pgbench: %v\n%s", err, out)
	}
	m := tpsLine.FindSubmatch(out)
	if m == nil {
		return 0, "", fmt.Errorf("pgbench printed no tps line:\n%s", out)
	}
	tps, err := strconv.ParseFloat(string(m[1]), 64)
	return tps, cmd.String(), err
}
