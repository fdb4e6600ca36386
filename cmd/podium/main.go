// Command podium is the command-line client of Podium: it submits tasks to a
// podium-coordinator, follows their output and exits with the task's own exit
// code, so that "podium run" can stand in for "docker run" in a script.
//
// # Exit codes
//
// podium run follows docker run's contract, because scripts written for one
// should keep working with the other:
//
//	N        the task's container exited with status N (0 included)
//	128+N    the task's process was killed by signal N (137 for SIGKILL)
//	130      the task was cancelled, or podium run was interrupted (SIGINT or
//	         SIGTERM: podium asks the coordinator to cancel the task, waits for
//	         it to end, and exits 130)
//	125      podium itself failed, not the task: bad flags or spec (nothing is
//	         sent), the coordinator could not be reached or refused the
//	         request, the task could not run at all (e.g. its image is
//	         missing: failed without an exit code), the task was lost with
//	         its node or stopped by its node's Docker engine stopping or
//	         restarting (reason "engine restarted", also without an exit
//	         code), or no coordinator answered for --reconnect-timeout
//	         while following (the task's state is then unknown)
//
// Every other command exits 0 on success, 125 when the coordinator could not
// be reached or refused the request, and 2 on a usage error (unknown command
// or flag, missing argument, or a task, node, person, secret or schedule
// named that does not exist), the convention of the flag package and most
// Unix tools. run uses 125 for usage errors too, so that 1-124 always come from the
// task. "podium logs" exits 0 once it has printed the output, whatever the
// task's exit code was: it reports on the command, not on the task (use
// "podium task get" or "podium run" for the task's code). "podium artifact
// get" exits 125 when what it received does not match the artifact's stored
// size and SHA-256 (and leaves no file behind), and 130 when interrupted.
//
// # Output
//
// The task's stdout and stderr are written to podium's stdout and stderr byte
// for byte, as each chunk arrives. Podium's own progress lines ("→ task …
// submitted", "→ running on node_…", "→ failed: exit code 3") go to stderr
// only, so "podium run … > out" captures exactly the task's stdout; --quiet
// leaves them out so that stderr is exactly the task's too. Errors of podium
// itself are lines starting with "podium: " on stderr.
//
// # Connection
//
// --server (or PODIUM_SERVER, default http://127.0.0.1:7070) names the
// coordinator; http:// URLs are spoken to with HTTP/2 without TLS, as the
// coordinator serves inside a tailnet. --token (or PODIUM_TOKEN) is sent as
// "Authorization: Bearer <token>" on every request. An https:// coordinator
// whose certificate a private CA signed is trusted with --ca-file (or
// PODIUM_CA_FILE). All may be given before or after the command name.
// "podium login" stores a server and token in ~/.config/podium/config.yaml
// ($XDG_CONFIG_HOME/podium/config.yaml, mode 0600), used when neither flag
// nor environment gives them; the stored token is sent only to the stored
// server.
// --server may list the replicas of one coordinator, comma-separated: a
// command goes to the one that answered last and moves on to the next one that
// cannot be reached; a follower (run, logs -f) whose replica dies reconnects to
// the next and resumes after the last event it printed. It gives up after
// --reconnect-timeout (PODIUM_RECONNECT_TIMEOUT, 2m) without any replica, with
// exit code 125: the task's state is then unknown, not failed. A coordinator on a tailnet needs no token: it
// knows you by your Tailscale device ("podium whoami" shows how).
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/podiumhq/podium/internal/flagsdoc"
	"github.com/podiumhq/podium/internal/version"
)

const defaultServer = "http://127.0.0.1:7070"

// Exit codes shared by every command; run's task-derived codes are in run.go.
const (
	exitOK      = 0
	exitUsage   = 2
	exitPodium  = 125
	exitCancel  = 130
	signalShift = 128
)

func main() {
	c := &cli{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv}
	os.Exit(c.main(context.Background(), os.Args[1:]))
}

