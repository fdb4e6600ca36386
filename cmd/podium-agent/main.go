// Command podium-agent is the Podium node agent: `enroll` once to join a
// coordinator, then `run` (under systemd) to take and run tasks.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/podiumhq/podium/agent"
	"github.com/podiumhq/podium/agent/executor"
	"github.com/podiumhq/podium/agent/identity"
	"github.com/podiumhq/podium/agent/session"
	"github.com/podiumhq/podium/agent/transport"
	"github.com/podiumhq/podium/internal/flagsdoc"
	"github.com/podiumhq/podium/internal/taskspec"
	"github.com/podiumhq/podium/internal/version"
)

// Exit codes: 2 is what flag parsing uses for a command line that is wrong,
// so scripts can tell a typo from a failure.
const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
)

const mainUsage = `podium-agent runs Podium tasks on this machine.

Usage:
  podium-agent enroll --coordinator URL --token T [--label L]... [--data-dir D] [--ca-file F] [--force]
  podium-agent run [--data-dir D] [--hostname H] [--coordinator URL]... [--ca-file F] [--max-tasks N] [--runner PATH] [--exit-on-drain] [--metrics-listen ADDR]
                   [--egress-filter=false] [--allow-egress CIDR]... [--permit-egress CIDR]... [--log-format text|json] [--log-level L]
                   [--default-cpu|--default-memory|--default-pids|--default-timeout|--default-user V]... [--max-cpu|--max-memory|--max-pids|--max-timeout V]... [--workspace-limit SIZE]
                   [--output-limit SIZE] [--max-output-limit SIZE] [--pending-memory SIZE] [--pending-disk SIZE]
  podium-agent version

Run "podium-agent COMMAND --help" for a command's flags.
The data directory defaults to $` + agent.DataDirEnv + ` or ` + agent.DefaultDataDir + `.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, mainUsage)
		return exitUsage
	}
	switch args[0] {
	case "enroll":
		return enroll(args[1:], stdout, stderr)
	case "run":
		return runAgent(args[1:], stdout, stderr)
	case "version", "--version", "-version":
		fmt.Fprintln(stdout, version.Version)
		return exitOK
	case "help", "-h", "-help", "--help":
		// help COMMAND is COMMAND --help, as podium help COMMAND is.
		if len(args) > 1 && args[1] != "help" && !strings.HasPrefix(args[1], "-") {
			return run([]string{args[1], "--help"}, stdout, stderr)
		}
		fmt.Fprint(stdout, mainUsage)
		return exitOK
	}
	fmt.Fprintf(stderr, "podium-agent: unknown command %q\nRun 'podium-agent --help' for usage.\n", args[0])
	return exitUsage
}

// stringList is a flag that may be repeated; each value may also hold
// several comma-separated items.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }

func (l *stringList) Set(v string) error {
	for _, item := range strings.Split(v, ",") {
		if item = strings.TrimSpace(item); item != "" {
			*l = append(*l, item)
		}
	}
	return nil
}

// parseRanges reads the values of a CIDR flag.
func parseRanges(flagName string, values []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(values))
	for _, v := range values {
		p, err := taskspec.ParseCIDR(v)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", flagName, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// sizeFlag is a flag that takes a byte size: a number of bytes or one with a
// unit, as taskspec.ParseSize reads it (64MiB, 1GiB, 500MB).
type sizeFlag int64

func (z *sizeFlag) String() string { return taskspec.FormatSize(int64(*z)) }

func (z *sizeFlag) Set(v string) error {
	n, err := taskspec.ParseSize(v)
	if err != nil {
		return err
	}
	*z = sizeFlag(n)
	return nil
}

// parse parses a subcommand's flags. It returns the exit code to stop with,
// or -1 to go on: --help prints the usage to stdout and succeeds, a bad flag
// prints what was wrong and the usage to stderr and exits 2.
func parse(fs *flag.FlagSet, args []string, usage string, stdout, stderr io.Writer) int {
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	printUsage := func(w io.Writer) {
		fmt.Fprint(w, usage)
		fmt.Fprint(w, "\nFlags:\n")
		flagsdoc.Print(w, fs, nil)
	}
	if errors.Is(err, flag.ErrHelp) {
		printUsage(stdout)
		return exitOK
	}
	if err != nil {
		return usageError(stderr, fs.Name(), "%v", err)
	}
	if fs.NArg() > 0 {
		return usageError(stderr, fs.Name(), "unexpected argument %q", fs.Arg(0))
	}
	return -1
}

// usageError reports a wrong command line briefly, with where the full usage
// is, and returns the usage exit code.
func usageError(stderr io.Writer, cmd, format string, a ...any) int {
	fmt.Fprintf(stderr, "podium-agent %s: %s\nRun 'podium-agent %s --help' for usage.\n", cmd, fmt.Sprintf(format, a...), cmd)
	return exitUsage
}

const enrollUsage = `Usage: podium-agent enroll --coordinator URL --token T [--label L]... [--data-dir D] [--force]

