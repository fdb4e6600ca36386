package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/internal/statusline"
	"github.com/podiumhq/podium/internal/taskspec"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

var runCommand = &command{
	name:     "run",
	synopsis: "[flags] [--] [CMD [ARG...]]",
	summary:  "Run a task, print its output, and exit with its exit code.",
	detail: `
Submits a task to the coordinator and follows it until it ends: the task's
stdout and stderr are copied to podium's byte for byte, podium's own progress
goes to stderr as lines starting with "→ ". CMD replaces the image's entrypoint
and command; put "--" before it when it has flags of its own.

The flags are docker run's where Docker has one (-e, -d, -w, -u, -m, --cpus,
--name), and each overrides its field of --spec: --image, --name, --workdir,
--timeout, --queue-timeout, --priority, --user, --pull, --output-limit,
--retain, --cpus, --memory, --gpus and --concurrency-key replace theirs,
--retry N sets retry.attempts to N+1 (every run counts, the first too), --env
sets one variable each (replacing the file's value for that key), --label
adds to the file's labels, --cap-add to its capabilities, --allow-egress to
its allow_egress, --secret to its secrets (replacing the file's entry for
that secret), and CMD replaces its command. Sidecars, artifacts (globs),
which failures retry and a concurrency limit above 1 are given in the spec
file.

With retry in the spec, a failed attempt may be followed by another after a
backoff: podium run follows them all, each retry announced by a line such as
"→ queued: attempt 2 of 3 after exit code 1, in 10 s", and exits with the
last attempt's exit code.

The task runs with every Linux capability dropped; --cap-add CAP gives one
back, from Docker's default set only (CHOWN, KILL, NET_BIND_SERVICE, ...;
with or without CAP_, any case).

Nodes refuse tasks connections to link-local (cloud metadata), their own and
tailnet addresses; --allow-egress CIDR asks for one of those ranges anyway,
and the task then runs only on nodes that permit it (podium-agent
--permit-egress).

--pull says when the node pulls the image: if-not-present, always (a
re-pushed tag is picked up) or never; without it, always for :latest or no
tag, if-not-present otherwise.
--secret NAME[=ENV] gives the task a secret an admin stored with podium
secret set, in the variable ENV (default: NAME upper-cased with - as _, so
db-password is DB_PASSWORD); a spec file can also put one in a file under
/run/secrets. Only the name is stored with the task; a task naming a secret
that does not exist is refused. The value is visible to whoever can run
docker inspect on the node.

--queue-timeout DURATION fails the task if it is still queued that long
without a node (each time it is queued), saying why it waited; without it,
the coordinator's --queue-timeout applies (none unless set). While it waits,
a task no node could ever run (its labels, a node's limits, its GPUs, its
size) is said to be so: "→ unschedulable: cannot run on any node: …".

The spec is checked before anything is sent; a bad one exits 125.
On Ctrl-C (or SIGTERM) podium asks the coordinator to cancel the task, shows
it ending, and exits 130; a second Ctrl-C stops waiting.

Exit code: the task's own; 128+N if killed by signal N; 130 if cancelled or
interrupted; 125 if podium failed or the task could not run (e.g. its image
is missing) or was lost with its node or stopped by its node's Docker engine
restarting (reason "engine restarted"), or waited in the queue past its
queue timeout, or if no coordinator answered for
--reconnect-timeout while following (the task's state is then unknown: see
podium task get ID).

Example:
  podium run --image alpine:3 -- sh -c 'echo hi; exit 3'`,
	usageExit:    exitPodium,
	argsEndFlags: true,
	run:          runRun,
}

// runOptions are run's flags, kept apart from the flag set so that spec
// building can be tested without parsing.
type runOptions struct {
	image        string
	specFile     string
	timeout      string
	queueTimeout string
	retain       string
	user         string
	pull         string
	priority     int
	env          stringList
	labels       stringList
	capAdd       stringList
	egress       stringList
	secrets      stringList
	detach       bool
	quiet        bool
	command      []string

	// name, workdir, cpus and memory are --name, --workdir, --cpus and
	// --memory (a size, as docker run takes it: 512m, 2g, or 512MiB).
	name    string
	workdir string
	cpus    float64
	memory  string
	// retry is --retry N: up to N more tries after a failure.
	retry int
	// concurrencyKey is --concurrency-key: one task per key at a time.
	concurrencyKey string

	// outputLimit is --output-limit, a size such as 100MiB.
	outputLimit string
	// gpus, gpuModel and gpuMemory are --gpus, --gpu-model and --gpu-memory
	// (a size such as 80GiB).
	gpus      int
	gpuModel  string
	gpuMemory string
	// set holds the names of the flags given on the command line: only those
	// override the spec file (an absent --priority must not reset the file's
	// priority to 0).
	set map[string]bool
}

