package runner

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/podiumhq/podium/agent/runlog"
)

// forwarded are the signals passed on to the command's process group. They
// are the ones a person or an orchestrator sends to ask a program something
// (stop, reload, dump); signals the kernel raises for a faulting runner
// (SEGV, BUS, ...) and terminal job control are not the command's business.
var forwarded = []os.Signal{
	syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM,
	syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH, syscall.SIGALRM, syscall.SIGCONT,
}

// drainWait bounds how long the runner waits, after the command ended and
// everything left in its process group was killed, for the output pipes to
// close. Outside a container a process that left the group (setsid) can hold
// a pipe open forever; the runner must still exit.
const drainWait = 10 * time.Second

// pidsCheck is how often the runner, as PID 1, looks at whether the
// container's pids limit has refused a fork. Reading one small cgroup file
// four times a second costs nothing; a fork bomb is stopped within it.
const pidsCheck = 250 * time.Millisecond

// leaseCheck is how often the runner reads the agent's lease file: fencing
// must stop the command within a fraction of the lead the agent leaves
// before the control plane's offline threshold, and reading 20 bytes ten
// times a second costs nothing.
const leaseCheck = 100 * time.Millisecond

// writeRetry is how long the runner keeps retrying a failed write of the exit
// record (a full disk, say) before it gives up and exits anyway.
const writeRetry = 10 * time.Second

func runCommand(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	logPath := fs.String("log", LogPath, "the runner log to write the command's output and exit status to")
	pathAppend := fs.String("path-append", "", "a directory to append to the command's PATH")
	limit := fs.Int64("output-limit", 0, "write at most this many `BYTES` of output (both streams) to the log, "+
		"and one more if there was more; the rest is read and dropped (0: no limit)")
	progressPath := fs.String("progress", "", "the agent's progress `FILE` (package runlog), saying how far it has read the log")
	backlog := fs.Int64("backlog", 0, "with --progress, stop copying output while more than this many `BYTES` of the log are unread (0: never)")
	diskFullAfter := fs.Duration("disk-full-after", 0, "stop the command when its output could not be written to the log "+
		"for want of room for this `DURATION`, and exit with 124 (0: wait for room as long as it takes)")
	leasePath := fs.String("lease", "", "the agent's lease `FILE` (package runlog): once the moment it holds has passed, "+
		"stop the command (SIGTERM, SIGKILL after the grace it holds) and record it as fenced")
	secretsTo := fs.String("secrets-stdin", "", "read the task's file secrets (JSON, from the agent) from stdin until it closes, "+
		"and write each into `DIR` with mode 0400 before the command starts")
	if err := fs.Parse(args); err != nil {
		return ExitUsage
	}
	if *limit < 0 || *backlog < 0 {
		fmt.Fprintln(stderr, "podium-runner run: --output-limit and --backlog take a number of bytes, 0 or more")
		return ExitUsage
	}
	if *diskFullAfter < 0 {
		fmt.Fprintln(stderr, "podium-runner run: --disk-full-after takes a duration, 0 or more (e.g. 5m)")
		return ExitUsage
	}
	argv := fs.Args()
	if len(argv) == 0 {
		fmt.Fprintln(stderr, "podium-runner run: no command given: podium-runner run [--log FILE] -- COMMAND [ARG]...")
		return ExitUsage
	}
	w, err := runlog.OpenWriter(*logPath)
	if err != nil {
		fmt.Fprintf(stderr, "podium-runner: cannot open the runner log: %v (the agent mounts it at %s; "+
			"outside a Podium container pass --log FILE)\n", err, LogPath)
		return ExitRunnerError
	}
	defer w.Close()
	s := &supervisor{w: w, stderr: stderr, stop: make(chan struct{}), limit: *limit, written: int64(w.Written()),
		diskFullAfter: *diskFullAfter}
	if *progressPath != "" && *backlog > 0 {
		p, err := os.Open(*progressPath)
		if err != nil {
			// Without it the output is not held back, which loses nothing.
			fmt.Fprintf(stderr, "podium-runner: cannot open the progress file: %v; the task's output is not held back\n", err)
		} else {
			defer p.Close()
			s.progress, s.backlog = p, *backlog
		}
	}
	if *leasePath != "" {
		l, err := os.Open(*leasePath)
		if err != nil {
			// Without it the runner cannot fence; the agent still does
			// whenever it is there to.
			fmt.Fprintf(stderr, "podium-runner: cannot open the lease file: %v; the task is not fenced by its runner\n", err)
		} else {
			defer l.Close()
			s.lease = l
		}
	}
	if *secretsTo != "" {
		if err := writeSecrets(os.Stdin, *secretsTo); err != nil {
			e := s.cannotStart(argv[0], ExitRunnerError, err)
			return e.Code
		}
	}
	if os.Getpid() == 1 {
		_, pidsMax := pidsEvents()
		reserveThreads(reservedThreads, pidsMax)
	}
	e := s.run(argv, commandEnv(os.Environ(), *pathAppend))
	if e.DiskFull {
		return ExitDiskFull
	}
	return e.Code
}