Joins this machine to a coordinator with a single-use enrollment token an
operator created, saves the node's identity in the data directory and prints
the node id. The node carries the token's labels; --label asking for others is
refused (and the token left unused) unless the token was made with
podium token create --allow-node-labels.

The agent keeps its node's disk clean: images no task here has used for
--image-gc-unused (24h) are removed, least recently used first, while the
data disk or the engine's root has less than --image-gc-low-free (20%) free,
except those a queued or running task needs and those --image-keep matches;
an image the agent never saw used counts as used when it first saw it. A
finished attempt's directory goes once its status is stored and its uploads
are done, or --keep-attempt-data later. The engine's build cache and Podium's
networks and volumes no task owns are swept at start and every hour.

Flags:
`

func enroll(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("enroll", flag.ContinueOnError)
	coordinator := fs.String("coordinator", "", "coordinator URL, e.g. http://coordinator.tailnet:8080 (required)")
	token := fs.String("token", "", "enrollment token (required; or set PODIUM_ENROLL_TOKEN, which keeps it out of the process list)")
	dataDir := fs.String("data-dir", agent.DataDirFromEnv(), "where the node's identity is kept")
	hostname := fs.String("hostname", "", "name the node reports (default: this machine's hostname)")
	force := fs.Bool("force", false, "replace an existing identity (the old node stays behind at the coordinator)")
	var labels stringList
	fs.Var(&labels, "label", "label to ask for, repeatable (also comma-separated); refused unless the token grants it or allows node labels")
	ts := tsnetFlags(fs)
	secFlags := securityFlags(fs)
	if code := parse(fs, args, enrollUsage, stdout, stderr); code >= 0 {
		return code
	}
	if *token == "" {
		*token = os.Getenv("PODIUM_ENROLL_TOKEN")
	}
	var missing []string
	if *coordinator == "" {
		missing = append(missing, "--coordinator")
	}
	if *token == "" {
		missing = append(missing, "--token")
	}
	if len(missing) > 0 {
		return usageError(stderr, "enroll", "%s is required", strings.Join(missing, " and "))
	}
	if *hostname == "" {
		*hostname, _ = os.Hostname()
	}
	sec, err := secFlags.security()
	if err == nil {
		err = secFlags.check(sec, ts, *coordinator)
	}
	if err != nil {
		fmt.Fprintf(stderr, "podium-agent enroll: %v\n", err)
		return exitFail
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, leave, err := ts.join(ctx, *dataDir, *hostname, slog.New(slog.NewTextHandler(stderr, nil)))
	if err != nil {
		fmt.Fprintf(stderr, "podium-agent enroll: %v\n", err)
		return exitFail
	}
	defer leave()
	ctx = transport.ContextWithSecurity(ctx, sec)
	id, err := identity.Enroll(ctx, identity.EnrollParams{
		DataDir:        *dataDir,
		CoordinatorURL: *coordinator,
		Token:          *token,
		Labels:         labels,
		Hostname:       *hostname,
		AgentVersion:   version.Version,
		Force:          *force,
	})
	if err != nil {
		fmt.Fprintf(stderr, "podium-agent enroll: %v\n", err)
		return exitFail
	}
	fmt.Fprintln(stdout, id.NodeID)
	fmt.Fprintf(stderr, "enrolled with %s as node %s (labels: %s); identity saved to %s\n"+
		"start the agent with `systemctl start podium-agent` (or `podium-agent run`)\n",
		id.CoordinatorURL, id.NodeID, strings.Join(id.Labels, ", "), identity.Path(*dataDir))
	return exitOK
}

const runUsage = `Usage: podium-agent run [--data-dir D] [--hostname H] [--coordinator URL]... [--max-tasks N] [--runner PATH] [--exit-on-drain] [--metrics-listen ADDR]
                        [--egress-filter=false] [--allow-egress CIDR]... [--permit-egress CIDR]... [--log-format text|json] [--log-level L]
                        [--default-cpu|--default-memory|--default-pids|--default-timeout|--default-user V]...
                        [--max-cpu|--max-memory|--max-pids|--max-timeout V]... [--workspace-limit SIZE]
                        [--output-limit SIZE] [--max-output-limit SIZE] [--pending-memory SIZE] [--pending-disk SIZE]
                        [--disk-full-after DURATION] [--fd-wait DURATION] [--network-pool N] [--allow-privileged-sidecars]
                        [--nvidia-smi PATH]