func newRunFlags(fs *flag.FlagSet) *runOptions {
	o := &runOptions{}
	fs.StringVar(&o.image, "image", "", "the container `IMAGE` to run, e.g. alpine:3")
	fs.StringVar(&o.name, "name", "", "call the task `NAME` in lists and the console (not unique; podium tasks --name finds it)")
	fs.Var(&o.env, "env", "set an environment variable, `KEY=VALUE` (repeatable)")
	alias(fs, "e", "env")
	fs.StringVar(&o.workdir, "workdir", "", "run the command in `DIR`, an absolute path inside the container")
	alias(fs, "w", "workdir")
	fs.Float64Var(&o.cpus, "cpus", 0, "limit the task to `N` CPU cores, fractions allowed (only nodes with N free run it)")
	fs.StringVar(&o.memory, "memory", "", "limit the task's memory to `SIZE`, as docker run takes it: 512m, 2g, or 512MiB (only nodes with it free run it)")
	alias(fs, "m", "memory")
	fs.IntVar(&o.retry, "retry", 0, "try a failed task up to `N` more times, after a backoff (spec.retry for which failures and how long)")
	fs.StringVar(&o.concurrencyKey, "concurrency-key", "", "run at most one task with this `KEY` at a time across the fleet; others queue (spec.concurrency for a limit)")
	fs.Var(&o.labels, "label", "run only on a node with the `LABEL`, key or key=value (repeatable)")
	fs.Var(&o.capAdd, "cap-add", "add the Linux capability `CAP` back, e.g. NET_BIND_SERVICE (repeatable)")
	fs.Var(&o.egress, "allow-egress", "let the task reach the `CIDR` range, which nodes block by default (repeatable; only nodes that permit it run the task)")
	fs.Var(&o.secrets, "secret", "give the task the stored secret `NAME[=ENV]` (podium secret set) in the variable ENV, by default NAME upper-cased with - as _ (repeatable)")
	fs.StringVar(&o.specFile, "spec", "", "read the task from the YAML spec `FILE` (- for stdin)")
	fs.StringVar(&o.timeout, "timeout", "", "kill the task `DURATION` after it starts, e.g. 10m")
	fs.StringVar(&o.queueTimeout, "queue-timeout", "", "fail the task if it is still queued `DURATION` without a node, e.g. 30m (default: the coordinator's --queue-timeout)")
	fs.StringVar(&o.retain, "retain", "", "keep the task, its log and artifacts `DURATION` after it ends, e.g. 7d, 1y, 36h (default: the coordinator's --retain-tasks)")
	fs.IntVar(&o.priority, "priority", 0, "scheduling priority `N` (any 32-bit integer)")
	fs.StringVar(&o.user, "user", "", "run the command as `USER`: a UID, UID:GID or a name the image knows (default: the node's --default-user, else the image's)")
	alias(fs, "u", "user")
	fs.StringVar(&o.pull, "pull", "", "when the node pulls the image, `POLICY`: if-not-present, always or never (default: always for :latest or no tag, else if-not-present)")
	fs.StringVar(&o.outputLimit, "output-limit", "", "keep at most `SIZE` of the task's output, e.g. 100MiB; the rest is dropped with a note (default: the node's, 1 GiB unless set)")
	fs.IntVar(&o.gpus, "gpus", 0, "give the task `N` whole GPUs, each its own (only nodes with N free GPUs run it)")
	fs.StringVar(&o.gpuModel, "gpu-model", "", "count only GPUs whose name matches `GLOB`, e.g. \"NVIDIA H100*\" (with --gpus)")
	fs.StringVar(&o.gpuMemory, "gpu-memory", "", "count only GPUs with at least `SIZE` of memory each, e.g. 80GiB (with --gpus)")
	fs.BoolVar(&o.detach, "detach", false, "print the task id on stdout and exit without following")
	alias(fs, "d", "detach")
	fs.BoolVar(&o.quiet, "quiet", false, "leave out podium's \"→\" progress lines")
	return o
}

