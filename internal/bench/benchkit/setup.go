package benchkit

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"syscall"
	"time"

	"github.com/podiumhq/podium/internal/testenv/pgtest"
)

// FleetFlags are the flags of a benchmark that drives a simulated fleet
// against a coordinator it starts (dispatch, heartbeats): the same names and
// meanings in each, so a person who has run one can run the other.
type FleetFlags struct {
	Coordinator    string
	PerConn        int
	Inflight       int
	HelloTimeout   time.Duration
	ConnectTimeout time.Duration
	PgbenchClients int
	PgbenchTime    time.Duration
	KeepLogs       bool
}

// Register defines the flags on fs, with def's values as their defaults.
func (f *FleetFlags) Register(fs *flag.FlagSet, def FleetFlags) {
	fs.StringVar(&f.Coordinator, "coordinator", def.Coordinator, "the podium-coordinator `binary` (bin/podium-coordinator after make build); built from source when empty")
	fs.IntVar(&f.PerConn, "streams-per-conn", def.PerConn, "nodes per HTTP/2 connection (the Go server allows 250 concurrent streams per connection)")
	fs.IntVar(&f.Inflight, "inflight", def.Inflight, "at most this many Hellos waiting for their HelloAck at once")
	fs.DurationVar(&f.HelloTimeout, "hello-timeout", def.HelloTimeout, "a node gives up on a Hello after this long and retries with backoff (the agent's own value)")
	fs.DurationVar(&f.ConnectTimeout, "connect-timeout", def.ConnectTimeout, "give up waiting for every node to connect after this long and measure with what is connected")
	fs.IntVar(&f.PgbenchClients, "pgbench-clients", def.PgbenchClients, "pgbench clients for the raw-SQL reference")
	fs.DurationVar(&f.PgbenchTime, "pgbench-time", def.PgbenchTime, "how long the pgbench reference runs (0: skip it)")
	fs.BoolVar(&f.KeepLogs, "keep-logs", def.KeepLogs, "keep the coordinator's logs (and the work directory) instead of removing them at the end")
}

// Check says what is wrong with the values, for an exit status of 2.
func (f *FleetFlags) Check() error {
	if f.PerConn <= 0 || f.Inflight <= 0 || f.HelloTimeout <= 0 || f.PgbenchClients <= 0 {
		return errors.New("-streams-per-conn, -inflight, -hello-timeout and -pgbench-clients must be positive")
	}
	return nil
}

// FleetConfig is the fleet these flags describe, for creds at url.
func (f *FleetFlags) FleetConfig(url string, creds []NodeCred, interval time.Duration) FleetConfig {
	return FleetConfig{URL: url, Creds: creds, PerConn: f.PerConn, Inflight: f.Inflight, HelloTimeout: f.HelloTimeout, Interval: interval}
}

// Setup is what a fleet benchmark runs in: a work directory for logs and
// scripts, the coordinator binary, and a throwaway Postgres that loads
// pg_stat_statements.
type Setup struct {
	Work    string
	Bin     string
	Cluster *pgtest.Cluster

	log       *slog.Logger
	keep      bool
	loadStart string
}

// Start raises the open-file limit, makes the work directory, finds (or
// builds) the coordinator and starts Postgres. name prefixes the work
// directory. On an error it has undone what it did.
func Start(ctx context.Context, log *slog.Logger, name string, ff FleetFlags) (_ *Setup, err error) {
	return StartWith(ctx, log, name, ff, "shared_preload_libraries=pg_stat_statements")
}

// StartWith is Start with Postgres's settings given ("name=value", applied
// after pgtest's own, so they win): a benchmark that measures what durable
// commits cost passes fsync=on and the like.
func StartWith(ctx context.Context, log *slog.Logger, name string, ff FleetFlags, pgSettings ...string) (_ *Setup, err error) {
	RaiseFileLimit(log)
	s := &Setup{log: log, keep: ff.KeepLogs, loadStart: LoadAvg()}
	if s.Work, err = os.MkdirTemp("", "podium-bench-"+name+"-"); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	s.Bin = ff.Coordinator
	if s.Bin == "" {
		log.Info("building podium-coordinator")
		if s.Bin, err = BuildCoordinator(ctx, s.Work); err != nil {
			return nil, err
		}
	} else if _, err := os.Stat(s.Bin); err != nil {
		return nil, fmt.Errorf("-coordinator %s: %v (run `make build` first, or leave -coordinator empty to build it)", s.Bin, err)
	}
	log.Info("starting Postgres")
	if s.Cluster, err = pgtest.StartCluster(pgSettings...); err != nil {
		return nil, err
	}
	return s, nil
}

// Close stops Postgres and removes the work directory, unless asked to keep
// the logs.
func (s *Setup) Close() {
	if s.Cluster != nil {
		s.Cluster.Stop()
	}
	if s.keep {
		s.log.Info("kept the coordinator logs", "dir", s.Work)
		return
	}
	_ = os.RemoveAll(s.Work)
}

// Machine is the line every report ends with: the figures mean little
// without the machine and how busy it was.
func (s *Setup) Machine() string {
	return fmt.Sprintf("machine: %d CPUs, load average %s at the start, %s at the end (other work on the machine skews every figure)",
		runtime.NumCPU(), s.loadStart, LoadAvg())
}

// Exit prints err for the program called name and returns its exit status:
// 130 when ctx was cancelled (^C), 1 otherwise.
func Exit(ctx context.Context, name string, err error) int {
	if ctx.Err() != nil {
		fmt.Fprintf(os.Stderr, "%s: interrupted; cleaned up\n", name)
		return 130
	}
	fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
	return 1
}

// Sleep waits for d or until ctx ends, whichever is first.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// SelfCPU is this process's user+system time: the simulated fleet's cost,
// shown for context (on a small machine it competes with the coordinator).
func SelfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
