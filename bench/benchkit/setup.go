package benchkit

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"github.com/podiumhq/podium/test/testenv/pgtest"
)

// FleetFlags are the flags of a benchmark that drives a simulated fleet
// against a coordinator it starts (dispatch, heartbeats): the same names and
// meanings in each, so a person who has run one can run the other.
type FleetFlags struct {
	Coordinator string
	// PerConn is how many nodes share one connection; 1 (one connection
	// per node, as real agents have) unless a benchmark says otherwise.
	PerConn int
	// TLS serves the coordinator over HTTPS with a throwaway certificate,
	// as a fleet reaching it across a network would.
	TLS bool
	// Durable runs Postgres with production's durability (DurableSettings)
	// instead of pgtest's fast test settings.
	Durable        bool
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
	if def.PerConn <= 0 {
		def.PerConn = 1
	}
	fs.IntVar(&f.PerConn, "streams-per-conn", def.PerConn, "nodes per HTTP/2 connection: 1 is one connection per node, as real agents have; more shares one (the Go server allows 250 concurrent streams per connection)")
	fs.BoolVar(&f.TLS, "tls", def.TLS, "serve the coordinator over HTTPS (a throwaway certificate), as a fleet reaching it across a network would")
	fs.BoolVar(&f.Durable, "durable", def.Durable, "Postgres with fsync, synchronous_commit and full_page_writes on, as in production; false: pgtest's fast test settings (all three off), labelled in the report")
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

// DurableSettings are production's durability, which pgtest turns off for
// speed: every commit waits for its WAL to reach the disk, and a page's first
// change after a checkpoint writes the whole page.
var DurableSettings = []string{"fsync=on", "synchronous_commit=on", "full_page_writes=on"}

// fleetLocks sizes Postgres's lock table for a fleet, as docs/operations.md
// tells operators to: every node a replica holds is one advisory lock (its
// lease), and the table holds max_locks_per_transaction × (max_connections +
// max_prepared_transactions) locks shared by every query. pgtest's 300
// connections × the default 64 ran out near 34,000 nodes ("out of shared
// memory"), failing every query on the server. A replica holds at most half
// the table (nodes.Config.MaxNodes), so 50,000 nodes need 512.
const fleetLocks = "max_locks_per_transaction=512"

// Setup is what a fleet benchmark runs in: a work directory for logs and
// scripts, the coordinator binary, a throwaway Postgres that loads
// pg_stat_statements, and the TLS certificate when the coordinator serves
// HTTPS.
type Setup struct {
	Work    string
	Bin     string
	Cluster *pgtest.Cluster
	// TLS is the coordinator's certificate; nil when it serves plain HTTP.
	TLS *TLSFiles
	// FileLimit is this process's open-file limit after raising it, which
	// the coordinator inherits: neither can hold more connections.
	FileLimit uint64

	flags     FleetFlags
	log       *slog.Logger
	keep      bool
	loadStart string
}

// Start raises the open-file limit, makes the work directory, finds (or
// builds) the coordinator and starts Postgres (durable when ff.Durable).
// name prefixes the work directory. On an error it has undone what it did.
func Start(ctx context.Context, log *slog.Logger, name string, ff FleetFlags) (_ *Setup, err error) {
	pg := []string{"shared_preload_libraries=pg_stat_statements"}
	if ff.Durable {
		pg = append(pg, DurableSettings...)
	}
	return StartWith(ctx, log, name, ff, pg...)
}

// StartWith is Start with Postgres's settings given ("name=value", applied
// after pgtest's own, so they win): a benchmark that measures what durable
// commits cost passes fsync=on and the like.
func StartWith(ctx context.Context, log *slog.Logger, name string, ff FleetFlags, pgSettings ...string) (_ *Setup, err error) {
	s := &Setup{log: log, keep: ff.KeepLogs, loadStart: LoadAvg(), flags: ff, FileLimit: RaiseFileLimit(log)}
	if s.Work, err = os.MkdirTemp("", "podium-bench-"+name+"-"); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if ff.TLS {
		if s.TLS, err = NewTLSFiles(s.Work); err != nil {
			return nil, err
		}
	}
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
	if s.Cluster, err = pgtest.StartCluster(append([]string{fleetLocks}, pgSettings...)...); err != nil {
		return nil, err
	}
	return s, nil
}

// fdReserve is what a process keeps of its open-file limit for what is not a
// node's connection: Postgres connections, listeners, logs, pgbench's pipes.
const fdReserve = 1000

// StartCoordinator starts the coordinator (StartCoordinatorTLS) over HTTPS
// when the flags say -tls, allowing it as many connections as its open-file
// limit can hold, so that the bound a fleet meets is the machine's, named in
// the report, and not a default chosen for another fleet.
func (s *Setup) StartCoordinator(ctx context.Context, dbURL, logPath string, env []string, extra ...string) (*Coordinator, error) {
	if s.FileLimit > fdReserve {
		extra = append([]string{"--max-connections", strconv.FormatUint(s.FileLimit, 10)}, extra...)
	}
	return StartCoordinatorTLS(ctx, s.Bin, dbURL, logPath, s.TLS, env, extra...)
}

// FleetConfig is the fleet the flags describe, for creds at coord: one
// connection per node unless -streams-per-conn says otherwise or the
// open-file limit cannot hold that many, in which case the nodes share as few
// connections as fit and Shared says why, for the report.
func (s *Setup) FleetConfig(coord *Coordinator, creds []NodeCred, interval time.Duration) FleetConfig {
	fc := s.flags.FleetConfig(coord.URL, creds, interval)
	fc.TLS = coord.TLS
	room := int(min(s.FileLimit, 1<<30)) - fdReserve
	if need := (len(creds) + fc.PerConn - 1) / fc.PerConn; s.FileLimit > 0 && room > 0 && need > room {
		fc.PerConn = (len(creds) + room - 1) / room
		fc.Shared = fmt.Sprintf("%d nodes need %d connections at %d per connection, but the open-file limit is %d "+
			"(the hard RLIMIT_NOFILE; raising it needs CAP_SYS_RESOURCE), in this process and in the coordinator alike: "+
			"%d nodes share each connection instead", len(creds), need, s.flags.PerConn, s.FileLimit, fc.PerConn)
	}
	return fc
}

// Postgres says which Postgres settings the figures were measured with.
func (s *Setup) Postgres() string { return PostgresLine(s.flags.Durable) }

// PostgresLine is the line a report prints to say which Postgres settings
// its figures were measured with.
func PostgresLine(durable bool) string {
	if durable {
		return "Postgres: durable (fsync, synchronous_commit, full_page_writes on: production's settings)"
	}
	return "Postgres: FAST test settings (fsync, synchronous_commit, full_page_writes off; -durable=false), not production's"
}

// PostgresSettings are the settings to start Postgres with: production's
// durability (DurableSettings) when durable, pgtest's fast ones otherwise.
func PostgresSettings(durable bool) []string {
	if durable {
		return DurableSettings
	}
	return nil
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