func runRun(ctx context.Context, c *cli, cmd *command, args []string) int {
	fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	o := newRunFlags(fs)
	rest, done, code := c.parseFlags(cmd, fs, args)
	if done {
		return code
	}
	o.command = rest
	o.set = setFlags(fs)
	spec, err := o.buildSpec(c.stdin)
	if err != nil {
		fmt.Fprintf(c.stderr, "podium: %v\n", err)
		return exitPodium
	}
	cl, err := newClient(c.server, c.tokenFor(), c.caFile)
	if err != nil {
		fmt.Fprintf(c.stderr, "podium: %v\n", err)
		return exitPodium
	}
	return c.runTask(ctx, cl, spec, o)
}

// buildSpec reads --spec (if given), applies the flags over it and validates
// the result, so that a bad task is refused before anything is sent.
func (o *runOptions) buildSpec(stdin io.Reader) (*podiumv1.TaskSpec, error) {
	spec := &podiumv1.TaskSpec{}
	if o.specFile != "" {
		var err error
		if spec, err = readSpec(o.specFile, stdin); err != nil {
			return nil, err
		}
	}
	if o.set["image"] {
		spec.Image = o.image
	}
	if o.set["name"] {
		if !taskspec.ValidName(o.name) {
			return nil, fmt.Errorf("--name %q is not a task name: use letters, digits and . _ - : / +, starting with a letter or digit, at most %d bytes (e.g. deploy-web)", o.name, taskspec.MaxNameBytes)
		}
		spec.Name = o.name
	}
	if o.set["workdir"] {
		if !strings.HasPrefix(o.workdir, "/") {
			return nil, fmt.Errorf("--workdir %q is relative: give an absolute path inside the container, e.g. /workspace", o.workdir)
		}
		spec.WorkingDir = o.workdir
	}
	if err := o.applyResources(spec); err != nil {
		return nil, err
	}
	if o.set["retry"] {
		if o.retry < 0 || o.retry >= taskspec.MaxAttempts {
			return nil, fmt.Errorf("--retry %d is out of range: give how many more tries a failed task gets, 0 to %d", o.retry, taskspec.MaxAttempts-1)
		}
		if spec.Retry == nil {
			spec.Retry = &podiumv1.RetryPolicy{}
		}
		// retry.attempts counts every run, the first one too.
		spec.Retry.Attempts = int32(o.retry) + 1
		spec.MaxAttempts = 0
	}
	if o.set["concurrency-key"] {
		if spec.Concurrency == nil {
			spec.Concurrency = &podiumv1.Concurrency{}
		}
		spec.Concurrency.Key = o.concurrencyKey
	}
	for _, e := range o.env {
		k, v, err := taskspec.ParseEnv(e)
		if err != nil {
			return nil, err
		}
		if spec.Env == nil {
			spec.Env = map[string]string{}
		}
		spec.Env[k] = v
	}
	for _, v := range o.secrets {
		ref, err := taskspec.ParseSecretFlag(v)
		if err != nil {
			return nil, err
		}
		// The flag replaces the file's reference to the same secret.
		spec.Secrets = slices.DeleteFunc(spec.Secrets, func(r *podiumv1.SecretRef) bool { return r.GetName() == ref.GetName() })
		spec.Secrets = append(spec.Secrets, ref)
	}
	for _, l := range o.labels {
		if problem := taskspec.LabelProblem(l); problem != "" {
			return nil, fmt.Errorf("--label: %s", problem)
		}
		if !slices.Contains(spec.Labels, l) {
			spec.Labels = append(spec.Labels, l)
		}
	}
	for _, c := range o.capAdd {
		n, err := taskspec.NormalizeCapability(c)
		if err != nil {
			return nil, fmt.Errorf("--cap-add: %v", err)
		}
		// Validate below rewrites the file's names and drops repeats.
		spec.Capabilities = append(spec.Capabilities, n)
	}
	for _, r := range o.egress {
		if _, err := taskspec.ParseCIDR(r); err != nil {
			return nil, fmt.Errorf("--allow-egress: %v", err)
		}
		if !slices.Contains(spec.AllowEgress, r) {
			spec.AllowEgress = append(spec.AllowEgress, r)
		}
	}
	if o.set["timeout"] {
		secs, err := taskspec.ParseSeconds(o.timeout)
		if err != nil {
			return nil, fmt.Errorf("--timeout %v", err)
		}
		spec.TimeoutSeconds = secs
	}
	if o.set["queue-timeout"] {
		secs, err := taskspec.ParseSeconds(o.queueTimeout)
		if err != nil {
			return nil, fmt.Errorf("--queue-timeout %v", err)
		}
		spec.QueueTimeoutSeconds = secs
	}
	if o.set["retain"] {
		secs, err := taskspec.ParseRetain(o.retain)
		if err != nil {
			return nil, fmt.Errorf("--retain %v", err)
		}
		spec.RetainSeconds = secs
	}
	if o.set["priority"] {
		if o.priority < math.MinInt32 || o.priority > math.MaxInt32 {
			return nil, fmt.Errorf("--priority %d is out of range: give a number between %d and %d", o.priority, math.MinInt32, math.MaxInt32)
		}
		spec.Priority = int32(o.priority)
	}
	if o.set["user"] {
		if problem := taskspec.UserProblem(o.user); problem != "" {
			return nil, fmt.Errorf("--user: %s", problem)
		}
		spec.User = o.user
	}
	if o.set["pull"] {
		if !slices.Contains(taskspec.PullPolicies, o.pull) {
			return nil, fmt.Errorf("--pull %q is not a pull policy: give one of %s", o.pull, strings.Join(taskspec.PullPolicies, ", "))
		}
		spec.Pull = o.pull
	}
	if o.set["output-limit"] {
		n, err := taskspec.ParseSize(o.outputLimit)
		if err != nil {
			return nil, fmt.Errorf("--output-limit %v", err)
		}
		spec.OutputLimitBytes = n
	}
	if err := o.applyGPUs(spec); err != nil {
		return nil, err
	}
	if len(o.command) > 0 {
		spec.Command = o.command
	}
	if err := taskspec.Validate(spec); err != nil {
		var fe *taskspec.FieldError
		if errors.As(err, &fe) && fe.Field == "spec.image" && spec.Image == "" {
			return nil, fmt.Errorf("%w (give --image IMAGE, or image: in the --spec file)", err)
		}
		return nil, err
	}
	return spec, nil
}