// cli carries what a command may touch of the outside world, so that tests can
// run the real command functions against buffers and a fake environment.
type cli struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	// signals, when set, replaces the process's SIGINT and SIGTERM for run.
	signals <-chan os.Signal
	// minBackoff and maxBackoff bound the wait between reconnects of an event
	// stream; zero means the defaults (250 ms doubling to 5 s).
	minBackoff, maxBackoff time.Duration
	// isTerminal, when set, replaces the check that stderr is a terminal
	// (which decides whether a download draws a progress bar).
	isTerminal func() bool

	// reconnectNote, when set, replaces how often a follower repeats its
	// "→ reconnecting" line.
	reconnectNote time.Duration

	// server is one coordinator URL or several, comma-separated.
	server, token string
	// reconnectTimeout bounds how long a follower tries to reach a
	// coordinator before it gives up (--reconnect-timeout).
	reconnectTimeout time.Duration
	// file is what the config file said (podium login).
	file fileConfig
	// caFile is a PEM file of the CA that signed an https:// coordinator's
	// certificate (--ca-file, PODIUM_CA_FILE).
	caFile string
	// flagSets, when set, receives a command's flag set instead of its
	// help on --help: how the completion script learns every command's
	// flags from the flag sets themselves.
	flagSets func(*flag.FlagSet)
}

// command is one subcommand. Commands in a group ("task get") have a name of
// two words; the dispatcher matches the longest name first.
type command struct {
	name     string
	synopsis string
	summary  string
	detail   string
	// usageExit is the exit code for a usage error: run keeps 1-124 for the task.
	usageExit int
	// argsEndFlags makes the first argument end the flags, as run needs: what
	// follows is the task's command line, flags and all.
	argsEndFlags bool
	run          func(ctx context.Context, c *cli, cmd *command, args []string) int
}

// commands is the command table, in the order "podium --help" lists it. It is
// filled in init to break the reference cycle through the help command.
var commands []*command

func init() {
	commands = []*command{
		runCommand,
		logsCommand,
		tasksCommand,
		taskGetCommand,
		taskCancelCommand,
		taskRerunCommand,
		taskSendCommand,
		waitCommand,
		artifactsCommand,
		artifactGetCommand,
		nodesCommand,
		nodeGetCommand,
		nodeDrainCommand,
		nodeUndrainCommand,
		nodeSlotsCommand,
		nodeLabelCommand,
		nodeRmCommand,
		nodeRekeyCommand,
		tokenCreateCommand,
		userAddCommand,
		userLsCommand,
		userRmCommand,
		userRotateTokenCommand,
		userSetRoleCommand,
		userSetWeightCommand,
		userSetGroupsCommand,
		groupSetWeightCommand,
		groupLsCommand,
		loginCommand,
		auditCommand,
		secretSetCommand,
		secretLsCommand,
		secretGrantCommand,
		secretRevokeCommand,
		secretRmCommand,
		registryLoginCommand,
		registryLsCommand,
		registryRmCommand,
		scheduleCreateCommand,
		scheduleLsCommand,
		scheduleGetCommand,
		schedulePauseCommand,
		scheduleResumeCommand,
		scheduleRmCommand,
		scheduleRunNowCommand,
		webhookAddCommand,
		webhookLsCommand,
		webhookRmCommand,
		webhookTestCommand,
		webhookRedeliverCommand,
		whoamiCommand,
		completionCommand,
		versionCommand,
		helpCommand,
	}
}