Connects to the coordinator the node enrolled with and runs the tasks it is
given in the local Docker engine, until SIGTERM or SIGINT. Tasks keep running
when the agent stops: their output goes on into files under the data
directory, and the agent resumes them, at the byte it had reached, when it
starts again. To take a node out of service, drain it (podium node drain) and
let the agent exit with --exit-on-drain once its last task has ended.

Every container runs podium-runner (installed next to podium-agent, or given
with --runner) as its first process; it must be a static binary.

Tasks cannot reach link-local addresses (169.254.0.0/16: cloud metadata),
this machine's own addresses or the tailnet (100.64.0.0/10,
fd7a:115c:a1e0::/48): the agent refuses them with iptables rules on each
task's network, so it needs root and iptables. --allow-egress opens a range
for every task; --permit-egress lets a task's spec open one with
allow_egress. --egress-filter=false turns the rules off.

Every task runs under limits: its spec's, or the --default-* ones for each
it leaves out. The --max-* flags bound what one task may ask for; the node
reports them, and the scheduler sends larger tasks elsewhere. Each limit flag
may also be set by the environment variable named in its description, as
/etc/podium/agent.env does.

A task's output is capped per attempt (--output-limit, or the spec's
output_limit up to --max-output-limit): past it, the rest is dropped with a
note and the task runs on. Output waiting for the coordinator is bounded in
memory (--pending-memory) and on disk (--pending-disk); past either, tasks
that print are slowed down until the coordinator has stored what they
printed. Sizes are bytes or take a unit: 100MiB, 1GiB, 500MB.

A task whose output finds the data disk full waits, blocked on its next
write, for --disk-full-after (5m); if the disk is still full then, the task
is stopped and fails with a reason starting "node disk full", keeping the
output written before. Meanwhile its log says it is paused, since when, and
when it fails unless space frees.

While the data disk has less than --min-free-disk-mb free (1024 MiB; 0: no
floor) the node takes no new tasks: it reports the floor, and since when it
is below it, with its heartbeats, so the scheduler places nothing there and a
task that waits for it says why (podium task get); an assignment that reaches
it anyway is given back, not failed. A finished attempt's directory goes as
soon as the coordinator has stored its status, which is what usually frees
the disk.

While the Docker engine does not answer a ping (asked with every heartbeat
and before each task, at most every 2s) the node takes no new tasks in the
same way: its heartbeats say since when, and an assignment is given back.