// applyResources sets the spec's CPU and memory from --cpus and --memory,
// each over what the spec file says.
func (o *runOptions) applyResources(spec *podiumv1.TaskSpec) error {
	if !o.set["cpus"] && !o.set["memory"] {
		return nil
	}
	if spec.Resources == nil {
		spec.Resources = &podiumv1.Resources{}
	}
	if o.set["cpus"] {
		if o.cpus <= 0 || math.IsNaN(o.cpus) || math.IsInf(o.cpus, 0) {
			return fmt.Errorf("--cpus %v: give a positive number of CPU cores, e.g. 0.5 or 2", o.cpus)
		}
		spec.Resources.Cpu = o.cpus
	}
	if o.set["memory"] {
		n, err := parseMemory(o.memory)
		if err != nil {
			return fmt.Errorf("--memory %v", err)
		}
		// The spec keeps MiB, rounded up so that the limit is at least
		// what was asked.
		spec.Resources.MemoryMb = n>>20 + min(n&(1<<20-1), 1)
	}
	return nil
}

// parseMemory reads --memory as docker run does, a number with b, k, m or
// g (powers of 1024: 512m is 512 MiB), and also every size ParseSize takes
// (512MiB, 1.5GiB, 500MB).
func parseMemory(s string) (int64, error) {
	if n := len(s); n >= 2 && s[n-2] >= '0' && s[n-2] <= '9' {
		shift := map[byte]uint{'b': 0, 'k': 10, 'm': 20, 'g': 30}
		if sh, ok := shift[s[n-1]|0x20]; ok {
			v, err := strconv.ParseInt(s[:n-1], 10, 64)
			if err != nil || v <= 0 || v > math.MaxInt64>>sh {
				return 0, fmt.Errorf("%q: give a positive size, e.g. 512m, 2g or 512MiB", s)
			}
			return v << sh, nil
		}
	}
	n, err := taskspec.ParseSize(s)
	if err != nil {
		return 0, err
	}
	if n <= 0 {
		return 0, fmt.Errorf("%q: give a positive size, e.g. 512m, 2g or 512MiB", s)
	}
	return n, nil
}