func (c *cli) main(ctx context.Context, args []string) int {
	// Flags (parsed below) win over the environment, which wins over the
	// config file "podium login" writes.
	fc, err := c.loadConfig()
	if err != nil {
		fmt.Fprintf(c.stderr, "podium: %v\n", err)
		return exitUsage
	}
	c.server = cmp.Or(c.getenv("PODIUM_SERVER"), fc.Server, defaultServer)
	c.token = c.getenv("PODIUM_TOKEN")
	c.file = fc
	c.caFile = cmp.Or(c.getenv("PODIUM_CA_FILE"), fc.CAFile)
	c.reconnectTimeout = defaultReconnectTimeout
	if v := c.getenv("PODIUM_RECONNECT_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			fmt.Fprintf(c.stderr, "podium: PODIUM_RECONNECT_TIMEOUT=%q is not a positive duration: give one such as 2m or 30s\n", v)
			return exitUsage
		}
		c.reconnectTimeout = d
	}

	fs := flag.NewFlagSet("podium", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.addGlobalFlags(fs)
	showVersion := fs.Bool("version", false, "print podium's version and exit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			c.printTopHelp(c.stdout)
			return exitOK
		}
		fmt.Fprintf(c.stderr, "podium: %v\n\n", err)
		c.printTopHelp(c.stderr)
		return exitUsage
	}
	if *showVersion {
		return versionCommand.run(ctx, c, versionCommand, nil)
	}
	rest := fs.Args()
	if len(rest) == 0 {
		c.printTopHelp(c.stderr)
		return exitUsage
	}
	cmd, n := lookup(rest)
	if cmd == nil {
		c.unknownCommand(rest)
		return exitUsage
	}
	return cmd.run(ctx, c, cmd, rest[n:])
}

// lookup finds the command named by the first one or two words of args and
// returns how many words it used.
func lookup(args []string) (*command, int) {
	if len(args) >= 2 {
		for _, cmd := range commands {
			if cmd.name == args[0]+" "+args[1] {
				return cmd, 2
			}
		}
	}
	for _, cmd := range commands {
		if cmd.name == args[0] {
			return cmd, 1
		}
	}
	return nil, 0
}

func (c *cli) unknownCommand(args []string) {
	var group []string
	for _, cmd := range commands {
		if strings.HasPrefix(cmd.name, args[0]+" ") {
			group = append(group, cmd.name)
		}
	}
	if len(group) == 0 {
		fmt.Fprintf(c.stderr, "podium: unknown command %q\n\n", args[0])
		c.printTopHelp(c.stderr)
		return
	}
	if len(args) == 1 {
		fmt.Fprintf(c.stderr, "podium %s: which one? %s\n", args[0], strings.Join(group, ", "))
	} else {
		fmt.Fprintf(c.stderr, "podium %s: unknown command %q: want one of %s\n", args[0], args[1], strings.Join(group, ", "))
	}
	fmt.Fprintf(c.stderr, "Run 'podium help %s' for its usage.\n", group[0])
}

// addGlobalFlags registers --server, --token and --ca-file on fs. Every
// command's flag set has them too, so they work on either side of the command
// name.
// globalFlags are the flags every command takes (addGlobalFlags). A
// command's help leaves them out and points at podium help, which explains
// them once.
var globalFlags = []string{"server", "reconnect-timeout", "token", "ca-file"}

func (c *cli) addGlobalFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.server, "server", c.server, "the coordinator's `URL`, or its replicas' URLs comma-separated (env PODIUM_SERVER)")
	fs.DurationVar(&c.reconnectTimeout, "reconnect-timeout", c.reconnectTimeout,
		"how long to try to reach a coordinator again while following a task before giving up with exit code 125 (env PODIUM_RECONNECT_TIMEOUT)")
	fs.Var(secret{&c.token}, "token", "bearer `TOKEN` sent on every request (env PODIUM_TOKEN)")
	fs.StringVar(&c.caFile, "ca-file", c.caFile, "PEM `FILE` of the CA that signed an https:// coordinator's certificate (env PODIUM_CA_FILE)")
}

// secret is a string flag whose value is never printed, so that "--help" does
// not show PODIUM_TOKEN as a default to whoever is looking at the screen.
type secret struct{ p *string }

func (s secret) String() string { return "" }

func (s secret) Set(v string) error {
	*s.p = v
	return nil
}

