package server

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"syscall"
)

// maxMetricsTokenFileBytes bounds what is read of the metrics token file: a
// token is a line.
const maxMetricsTokenFileBytes = 4096

// loadMetricsToken reads the token /metrics wants from path (a file, like
// the coordinator's other secrets, so it is not in ps or the environment),
// without surrounding white space. It must be as long as the API token must:
// long enough that guessing it is hopeless (`openssl rand -hex 32`).
func loadMetricsToken(path string) (string, error) {
	// Non-blocking, so that a named pipe is refused below instead of
	// holding the start on a read nobody answers.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return "", fmt.Errorf("--metrics-token-file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return "", fmt.Errorf("--metrics-token-file %s is not a regular file: give a file holding the token", path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return "", fmt.Errorf("--metrics-token-file %s has mode %04o, readable by others than its owner: run `chmod 600 %s`", path, perm, path)
	}
	raw, err := io.ReadAll(io.LimitReader(f, maxMetricsTokenFileBytes+1))
	if err != nil {
		return "", fmt.Errorf("--metrics-token-file: %w", err)
	}
	if len(raw) > maxMetricsTokenFileBytes {
		return "", fmt.Errorf("--metrics-token-file %s is longer than %d bytes: it should hold one token, such as `openssl rand -hex 32` prints", path, maxMetricsTokenFileBytes)
	}
	tok := string(bytes.TrimSpace(raw))
	if len(tok) < MinTokenBytes {
		return "", fmt.Errorf("--metrics-token-file %s holds %d bytes of token, want at least %d: make one with `openssl rand -hex 32 > %s`", path, len(tok), MinTokenBytes, path)
	}
	if bytes.ContainsAny([]byte(tok), " \t\r\n") {
		return "", fmt.Errorf("--metrics-token-file %s holds more than one word: it should hold one token, such as `openssl rand -hex 32` prints", path)
	}
	return tok, nil
}