// applyGPUs sets the spec's GPU request from --gpus, --gpu-model and
// --gpu-memory, each over what the spec file says. --gpu-memory is a size,
// as a person reads a GPU's memory ("80GiB"); the spec keeps MiB, rounded up
// so that "at least" stays at least.
func (o *runOptions) applyGPUs(spec *podiumv1.TaskSpec) error {
	if !o.set["gpus"] && !o.set["gpu-model"] && !o.set["gpu-memory"] {
		return nil
	}
	if spec.Resources == nil {
		spec.Resources = &podiumv1.Resources{}
	}
	r := spec.Resources
	if o.set["gpus"] {
		if o.gpus < 0 || o.gpus > taskspec.MaxGPUs {
			return fmt.Errorf("--gpus %d is out of range: give how many whole GPUs the task needs, 1 to %d (0 for none)", o.gpus, taskspec.MaxGPUs)
		}
		r.Gpus = int32(o.gpus)
	}
	if o.set["gpu-model"] {
		if err := taskspec.CheckGPUModel("--gpu-model", o.gpuModel); err != nil {
			return err
		}
		r.GpuModel = o.gpuModel
	}
	if o.set["gpu-memory"] {
		n, err := taskspec.ParseSize(o.gpuMemory)
		if err != nil {
			return fmt.Errorf("--gpu-memory %v", err)
		}
		r.GpuMemoryMb = n>>20 + min(n&(1<<20-1), 1)
	}
	if r.GetGpus() == 0 && (r.GetGpuModel() != "" || r.GetGpuMemoryMb() != 0) {
		return errors.New("--gpu-model and --gpu-memory say which GPUs count: give --gpus N too")
	}
	return nil
}

func readSpec(name string, stdin io.Reader) (*podiumv1.TaskSpec, error) {
	r := stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, fmt.Errorf("--spec: %w", err)
		}
		defer f.Close()
		r = f
	} else {
		name = "standard input"
	}
	spec, err := taskspec.Parse(r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return spec, nil
}

// errStopped is the cause of run's context when a second signal says to stop
// waiting for the task to end.
var errStopped = errors.New("stopped by a second interrupt")

// runTask submits spec and, unless detached, follows the task to its end and
// returns the exit code it maps to.
func (c *cli) runTask(ctx context.Context, cl *client, spec *podiumv1.TaskSpec, o *runOptions) int {
	p := newPrinter(c.stdout, c.stderr, o.quiet)
	// A move to another address is progress, said as such (and not when
	// quiet: stderr is then the task's own).
	cl.note = p.note

	// Signals are caught before Submit: a Ctrl-C while the request is in
	// flight must not leave a task running that nobody is watching.
	sigs := c.signals
	if sigs == nil {
		ch := make(chan os.Signal, 2)
		signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
		defer signal.Stop(ch)
		sigs = ch
	}
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	interrupted := make(chan struct{})
	go func() {
		select {
		case <-sigs:
		case <-ctx.Done():
			return
		}
		close(interrupted)
		select {
		case <-sigs:
			stop(errStopped)
		case <-ctx.Done():
		}
	}()
	stopped := func() bool { return errors.Is(context.Cause(ctx), errStopped) }

	resp, err := unary(ctx, cl, func(ctx context.Context, e *endpoint) (*connect.Response[podiumv1.SubmitResponse], error) {
		return e.tasks.Submit(ctx, connect.NewRequest(&podiumv1.SubmitRequest{Spec: spec}))
	})
	if err != nil {
		if stopped() {
			p.fail("interrupted while submitting; the task may have been created (see podium tasks)")
			return exitCancel
		}
		p.fail("%s", cl.describe(err, ""))
		return exitPodium
	}
	id := resp.Msg.GetTask().GetId()
	if id == "" {
		p.fail("the coordinator at %s accepted the task but returned no id: is it a podium-coordinator?", cl.server())
		return exitPodium
	}
	if o.detach {
		select {
		case <-interrupted:
			cl.cancelOnce(ctx, p, id)
			return exitCancel
		default:
		}
		fmt.Fprintln(c.stdout, id)
		return exitOK
	}
	p.notef("task %s submitted", id)
	p.node = func(ctx context.Context) (string, int32) {
		r, err := unary(ctx, cl, func(ctx context.Context, e *endpoint) (*connect.Response[podiumv1.GetResponse], error) {
			return e.tasks.Get(ctx, connect.NewRequest(&podiumv1.GetRequest{Id: id}))
		})
		if err != nil {
			return "", -1
		}
		return r.Msg.GetTask().GetNodeId(), r.Msg.GetTask().GetAttempt()
	}

	followCtx, endFollow := context.WithCancel(ctx)
	defer endFollow()
	go func() {
		select {
		case <-interrupted:
			c.cancelUntilDone(followCtx, cl, p, id)
		case <-followCtx.Done():
		}
	}()

	f := &follower{
		cl: cl, id: id, p: p, follow: true, reached: true,
		minBackoff: c.minBackoff, maxBackoff: c.maxBackoff,
		reconnectTimeout: c.reconnectTimeout, noteEvery: c.reconnectNote,
	}
	final, err := f.run(followCtx)
	if stopped() {
		p.fail("stopped following task %s; the coordinator was asked to cancel it (see podium task get %s)", id, id)
		return exitCancel
	}
	if errors.Is(err, errGaveUp) {
		c.gaveUp(p, cl, id, err)
		return exitPodium
	}
	if err != nil {
		p.fail("following task %s: %s", id, cl.describe(err, fmt.Sprintf("no task %s: the coordinator no longer knows it", id)))
		p.fail("the task may still be running: see podium logs -f %s, or stop it with podium task cancel %s", id, id)
		return exitPodium
	}
	p.final(final)
	select {
	case <-interrupted:
		return exitCancel
	default:
	}
	code := exitCode(final)
	if code == exitPodium && o.quiet {
		p.fail("task %s %s", id, statusline.Line(final.GetState(), final.GetReason(), final.ExitCode, final.GetSignal(), ""))
	}
	return code
}