// commandEnv is the runner's own environment (what Docker gave PID 1: the
// image's and the task's variables) with dir appended to PATH.
func commandEnv(env []string, dir string) []string {
	if dir == "" {
		return env
	}
	out := make([]string, 0, len(env)+1)
	found := false
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			found = true
			if v == "" {
				kv = "PATH=" + dir
			} else {
				kv = "PATH=" + v + ":" + dir
			}
		}
		out = append(out, kv)
	}
	if !found {
		out = append(out, "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:"+dir)
	}
	return out
}

// supervisor runs one command to its end.
type supervisor struct {
	w        *runlog.Writer
	stderr   io.Writer     // the runner's own stderr, for trouble with the log itself
	stop     chan struct{} // closed (by stopOnce) when the runner gives up on writing
	stopOnce sync.Once
	warned   sync.Once

	// diskFullAfter is --disk-full-after (0: none). failingSince is when
	// writes of the log began failing for want of room, zero while they
	// succeed, guarded by mu; diskFull is set once the runner stopped the
	// command over it. pid is the command's, for that stop.
	diskFullAfter time.Duration
	failingSince  time.Time
	diskFull      atomic.Bool
	pid           atomic.Int64

	// limit is --output-limit (0: none); written counts the output bytes
	// the log holds, both streams, guarded by mu.
	limit   int64
	mu      sync.Mutex
	written int64

	// progress is the agent's progress file and backlog how much of the log
	// may go unread (see package runlog); nil and 0 without back-pressure.
	progress *os.File
	backlog  int64
	// held counts the copiers waiting for the agent to read.
	held atomic.Int32

	// lease is the agent's lease file (nil: none); fenced is set once the
	// runner stopped the command because the lease ran out.
	lease  *os.File
	fenced atomic.Bool
}

