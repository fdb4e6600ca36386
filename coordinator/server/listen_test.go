package server

import (
	"strings"
	"testing"
)

// The local transport serves plain HTTP with a bearer token, so it stays on
// loopback unless the operator says otherwise.
func TestListenAddressMustBeLoopbackUnlessAllowed(t *testing.T) {
	for _, ok := range []string{"127.0.0.1:7070", "[::1]:7070", "localhost:0"} {
		if loopback, err := checkListen(ok, false); err != nil || !loopback {
			t.Errorf("%s: %v, %v", ok, loopback, err)
		}
	}
	for _, bad := range []string{"0.0.0.0:7070", ":7070", "10.1.2.3:7070", "example.com:80"} {
		_, err := checkListen(bad, false)
		if err == nil || !strings.Contains(err.Error(), "--allow-non-loopback") {
			t.Errorf("%s: %v, want a refusal that names --allow-non-loopback", bad, err)
		}
		if loopback, err := checkListen(bad, true); err != nil || loopback {
			t.Errorf("%s with the flag: %v, %v", bad, loopback, err)
		}
	}
	if _, err := checkListen("nonsense", true); err == nil {
		t.Error("a malformed address was accepted")
	}
}
