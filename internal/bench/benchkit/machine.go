package benchkit

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
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

// RaiseFileLimit lifts the soft open-file limit to the hard one: each
// simulated node holds sockets, and subprocesses inherit the limit.
func RaiseFileLimit(log *slog.Logger) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		log.Warn("cannot read the open-file limit", "err", err)
		return
	}
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		log.Warn("cannot raise the open-file limit", "err", err)
	}
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
	deadline := time.Now().Add(within)
	client := &http.Client{Timeout: time.Second}
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