// parseFlags parses a command's flags (plus the global ones) and returns its
// positional arguments. Commands other than run accept flags after their
// arguments too ("podium logs ID -f"), as people type them; run stops at its
// first argument, which starts the task's command line. When done is true the
// command must return code: help was asked for, or the flags were wrong and
// the usage has been printed on stderr.
func (c *cli) parseFlags(cmd *command, fs *flag.FlagSet, args []string) (rest []string, done bool, code int) {
	fs.SetOutput(io.Discard)
	c.addGlobalFlags(fs)
	for {
		if !cmd.argsEndFlags && len(args) > 0 && isNegativeNumber(args[0]) {
			// No flag is named with a digit: "-1" is an argument, for the
			// command to judge ("podium node slots node_… -1").
			rest = append(rest, args[0])
			args = args[1:]
			continue
		}
		err := fs.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			if c.flagSets != nil {
				c.flagSets(fs)
				return nil, true, exitOK
			}
			printCommandHelp(c.stdout, cmd, fs)
			return nil, true, exitOK
		}
		if err != nil {
			return nil, true, c.usageFailure(cmd, fs, err)
		}
		left := fs.Args()
		if cmd.argsEndFlags || len(left) == 0 {
			return c.checkText(cmd, fs, append(rest, left...))
		}
		if n := len(args) - len(left); n > 0 && args[n-1] == "--" {
			return c.checkText(cmd, fs, append(rest, left...))
		}
		rest = append(rest, left[0])
		args = left[1:]
	}
}

// checkText refuses flag values and arguments that are not valid UTF-8,
// naming the flag or the argument. Everything podium sends is a protobuf
// string, which must be UTF-8; left to the encoder, such a byte failed as
// an "internal" error that seemed to come from the coordinator.
func (c *cli) checkText(cmd *command, fs *flag.FlagSet, rest []string) ([]string, bool, int) {
	var bad error
	fs.Visit(func(f *flag.Flag) {
		if bad == nil && !utf8.ValidString(f.Value.String()) {
			bad = fmt.Errorf("--%s: the value is not valid UTF-8 text: give it as text (in the encoding of your terminal, UTF-8)", canonicalFlag(f))
		}
	})
	if bad == nil && c.reconnectTimeout <= 0 {
		bad = fmt.Errorf("--reconnect-timeout %s: give a positive duration, such as 2m or 30s", c.reconnectTimeout)
	}
	if bad == nil && !utf8.ValidString(c.server) {
		bad = errors.New("--server (or PODIUM_SERVER): the URL is not valid UTF-8 text")
	}
	for i, a := range rest {
		if bad != nil {
			break
		}
		if utf8.ValidString(a) {
			continue
		}
		if cmd.argsEndFlags {
			bad = fmt.Errorf("argument %d of the task's command is not valid UTF-8 text: Podium carries a command as text; "+
				"have the task make the bytes (printf '\\377') instead", i+1)
		} else {
			bad = fmt.Errorf("argument %d is not valid UTF-8 text", i+1)
		}
	}
	if bad != nil {
		return nil, true, c.usageFailure(cmd, fs, bad)
	}
	return rest, false, 0
}

// isNegativeNumber reports whether arg looks like "-1" or "-2.5" rather than a flag.
func isNegativeNumber(arg string) bool {
	return len(arg) >= 2 && arg[0] == '-' && arg[1] >= '0' && arg[1] <= '9'
}

// usageFailure reports a usage error for cmd and returns its exit code.
func (c *cli) usageFailure(cmd *command, fs *flag.FlagSet, err error) int {
	fmt.Fprintf(c.stderr, "podium %s: %v\n\n", cmd.name, err)
	printCommandHelp(c.stderr, cmd, fs)
	return cmd.usageExit
}

func printCommandHelp(w io.Writer, cmd *command, fs *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: podium %s %s\n\n%s\n", cmd.name, cmd.synopsis, cmd.summary)
	if cmd.detail != "" {
		fmt.Fprintf(w, "\n%s\n", strings.TrimSpace(cmd.detail))
	}
	if fs != nil {
		var b strings.Builder
		printFlags(&b, fs)
		if b.Len() > 0 {
			fmt.Fprintf(w, "\nFlags:\n%s", b.String())
		}
		fmt.Fprintf(w, "\nGlobal flags (--server, --token, --ca-file, --reconnect-timeout): see podium help.\n")
	}
}