// run starts argv, supervises it and returns how it ended, after writing that
// to the log.
func (s *supervisor) run(argv, env []string) runlog.Exit {
	pid1 := os.Getpid() == 1
	if !pid1 {
		// Outside a container the runner is not init, so orphans would be
		// reparented past it; as a subreaper it still collects them.
		_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0)
	}
	// Subscribe before the command starts, so neither its exit nor a signal
	// sent to the container at once can slip past.
	sigc := make(chan os.Signal, 64)
	signal.Notify(sigc, forwarded...)
	signal.Notify(sigc, syscall.SIGCHLD)
	defer signal.Stop(sigc)

	path, code, err := lookPath(argv[0], env)
	if err != nil {
		return s.cannotStart(argv[0], code, err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return s.cannotStart(argv[0], ExitRunnerError, err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		return s.cannotStart(argv[0], ExitRunnerError, err)
	}
	proc, err := os.StartProcess(path, argv, &os.ProcAttr{
		Env:   env,
		Files: []*os.File{os.Stdin, outW, errW},
		// Its own process group, so a signal reaches everything the
		// command started (a shell's children too), not just the command.
		Sys: &syscall.SysProcAttr{Setpgid: true},
	})
	_ = outW.Close()
	_ = errW.Close()
	if err != nil {
		_ = outR.Close()
		_ = errR.Close()
		code := ExitCannotExec
		if errors.Is(err, os.ErrNotExist) {
			code = ExitNotFound
		}
		return s.cannotStart(argv[0], code, err)
	}
	pid := proc.Pid
	s.pid.Store(int64(pid))

	var copiers sync.WaitGroup
	copiers.Add(2)
	go s.copy(&copiers, outR, runlog.Stdout)
	go s.copy(&copiers, errR, runlog.Stderr)

	if pid1 {
		stopWatch := s.watchPids(pid)
		defer stopWatch()
	}
	if s.lease != nil {
		stopLease := s.watchLease(pid)
		defer stopLease()
	}

	var ws syscall.WaitStatus
	for exited := false; !exited; {
		sig := <-sigc
		if sig == syscall.SIGCHLD {
			exited = reap(pid, &ws)
			continue
		}
		// ESRCH (the group is gone) is no reason to stop: SIGCHLD follows.
		_ = syscall.Kill(-pid, sig.(syscall.Signal))
	}

	// What the command left running ends with it, as it would in any
	// container whose main process exits; until it does, it may hold the
	// output pipes open. As PID 1, kill(-1) reaches every process in the
	// container (init itself excepted); elsewhere only the command's group.
	if pid1 {
		_ = syscall.Kill(-1, syscall.SIGKILL)
	} else {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	}
	drained := make(chan struct{})
	go func() { copiers.Wait(); close(drained) }()
	for waiting := true; waiting; {
		select {
		case <-drained:
			waiting = false
		case <-time.After(drainWait):
			if s.held.Load() > 0 {
				// The output is there, held back until the agent has read
				// the log: that is no pipe left open, and dropping it would
				// lose what the task printed last.
				continue
			}
			fmt.Fprintln(s.stderr, "podium-runner: the command's output did not end after it exited; closing it")
			s.stopOnce.Do(func() { close(s.stop) })
			_ = outR.Close()
			_ = errR.Close()
			<-drained
			waiting = false
		}
	}

	e := runlog.Exit{Time: time.Now().UTC()}
	if ws.Signaled() {
		e.Signal = int(ws.Signal())
		e.Code = 128 + e.Signal
	} else {
		e.Code = ws.ExitStatus()
	}
	if pid1 {
		e.OOMKills = oomKills()
		e.PidsRefused, e.PidsLimit = pidsEvents()
		// Last: everything else in the container is dead and reaped.
		e.CPUMicros, e.PeakMemory = ownUsage()
	}
	e.Fenced = s.fenced.Load()
	if s.diskFull.Load() {
		// The exit code (ExitDiskFull) says it if the record cannot be
		// written, which is likely: one try, no waiting for room.
		e.DiskFull = true
		_ = s.w.Exit(e)
		return e
	}
	s.writeExit(e)
	return e
}

// watchPids stops the task the first time the container's pids limit
// refuses it a process: everything in the container is killed, so the
// command ends by SIGKILL and the exit record's PidsRefused says why. A task
// at its limit is almost always a fork bomb or a leak, which would otherwise
// sit there, forking and failing, until its timeout; and a program that
// handles EAGAIN from fork by retrying never gets anywhere either. The
// limit itself is what protects the node; this is what ends the task.
//
// Only PID 1 watches: its cgroup is the container's. The returned function
// stops the watch.
func (s *supervisor) watchPids(pid int) (stop func()) {
	return every(pidsCheck, func(<-chan struct{}) bool {
		refused, limit := pidsEvents()
		if refused == 0 {
			return false
		}
		s.write(runlog.Stderr, []byte(fmt.Sprintf("podium-runner: the task reached its limit of %d processes "+
			"(a fork was refused); stopping it\n", limit)))
		// kill(-1) from PID 1 reaches every other process in the
		// container, whatever process group it made for itself.
		_ = syscall.Kill(-1, syscall.SIGKILL)
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		return true
	})
}

// every runs check every interval until it reports it is done, or until
// the returned function stops it (which waits for a check under way); check
// is given the stop channel, for a wait of its own.
func every(interval time.Duration, check func(stopped <-chan struct{}) bool) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			if check(done) {
				return
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// watchLease fences the command once the agent's lease on it runs out: the
// agent moves the lease on each time a coordinator replica answers it, so a
// lease that runs out means the agent either reached no replica or could not
// act (a hung process) for as long as the control plane takes to declare the
// node offline and run the attempt again elsewhere. The command gets SIGTERM
// and the lease's grace, then everything in the container is killed, and the
// output still held back for the agent is given up: the attempt's output no
// longer counts, and an agent that does not read must not keep the container
// alive. The returned function stops the watch.
func (s *supervisor) watchLease(pid int) (stop func()) {
	return every(leaseCheck, func(stopped <-chan struct{}) bool {
		// A torn or unreadable lease is read again at the next tick: only
		// a whole one that has run out fences.
		l, err := runlog.ReadLease(s.lease)
		if err != nil {
			return false
		}
		out, ago := l.RunOut()
		if !out {
			return false
		}
		s.fenced.Store(true)
		fmt.Fprintf(s.stderr, "podium-runner: the agent's lease on this task ran out %s ago; stopping the command "+
			"(the control plane runs the task again elsewhere)\n", ago.Round(time.Millisecond))
		_ = syscall.Kill(-pid, syscall.SIGTERM)
		select {
		case <-stopped:
			return true
		case <-time.After(l.Grace):
		}
		if os.Getpid() == 1 {
			_ = syscall.Kill(-1, syscall.SIGKILL)
		}
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		s.stopOnce.Do(func() { close(s.stop) })
		return true
	})
}

// reap collects every child that has exited — the command, and any orphan
// the kernel handed to the runner — and reports whether the command was
// among them.
func reap(pid int, ws *syscall.WaitStatus) bool {
	found := false
	for {
		var st syscall.WaitStatus
		p, err := syscall.Wait4(-1, &st, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if p <= 0 || err != nil {
			return found
		}
		if p == pid {
			*ws = st
			found = true
		}
	}
}

// copy moves one output pipe into the log until the pipe ends. A write that
// fails (a full disk) is retried rather than dropped, and so is one the agent
// is not ready for (see waitRoom): the pipe then fills and the command blocks
// on its next write, which loses nothing. Output past --output-limit is read
// and dropped, so the command goes on.
//
// After a short read the copy pauses for coalesceWait before reading again,
// so that a command printing a little at a time has its output gathered into
// fewer, bigger records: each record costs 17 bytes of framing on the host's
// disk, and a command writing one byte at a time must not turn a limit on its
// output into eighteen times that on disk. A short read means the pipe was
// empty, so nothing waits on the pause.
func (s *supervisor) copy(wg *sync.WaitGroup, r *os.File, stream runlog.Stream) {
	defer wg.Done()
	defer r.Close()
	buf := make([]byte, runlog.MaxRecordData)
	for {
		n, err := r.Read(buf)
		if p := s.admit(buf[:n]); len(p) > 0 && !s.write(stream, p) {
			return
		}
		if err != nil {
			return
		}
		if n < smallRead {
			time.Sleep(coalesceWait)
		}
	}
}

// Coalescing small reads; see copy.
const (
	smallRead    = 4 << 10
	coalesceWait = time.Millisecond
)

// admit is the part of p the log takes under --output-limit: everything up to
// the limit and one byte more, which tells the agent that there was more than
// the limit; then nothing.
func (s *supervisor) admit(p []byte) []byte {
	if s.limit <= 0 || len(p) == 0 {
		return p
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	room := max(0, s.limit+1-s.written)
	p = p[:min(int64(len(p)), room)]
	s.written += int64(len(p))
	return p
}

// Waiting for the agent to read: the first look again comes soon, later
// ones less often, so a task held back for long costs nearly nothing.
const (
	minHold = 5 * time.Millisecond
	maxHold = 200 * time.Millisecond
)

// waitRoom waits while more of the log than the backlog is unread by the
// agent. It returns false if the runner gave up on the output meanwhile.
func (s *supervisor) waitRoom() bool {
	if s.progress == nil {
		return true
	}
	held := false
	defer func() {
		if held {
			s.held.Add(-1)
		}
	}()
	wait := minHold
	for {
		read, err := runlog.ReadProgress(s.progress)
		// A torn read is retried; a file that cannot be read at all
		// holds nothing back (a lost progress file must not stop a task).
		if err == nil && s.w.Size()-read <= s.backlog || err != nil && !errors.Is(err, runlog.ErrTornProgress) {
			return true
		}
		if !held {
			held = true
			s.held.Add(1)
		}
		select {
		case <-s.stop:
			return false
		case <-time.After(wait):
		}
		wait = min(2*wait, maxHold)
	}
}

func (s *supervisor) write(stream runlog.Stream, p []byte) bool {
	if !s.waitRoom() {
		return false
	}
	for {
		err := s.w.Write(stream, p)
		if err == nil {
			s.mu.Lock()
			s.failingSince = time.Time{}
			s.mu.Unlock()
			return true
		}
		s.warned.Do(func() {
			fmt.Fprintf(s.stderr, "podium-runner: cannot write the runner log (%v); the task's output waits until it can\n", err)
		})
		if s.fullTooLong(err) {
			s.giveUp(err)
			return false
		}
		select {
		case <-s.stop:
			return false
		case <-time.After(time.Second):
		}
	}
}

// fullTooLong reports whether writes of the log have failed for want of room
// (err, the latest, says so) for longer than --disk-full-after.
func (s *supervisor) fullTooLong(err error) bool {
	if s.diskFullAfter <= 0 || !errors.Is(err, syscall.ENOSPC) && !errors.Is(err, syscall.EDQUOT) {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failingSince.IsZero() {
		s.failingSince = time.Now()
	}
	return time.Since(s.failingSince) >= s.diskFullAfter
}

// giveUp stops the command because its output has had no room for too long:
// a task whose output cannot be kept would otherwise hang, blocked on its
// next write, until its timeout or forever. What the log holds stays an
// exact prefix of the output; the exit code (ExitDiskFull) and the exit
// record's DiskFull tell the agent why the task ended.
func (s *supervisor) giveUp(err error) {
	if s.diskFull.Swap(true) {
		return
	}
	fmt.Fprintf(s.stderr, "podium-runner: the runner log has had no room for %s (%v); stopping the command\n", s.diskFullAfter, err)
	if pid := int(s.pid.Load()); pid > 0 {
		if os.Getpid() == 1 {
			_ = syscall.Kill(-1, syscall.SIGKILL)
		}
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	}
	s.stopOnce.Do(func() { close(s.stop) })
}

func (s *supervisor) writeExit(e runlog.Exit) {
	deadline := time.Now().Add(writeRetry)
	for {
		err := s.w.Exit(e)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(s.stderr, "podium-runner: cannot write the exit status to the runner log: %v\n", err)
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// cannotStart records a command that could not be started: a line on the
// task's stderr that a person reading the log understands, and the exit
// record, with the code a shell would have used.
func (s *supervisor) cannotStart(name string, code int, err error) runlog.Exit {
	msg := fmt.Sprintf("podium-runner: cannot run %q: %v", name, err)
	s.write(runlog.Stderr, []byte(msg+"\n"))
	e := runlog.Exit{Code: code, Error: msg, Time: time.Now().UTC()}
	s.writeExit(e)
	return e
}

var errNotExecutable = errors.New("permission denied: the file is not executable")

// lookPath finds file the way a shell would, in the PATH of env, and returns
// the exit code to use when it cannot: 127 for a command that does not exist,
// 126 for one that exists but cannot be run.
func lookPath(file string, env []string) (string, int, error) {
	if strings.Contains(file, "/") {
		if err := checkExec(file); err != nil {
			return "", codeOf(err), err
		}
		return file, 0, nil
	}
	path := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	var denied error
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, file)
		err := checkExec(p)
		if err == nil {
			return p, 0, nil
		}
		if denied == nil && errors.Is(err, errNotExecutable) {
			denied = err
		}
	}
	if denied != nil {
		return "", ExitCannotExec, denied
	}
	return "", ExitNotFound, fmt.Errorf("executable file not found in $PATH (%s)", path)
}

func checkExec(p string) error {
	st, err := os.Stat(p)
	if err != nil {
		return err
	}
	if st.IsDir() {
		return fmt.Errorf("%s: %w", p, errIsDir)
	}
	if st.Mode()&0o111 == 0 {
		return fmt.Errorf("%s: %w", p, errNotExecutable)
	}
	return nil
}

var errIsDir = errors.New("is a directory")

func codeOf(err error) int {
	if errors.Is(err, os.ErrNotExist) {
		return ExitNotFound
	}
	return ExitCannotExec
}

// oomKills reads how many processes the OOM killer ended in this container's
// memory cgroup: cgroup v2's memory.events, or v1's memory.oom_control. Both
// count from the cgroup's creation, which for a container is its start.
func oomKills() int {
	for _, p := range []string{"/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"} {
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "oom_kill "); ok {
				n, _ := strconv.Atoi(strings.TrimSpace(v))
				_ = f.Close()
				return n
			}
		}
		_ = f.Close()
	}
	return 0
}

// pidsEvents reads how many forks the container's pids limit has refused and
// what the limit is: cgroup v2's pids.events and pids.max, or v1's in the
// pids hierarchy. Both count from the cgroup's creation, the container's
// start. A limit of "max" (none) reads as 0.
func pidsEvents() (refused int, limit int64) {
	for _, dir := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/pids"} {
		b, err := os.ReadFile(filepath.Join(dir, "pids.events"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "max "); ok {
				refused, _ = strconv.Atoi(strings.TrimSpace(v))
			}
		}
		if m, err := os.ReadFile(filepath.Join(dir, "pids.max")); err == nil {
			limit, _ = strconv.ParseInt(strings.TrimSpace(string(m)), 10, 64)
		}
		return refused, limit
	}
	return 0, 0
}

// prSetChildSubreaper is prctl's PR_SET_CHILD_SUBREAPER, which package
// syscall does not name.
const prSetChildSubreaper = 36
