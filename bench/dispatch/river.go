package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/podiumhq/podium/bench/benchkit"
	"github.com/podiumhq/podium/test/testenv/pgtest"
)

// riverDBName is the peer's database on the same server: River's own tables,
// so neither side's statements are counted for the other.
const riverDBName = "bench_river"

// riverPhase is one phase of the peer as riverpeer reports it (its JSON
// result line), with what the benchmark measured around it.
type riverPhase struct {
	Jobs     int     `json:"jobs"`
	Errors   int     `json:"errors"`
	Started  int     `json:"started"`
	Rate     float64 `json:"rate"`
	InsertPS float64 `json:"insertPS"`
	P50      float64 `json:"p50"`
	P90      float64 `json:"p90"`
	P99      float64 `json:"p99"`
	Max      float64 `json:"max"`
	Error    string  `json:"error"`

	CPU   cpuUse // "go" → the last worker started; Coord is River's process
	Stmts statementStats
}

// riverResult is the peer in one Postgres mode.
type riverResult struct {
	Burst, Steady riverPhase
	Cooldown      time.Duration
}

// buildRiverPeer builds riverpeer, the peer's program, from its own module
// (bench/dispatch/riverpeer: River is not in Podium's go.mod), once
// per run.
func buildRiverPeer(ctx context.Context, dir string) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	mod := strings.TrimSpace(string(out))
	if err != nil || mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("find the module root to build riverpeer (run from the repository, or pass -river=false): %v", err)
	}
	bin := filepath.Join(dir, "riverpeer")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin, ".")
	cmd.Dir = filepath.Join(filepath.Dir(mod), "internal", "bench", "dispatch", "riverpeer")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build riverpeer in %s: %v\n%s", cmd.Dir, err, b)
	}
	return bin, nil
}

// runRiver runs the peer against a fresh database of the cluster: the same
// burst and the same offered load as Podium's phases, each job inserted one
// at a time. Around each phase it resets the statement counts and reads the
// CPU; it tells riverpeer when to begin (see riverpeer's doc).
func runRiver(ctx context.Context, log *slog.Logger, cfg config, bin string, cluster *pgtest.Cluster, pgPID int, work string) (riverResult, error) {
	r := riverResult{Cooldown: cfg.riverCooldown}
	db, err := benchkit.OpenStatsDB(ctx, cluster, riverDBName)
	if err != nil {
		return r, err
	}
	defer db.Close()
	cmd := exec.CommandContext(ctx, bin, "-database", db.URL, "-jobs", strconv.Itoa(cfg.tasks),
		"-inserters", strconv.Itoa(cfg.submitters), "-rate", strconv.FormatFloat(cfg.rate, 'f', -1, 64),
		"-steady-time", cfg.steadyTime.String(), "-fetch-cooldown", cfg.riverCooldown.String())
	logPath := filepath.Join(work, "riverpeer.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return r, err
	}
	defer logf.Close()
	cmd.Stderr = logf
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return r, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return r, err
	}
	if err := cmd.Start(); err != nil {
		return r, err
	}
	defer func() { _ = stdin.Close(); _ = cmd.Wait() }()
	pr := probe{coordPID: cmd.Process.Pid, pgPID: pgPID}
	var began, marked cpuSnap
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		verb, rest, _ := strings.Cut(sc.Text(), " ")
		name, body, _ := strings.Cut(rest, " ")
		into := &r.Burst
		if name == "steady" {
			into = &r.Steady
		}
		switch verb {
		case "ready":
			if err := db.ResetStatements(ctx); err != nil {
				return r, err
			}
			log.Info("River peer: "+name, "jobs", map[string]int{"burst": cfg.tasks, "steady": int(cfg.rate * cfg.steadyTime.Seconds())}[name],
				"fetch cooldown", cfg.riverCooldown)
			began = pr.snap()
			if _, err := io.WriteString(stdin, "go\n"); err != nil {
				return r, err
			}
		case "mark":
			marked = pr.snap()
		case "result":
			if err := json.Unmarshal([]byte(body), into); err != nil {
				return r, fmt.Errorf("riverpeer's result %q: %w", body, err)
			}
			into.CPU = between(began, marked)
			if into.Stmts, err = statements(ctx, db, 8); err != nil {
				return r, err
			}
			log.Info("River peer: "+name+" done", "jobs/s", fmt.Sprintf("%.0f", into.Rate), "p99 ms", into.P99)
		}
	}
	_ = stdin.Close()
	if err := cmd.Wait(); err != nil {
		return r, fmt.Errorf("riverpeer: %v\n%s", err, benchkit.Tail(logPath, 20))
	}
	if r.Steady.Started == 0 {
		return r, fmt.Errorf("riverpeer ended without its results\n%s", benchkit.Tail(logPath, 20))
	}
	return r, nil
}
