//go:build !linux

package transport

import (
	"errors"
	"net/netip"
)

// routeInterface cannot tell, off Linux, which interface reaches ip: no
// address is taken for the tailnet's on its range alone, so plain http:// to
// one needs --insecure-plaintext there (or https://, or --tsnet).
func routeInterface(netip.Addr) (string, error) {
	return "", errors.New("this agent reads routes only on Linux")
}