A task starts only while the agent has file descriptors to spare (about 6
while it starts, 4 while it runs, and some for the agent's own work). One
that finds too few waits for running tasks to free some, for --fd-wait (1m),
then fails with a reason starting "node out of file descriptors" that says
to raise LimitNOFILE in the unit (or lower --max-tasks).

A sidecar whose spec says privileged: true (a docker:dind sidecar a task
builds images against) runs only on a node started with
--allow-privileged-sidecars. A privileged container can do anything root can
on this machine, so allow it only on nodes whose every user you trust with
that. The node reports the flag; the scheduler sends such tasks only to nodes
that set it, and a node without it refuses one. The task's own container is
never privileged.

Creating a task's private network is the slowest step of starting it, so the
agent keeps --network-pool networks (2) made ahead of the tasks; each is
still one task's alone and removed after it. Each holds one of the engine's
address pools while it waits; 0 creates every task's network as it starts.

The node's NVIDIA GPUs are found with nvidia-smi (on PATH, or --nvidia-smi)
at start and again on SIGHUP (systemctl kill --signal=HUP podium-agent), and offered to
tasks one by one: a task asking N GPUs gets N of them, by UUID, alone.
Without nvidia-smi the node has no GPUs.

Flags:
`

// runAgent is `podium-agent run`, in its phases: parse the command line,
// check it against the node's identity and the security settings, build the
// agent, run it.
func runAgent(args []string, stdout, stderr io.Writer) int {
	f := newRunFlags()
	if code := parse(f.fs, args, runUsage, stdout, stderr); code >= 0 {
		return code
	}
	cfg, err := f.config(stderr)
	if err != nil {
		return usageError(stderr, "run", "%v", err)
	}
	log := cfg.Logger
	sec, code := f.security(log, stderr)
	if code >= 0 {
		return code
	}
	a, err := agent.New(cfg)
	if err != nil {
		log.Error("podium agent cannot start", "err", err)
		return exitFail
	}
	return f.run(a, sec, log)
}

// runFlags are the flags of `podium-agent run`.
type runFlags struct {
	fs *flag.FlagSet

	dataDir, hostname, runnerPath, logFormat, logLevel, metricsListen, nvidiaSMI *string
	coordinators, allowEgress, permitEgress                                      stringList
	maxTasks, networkPool                                                        *int
	minFreeDisk                                                                  *int64
	exitOnDrain, egressFilter, allowPrivileged                                   *bool
	outputLimit, maxOutputLimit, pendingMemory, pendingDisk                      sizeFlag
	diskFullAfter, fdWait                                                        *time.Duration

	ts         *tsnetOptions
	limitFlags *limitFlags
	secFlags   *securityOptions
	dFlags     *diskFlagSet
}

// newRunFlags declares the flags of `podium-agent run`.
func newRunFlags() *runFlags {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	f := &runFlags{fs: fs}
	f.dataDir = fs.String("data-dir", agent.DataDirFromEnv(), "where the node's identity is kept")
	f.hostname = fs.String("hostname", "", "name the node reports (default: the one given at enrollment, else this machine's hostname)")
	fs.Var(&f.coordinators, "coordinator", "another coordinator `URL` to try when the enrolled one cannot be reached, after it and before the replicas it named (repeatable)")
	f.maxTasks = fs.Int("max-tasks", 0, "tasks to run at once (0: one per CPU)")
	f.minFreeDisk = fs.Int64("min-free-disk-mb", agent.DefaultMinFreeDiskMB,
		"the data disk's free-space floor in MiB: below it the node takes no new tasks, and says so (0: no floor)")
	f.runnerPath = fs.String("runner", "", "the podium-runner binary (default: podium-runner next to podium-agent)")
	f.exitOnDrain = fs.Bool("exit-on-drain", false, "exit 0 once the node is draining and its last task has ended")
	f.logFormat = fs.String("log-format", "text", "log format: text or json")
	f.logLevel = fs.String("log-level", "info", "log level: debug, info, warn or error")
	f.metricsListen = fs.String("metrics-listen", os.Getenv("PODIUM_AGENT_METRICS_LISTEN"),
		"serve Prometheus metrics at /metrics on this address, e.g. 127.0.0.1:9464 (PODIUM_AGENT_METRICS_LISTEN; empty: off)")
	f.egressFilter = fs.Bool("egress-filter", true, "refuse tasks connections to link-local (cloud metadata), this host's and tailnet addresses (needs root and iptables)")
	fs.Var(&f.allowEgress, "allow-egress", "let every task reach the `CIDR` range the egress filter refuses otherwise (repeatable)")
	fs.Var(&f.permitEgress, "permit-egress", "let a task's spec open the `CIDR` range with allow_egress (repeatable)")
	f.networkPool = fs.Int("network-pool", executor.DefaultNetworkPool, "task networks to keep made ahead of the tasks, so they start sooner (0: none)")
	f.allowPrivileged = fs.Bool("allow-privileged-sidecars", false,
		"run sidecars whose spec asks privileged: true (Docker-in-Docker); a privileged container is root on this machine")
	f.nvidiaSMI = fs.String("nvidia-smi", "", "the nvidia-smi that finds the node's GPUs, at start and on SIGHUP (default: nvidia-smi on PATH; none: no GPUs)")
	f.outputLimit = sizeFlag(executor.DefaultOutputLimit)
	fs.Var(&f.outputLimit, "output-limit", "the output an attempt keeps when its spec sets none; past it the rest is dropped with a note")
	fs.Var(&f.maxOutputLimit, "max-output-limit", "the most output a spec may ask for (default: --output-limit); the scheduler places no task asking more here")
	f.pendingMemory = sizeFlag(session.DefaultMaxPendingBytes)
	fs.Var(&f.pendingMemory, "pending-memory", "task output held in memory until the coordinator stores it; past it tasks are slowed down")
	f.pendingDisk = sizeFlag(session.DefaultMaxSpoolBytes)
	fs.Var(&f.pendingDisk, "pending-disk", "task events kept in the spool until the coordinator stores them; past it tasks are slowed down")
	f.diskFullAfter = fs.Duration("disk-full-after", executor.DefaultDiskFullAfter,
		"how long a task's output may find the data disk full before the task is stopped (\"node disk full\"); between 1s and 24h")
	f.fdWait = fs.Duration("fd-wait", executor.DefaultFDWait,
		"how long a task that finds too few file descriptors to start waits for running tasks to free some before it fails (\"node out of file descriptors\"); between 1s and 24h")
	f.ts = tsnetFlags(fs)
	f.limitFlags = taskLimitFlags(fs)
	f.secFlags = securityFlags(fs)
	f.dFlags = diskFlags(fs)
	return f
}

// config checks the parsed flags and turns them into the agent's Config,
// with a logger that writes to stderr. Its error is a usage error.
func (f *runFlags) config(stderr io.Writer) (agent.Config, error) {
	fail := func(format string, a ...any) (agent.Config, error) { return agent.Config{}, fmt.Errorf(format, a...) }
	for name, v := range map[string]sizeFlag{"output-limit": f.outputLimit, "pending-memory": f.pendingMemory, "pending-disk": f.pendingDisk} {
		if v <= 0 {
			return fail("--%s %s: give a size above 0, e.g. 64MiB", name, v.String())
		}
	}
	if *f.nvidiaSMI != "" {
		if st, err := os.Stat(*f.nvidiaSMI); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			return fail("--nvidia-smi %s: not an executable file; give the path of nvidia-smi, or leave the flag out to use the one on PATH", *f.nvidiaSMI)
		}
	}
	if *f.minFreeDisk < 0 {
		return fail("--min-free-disk-mb %d: give 0 (no floor) or more, e.g. 1024", *f.minFreeDisk)
	}
	if *f.diskFullAfter < time.Second || *f.diskFullAfter > 24*time.Hour {
		return fail("--disk-full-after %s: give a duration between 1s and 24h, e.g. 5m", *f.diskFullAfter)
	}
	if *f.fdWait < time.Second || *f.fdWait > 24*time.Hour {
		return fail("--fd-wait %s: give a duration between 1s and 24h, e.g. 1m", *f.fdWait)
	}
	maxOutputLimit := f.maxOutputLimit
	if maxOutputLimit == 0 {
		maxOutputLimit = f.outputLimit
	}
	if maxOutputLimit < f.outputLimit {
		return fail("--max-output-limit %s is less than --output-limit %s: a spec could not even ask for the default", maxOutputLimit.String(), f.outputLimit.String())
	}
	if int64(f.pendingMemory) > math.MaxInt32 {
		return fail("--pending-memory %s: give at most 2GiB", f.pendingMemory.String())
	}
	if *f.networkPool < 0 {
		return fail("--network-pool %d: give the number of networks to keep ready, or 0 for none", *f.networkPool)
	}
	if *f.maxTasks < 0 {
		return fail("--max-tasks %d: use a positive number, or 0 for one per CPU", *f.maxTasks)
	}
	allow, err := parseRanges("--allow-egress", f.allowEgress)
	if err != nil {
		return agent.Config{}, err
	}
	permit, err := parseRanges("--permit-egress", f.permitEgress)
	if err != nil {
		return agent.Config{}, err
	}
	if !*f.egressFilter && len(allow)+len(permit) > 0 {
		return fail("--allow-egress and --permit-egress open ranges of the egress filter, which --egress-filter=false turns off: give one or the other")
	}
	limits, err := f.limitFlags.limits(measureMachine())
	if err != nil {
		return agent.Config{}, err
	}
	disk, err := f.dFlags.settings()
	if err != nil {
		return agent.Config{}, err
	}
	log, err := f.logger(stderr)
	if err != nil {
		return agent.Config{}, err
	}
	return agent.Config{
		DataDir:        *f.dataDir,
		Hostname:       *f.hostname,
		Coordinators:   f.coordinators,
		MaxTasks:       *f.maxTasks,
		MinFreeDiskMB:  *f.minFreeDisk,
		DiskFullAfter:  *f.diskFullAfter,
		FDWait:         *f.fdWait,
		Logger:         log,
		RunnerPath:     *f.runnerPath,
		ExitOnDrain:    *f.exitOnDrain,
		MetricsListen:  *f.metricsListen,
		EgressFilter:   *f.egressFilter,
		AllowEgress:    allow,
		PermitEgress:   permit,
		Limits:         limits,
		OutputLimit:    int64(f.outputLimit),
		MaxOutputLimit: int64(maxOutputLimit),
		PendingMemory:  int(f.pendingMemory),
		PendingDisk:    int64(f.pendingDisk),

		ImageGCUnused:   disk.unused,
		ImageGCLowFree:  disk.lowFree,
		ImageKeep:       disk.keep,
		KeepAttemptData: disk.keepData,
		NetworkPool:     *f.networkPool,

		AllowPrivilegedSidecars: *f.allowPrivileged,
		NvidiaSMI:               *f.nvidiaSMI,
	}, nil
}

// logger is the logger --log-format and --log-level ask for.
func (f *runFlags) logger(stderr io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(*f.logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level %q: use debug, info, warn or error", *f.logLevel)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch *f.logFormat {
	case "text":
		return slog.New(slog.NewTextHandler(stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(stderr, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: use text or json", *f.logFormat)
}

// security reads the security settings and checks every coordinator the
// agent may dial against them: the enrolled one (from the node's identity)
// and those --coordinator names. It returns the exit code to stop with, or
// -1 to go on.
func (f *runFlags) security(log *slog.Logger, stderr io.Writer) (transport.Security, int) {
	sec, err := f.secFlags.security()
	if err != nil {
		log.Error("podium agent cannot start", "err", err)
		return sec, exitFail
	}
	// The coordinator's URL is the enrolled one; an identity that does not
	// load is agent.New's to explain.
	if id, err := identity.Load(*f.dataDir); err == nil {
		if err := f.secFlags.check(sec, f.ts, id.CoordinatorURL); err != nil {
			log.Error("podium agent cannot start", "err", err)
			return sec, exitFail
		}
	}
	for _, c := range f.coordinators {
		if _, err := transport.NormalizeURL(c); err != nil {
			return sec, usageError(stderr, "run", "--coordinator %q: %v", c, err)
		}
		if err := f.secFlags.check(sec, f.ts, c); err != nil {
			log.Error("podium agent cannot start", "err", err)
			return sec, exitFail
		}
	}
	return sec, -1
}

// run joins the tailnet when asked to and runs the agent until SIGTERM or
// SIGINT.
func (f *runFlags) run(a *agent.Agent, sec transport.Security, log *slog.Logger) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, leave, err := f.ts.join(ctx, *f.dataDir, "", log)
	if err != nil {
		log.Error("podium agent cannot join the tailnet", "err", err)
		return exitFail
	}
	defer leave()
	// Every connection the agent makes to a coordinator follows the
	// security settings, through ctx (see transport.ContextWithSecurity).
	ctx = transport.ContextWithSecurity(ctx, sec)
	if err := a.Run(ctx); err != nil {
		log.Error("podium agent failed", "err", err)
		return exitFail
	}
	return exitOK
}
