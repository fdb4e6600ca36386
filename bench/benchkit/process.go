package benchkit

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Process is a long-running subprocess (a coordinator, an agent) logging to a
// file. It runs in its own process group, so a ^C at the terminal reaches
// only the benchmark, which then stops what it started in order; Pdeathsig
// kills it should the benchmark itself die without cleaning up.
type Process struct {
	cmd     *exec.Cmd
	PID     int
	LogPath string
	logFile *os.File
	Exited  chan struct{} // closed when the process has exited
	WaitErr error         // valid after Exited is closed
}

// StartProcess runs bin with args and extra environment, its stdout and
// stderr going to logPath.
func StartProcess(logPath string, env []string, bin string, args ...string) (*Process, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	p := &Process{cmd: cmd, PID: cmd.Process.Pid, LogPath: logPath, logFile: logf, Exited: make(chan struct{})}
	go func() { p.WaitErr = cmd.Wait(); close(p.Exited) }()
	return p, nil
}

// Stop asks the process to shut down (SIGTERM: a coordinator ends its
// sessions and releases its leases, an agent closes its stream) and kills it
// if it has not within timeout.
func (p *Process) Stop(timeout time.Duration) error {
	defer p.logFile.Close()
	select {
	case <-p.Exited:
		return p.WaitErr
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.Exited:
		return p.WaitErr
	case <-time.After(timeout):
		_ = p.cmd.Process.Kill()
		<-p.Exited
		return errors.New("killed after not stopping within " + timeout.String())
	}
}

// Warnings counts the WARN and ERROR lines in the process's log so far and
// returns up to keep of them with distinct messages.
func (p *Process) Warnings(keep int) (int, []string) { return LogWarnings(p.LogPath, keep) }