// gaveUp reports a follower that could reach no coordinator for its bound:
// the task may have ended, or may still be running, and only asking again
// later can tell.
func (c *cli) gaveUp(p *printer, cl *client, id string, err error) {
	p.fail("following task %s: %v; the state of task %s is unknown: it may still be running or may have ended", id, err, id)
	p.fail("when a coordinator (%s) is back, see podium task get %s, or podium logs -f %s to keep following", cl.servers(), id, id)
}

// cancelReason is what the task's log shows as why it was cancelled.
const cancelReason = "podium run was interrupted"

// cancelUntilDone asks the coordinator to cancel the task, retrying through
// the same outages the follower rides out, until it has answered or ctx ends.
func (c *cli) cancelUntilDone(ctx context.Context, cl *client, p *printer, id string) {
	p.notef("cancelling task %s (press Ctrl-C again to stop waiting)", id)
	backoff := max(c.minBackoff, 250*time.Millisecond)
	for {
		_, err := unary(ctx, cl, func(ctx context.Context, e *endpoint) (*connect.Response[podiumv1.CancelResponse], error) {
			return e.tasks.Cancel(ctx, connect.NewRequest(&podiumv1.CancelRequest{Id: id, Reason: cancelReason}))
		})
		if err == nil || ctx.Err() != nil {
			return
		}
		if isDefinitive(err) {
			p.fail("could not cancel task %s: %s", id, cl.describe(err, fmt.Sprintf("no task %s", id)))
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// cancelOnce cancels a task that was detached while being interrupted.
func (cl *client) cancelOnce(ctx context.Context, p *printer, id string) {
	_, err := unary(context.WithoutCancel(ctx), cl, func(ctx context.Context, e *endpoint) (*connect.Response[podiumv1.CancelResponse], error) {
		return e.tasks.Cancel(ctx, connect.NewRequest(&podiumv1.CancelRequest{Id: id, Reason: cancelReason}))
	})
	if err != nil {
		p.fail("interrupted, but could not cancel task %s: %s", id, cl.describe(err, ""))
		return
	}
	p.notef("task %s cancelled", id)
}

// exitCode maps a task that has ended to run's exit code (see main.go).
//
// A failed task with a signal exits 128+N, like a shell; with an exit code,
// that code. A failed task with neither never ran (its image could not be
// pulled, its node refused it), and one that "failed" with exit code 0 was
// failed by Podium after the process succeeded: both are Podium's failures,
// 125, so a script never mistakes them for the task's own answer. Lost is
// 125 too: the task did nothing wrong, its machine went away; so is a task
// its node's Docker engine stopped as it restarted, which the agent reports
// failed without an exit code for that reason.
func exitCode(t *podiumv1.Task) int {
	switch t.GetState() {
	case podiumv1.TaskState_TASK_STATE_SUCCEEDED:
		return exitOK
	case podiumv1.TaskState_TASK_STATE_CANCELLED:
		return exitCancel
	case podiumv1.TaskState_TASK_STATE_FAILED:
		if s := t.GetSignal(); s > 0 && s < signalShift {
			return signalShift + int(s)
		}
		if t.ExitCode != nil && *t.ExitCode > 0 && *t.ExitCode <= 255 {
			return int(*t.ExitCode)
		}
		return exitPodium
	}
	return exitPodium
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }

func (l *stringList) Set(v string) error {
	*l = append(*l, v)
	return nil
}

// setFlags returns the names of the flags given on the command line.
func setFlags(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[canonicalFlag(f)] = true })
	return set
}
