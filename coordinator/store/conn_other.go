//go:build !linux

package store

import (
	"syscall"
	"time"
)

// setUserTimeout does nothing where TCP_USER_TIMEOUT is not offered; the
// keepalives still find a silent peer.
func setUserTimeout(time.Duration) func(network, address string, c syscall.RawConn) error {
	return nil
}
