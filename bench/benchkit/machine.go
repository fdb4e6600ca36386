package benchkit

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// LoadAvg is the 1-minute load average: figures from a machine that was busy
// with something else are not comparable, so every report says it.
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}

// RaiseFileLimit lifts the open-file limit as far as this process may and
// returns the soft limit it ends with: each simulated node holds a socket, and
// the coordinator (a subprocess) inherits the limit and holds the other end.
// The hard limit is raised to fs.nr_open when the process may
// (CAP_SYS_RESOURCE); otherwise the soft one goes up to the hard one.
func RaiseFileLimit(log *slog.Logger) uint64 {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		log.Warn("cannot read the open-file limit", "err", err)
		return 0
	}
	if b, err := os.ReadFile("/proc/sys/fs/nr_open"); err == nil {
		if n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil && n > lim.Max {
			raised := syscall.Rlimit{Cur: n, Max: n}
			if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised) == nil {
				return n
			}
		}
	}
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		log.Warn("cannot raise the open-file limit", "err", err)
		_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
	}
	return lim.Cur
}

// LogWarnings counts the WARN and ERROR lines of a log file and returns up to
// keep of them with distinct messages: a process struggling under load says so
// there.
func LogWarnings(path string, keep int) (int, []string) {
	f, err := os.Open(path)
	if err != nil {
		return 0, nil
	}
	defer f.Close()
	count := 0
	seen := map[string]bool{}
	var sample []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, "level=WARN") && !strings.Contains(line, "level=ERROR") {
			continue
		}
		count++
		_, msg, _ := strings.Cut(line, "msg=")
		key := msg
		if len(key) > 60 {
			key = key[:60]
		}
		if !seen[key] && len(sample) < keep {
			seen[key] = true
			if len(msg) > 200 {
				msg = msg[:200] + "…"
			}
			sample = append(sample, msg)
		}
	}
	return count, sample
}

// WaitReady polls url's /readyz until it answers 200, giving up after within,
// or at once when exited is closed (the process died at start; exitErr says
// how, and the end of its log at logPath goes into the error).
func WaitReady(ctx context.Context, url, logPath string, exited <-chan struct{}, exitErr func() error, within time.Duration) error {
	return waitReady(ctx, &http.Client{Timeout: time.Second}, url, logPath, exited, exitErr, within)
}

func waitReady(ctx context.Context, client *http.Client, url, logPath string, exited <-chan struct{}, exitErr func() error, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		res, err := client.Get(url + "/readyz")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the coordinator was not ready within %s; see %s", within, logPath)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-exited:
			return fmt.Errorf("the coordinator exited at start: %v\n%s", exitErr(), Tail(logPath, 20))
		case <-time.After(50 * time.Millisecond):
		}
	}
}