// alias registers -short as another name of the flag --long, as docker run
// has -e for --env (package flagsdoc lists the two together).
func alias(fs *flag.FlagSet, short, long string) { flagsdoc.Alias(fs, short, long) }

// canonicalFlag is f's long name when f is an alias, else its own name.
func canonicalFlag(f *flag.Flag) string { return flagsdoc.Canonical(f) }

// printFlags lists a command's own flags, as all three binaries list theirs;
// the global flags are explained once, by podium help.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	flagsdoc.Print(w, fs, func(name string) bool { return slices.Contains(globalFlags, name) })
}

func (c *cli) printTopHelp(w io.Writer) {
	fmt.Fprintf(w, "podium runs containerised tasks on machines you own.\n\n")
	fmt.Fprintf(w, "Usage: podium [--server URL[,URL...]] [--token TOKEN] [--ca-file FILE] COMMAND [flags] [args]\n\nCommands:\n")
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	for _, cmd := range commands {
		fmt.Fprintf(tw, "  %s\t%s\n", cmd.name, cmd.summary)
	}
	tw.Flush()
	fmt.Fprintf(w, `
Global flags (before or after the command):
  --server URL    the coordinator, or its replicas comma-separated
                  (env PODIUM_SERVER, default %s)
  --reconnect-timeout D
                  how long run and logs -f try to reach a coordinator again
                  before exiting 125 (env PODIUM_RECONNECT_TIMEOUT, default 2m)
  --token TOKEN   sent as a bearer token on every request (env PODIUM_TOKEN)
  --ca-file FILE  the CA of an https:// coordinator's certificate, when a private
                  CA signed it (env PODIUM_CA_FILE; SSL_CERT_FILE replaces the
                  system's CAs instead)

Exit codes: podium run exits with the task's exit code, 128+N if it was killed
by signal N, 130 if it was cancelled or interrupted, and 125 if podium failed
or the task could not run. Other commands exit 0, 125 when podium failed, and
2 on a usage error (a task, node or person that does not exist
included).

Run 'podium help COMMAND' for a command's flags.
`, defaultServer)
}

var helpCommand = &command{
	name:      "help",
	synopsis:  "[COMMAND]",
	summary:   "Show help for podium or for one command.",
	usageExit: exitUsage,
	run: func(ctx context.Context, c *cli, self *command, args []string) int {
		if len(args) == 0 || args[0] == "help" && len(args) == 1 {
			c.printTopHelp(c.stdout)
			return exitOK
		}
		cmd, n := lookup(args)
		if cmd == nil {
			c.unknownCommand(args)
			return exitUsage
		}
		if cmd == self {
			c.printTopHelp(c.stdout)
			return exitOK
		}
		// Every command prints its own help, flags included, on --help.
		return cmd.run(ctx, c, cmd, append([]string{"--help"}, args[n:]...))
	},
}

var versionCommand = &command{
	name:      "version",
	synopsis:  "",
	summary:   "Print podium's version.",
	usageExit: exitUsage,
	run: func(_ context.Context, c *cli, cmd *command, args []string) int {
		fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
		rest, done, code := c.parseFlags(cmd, fs, args)
		if done {
			return code
		}
		if len(rest) > 0 {
			return c.usageFailure(cmd, fs, fmt.Errorf("unexpected argument %q", rest[0]))
		}
		fmt.Fprintf(c.stdout, "podium %s (%s, %s/%s)\n", buildVersion(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
		return exitOK
	},
}

// buildVersion prefers the version stamped by the release build, then the
// module version, then the VCS revision the binary was built from.
func buildVersion() string {
	if version.Version != "dev" {
		return version.Version
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return version.Version
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	for _, s := range info.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			return version.Version + "-" + s.Value[:12]
		}
	}
	return version.Version
}
