package transport

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

var netnsSeq atomic.Int64

// inNetns makes a network namespace laid out as a node on a carrier-grade
// NAT network that also runs tailscaled: a real TUN device tailscale0
// (as tailscaled makes it) with the node's tailnet address, a peer's
// address routed to it in table 52 under rule 5270 (as tailscaled routes
// them), and eth0 (one end of a veth pair) on the CGNAT network
// 100.80.0.0/16, inside the same 100.64.0.0/10. It returns a function that
// runs fn on a thread inside the namespace; fn reports with t.Error, not
// t.Fatal, as it runs on a goroutine of its own. It needs root and iproute2; a
// test that cannot make it fails, saying why, rather than pass on nothing.
func inNetns(t *testing.T) func(fn func()) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test makes a network namespace with a TUN and a veth device, which needs root: run it as root (sudo go test)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatalf("this test makes its interfaces with iproute2's ip, which is not installed: %v", err)
	}
	name := fmt.Sprintf("podium-t%d-%d", os.Getpid(), netnsSeq.Add(1))
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	ip("netns", "add", name)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	for _, args := range [][]string{
		{"link", "set", "lo", "up"},
		{"tuntap", "add", "dev", "tailscale0", "mode", "tun"},
		{"addr", "add", "100.100.1.1/32", "dev", "tailscale0"},
		{"-6", "addr", "add", "fd7a:115c:a1e0::1/128", "dev", "tailscale0"},
		{"link", "set", "tailscale0", "up"},
		{"route", "add", "100.100.1.2/32", "dev", "tailscale0", "table", "52"},
		{"-6", "route", "add", "fd7a:115c:a1e0::2/128", "dev", "tailscale0", "table", "52"},
		{"rule", "add", "pref", "5270", "table", "52"},
		{"-6", "rule", "add", "pref", "5270", "table", "52"},
		{"link", "add", "eth0", "type", "veth", "peer", "name", "eth0peer"},
		{"addr", "add", "100.80.0.2/16", "dev", "eth0"},
		{"link", "set", "eth0", "up"},
		{"link", "set", "eth0peer", "up"},
	} {
		ip(append([]string{"-n", name}, args...)...)
	}
	return func(fn func()) {
		t.Helper()
		done := make(chan error, 1)
		go func() {
			defer close(done)
			// The thread stays locked and is thrown away when the
			// goroutine ends, so no other goroutine runs in the namespace.
			runtime.LockOSThread()
			f, err := os.Open("/var/run/netns/" + name)
			if err != nil {
				done <- err
				return
			}
			defer f.Close()
			if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
				done <- fmt.Errorf("enter the network namespace %s: %w", name, err)
				return
			}
			fn()
		}()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// Issue 28 (hole 7): an address in 100.64.0.0/10 is the tailnet's only when
// the route to it goes out the tailnet's interface. A carrier-grade NAT
// network uses the same range; plain http:// across it is refused, saying
// why and what to do, while a peer behind tailscale0 is still reached in
// plain http:// (WireGuard encrypts it).
func TestPlaintextOnlyThroughTheTailnetInterface(t *testing.T) {
	t.Parallel()
	run := inNetns(t)
	ctx := context.Background()
	run(func() {
		for _, ok := range []string{"http://100.100.1.2:7070", "http://[fd7a:115c:a1e0::2]:7070", "http://127.0.0.1:7070"} {
			if err := CheckPlaintext(ctx, ok); err != nil {
				t.Errorf("%s (routed out tailscale0): %v", ok, err)
			}
		}
		// This machine's own tailnet address (a coordinator beside the
		// agent, bound to it) is routed through lo: it never leaves the
		// machine, as loopback does not.
		if err := CheckPlaintext(ctx, "http://100.100.1.1:7070"); err != nil {
			t.Errorf("100.100.1.1, this machine's own address on tailscale0: %v", err)
		}
		if err := checkPlaintextDial(ctx, "tcp", "100.100.1.2:7070", nil); err != nil {
			t.Errorf("dialling 100.100.1.2 (routed out tailscale0): %v", err)
		}
		err := CheckPlaintext(ctx, "http://100.80.0.9:7070")
		if !errors.Is(err, ErrPlaintext) {
			t.Errorf("http:// to 100.80.0.9 (CGNAT, out eth0): %v, want ErrPlaintext", err)
			return
		}
		for _, want := range []string{"100.80.0.9", "eth0", "tailscale0", "carrier-grade NAT", "https://", "--insecure-plaintext", "--tailnet-interface"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("the refusal %q does not say %q", err, want)
			}
		}
		if err := checkPlaintextDial(ctx, "tcp", "100.80.0.9:7070", nil); !errors.Is(err, ErrPlaintext) || !strings.Contains(err.Error(), "eth0") {
			t.Errorf("dialling 100.80.0.9 (CGNAT, out eth0): %v, want ErrPlaintext naming eth0", err)
		}
		// In the range, with no route at all: nothing says it is the
		// tailnet's.
		if err := CheckPlaintext(ctx, "http://100.100.9.9:7070"); !errors.Is(err, ErrPlaintext) || !strings.Contains(err.Error(), "no route") {
			t.Errorf("http:// to 100.100.9.9 (no route): %v, want ErrPlaintext saying there is no route", err)
		}
		// The operator names another interface as the tailnet's (tailscaled
		// --tun): then it is that one that counts.
		other := ContextWithSecurity(ctx, Security{TailnetInterface: "eth0"})
		if err := CheckPlaintext(other, "http://100.80.0.9:7070"); err != nil {
			t.Errorf("100.80.0.9 with eth0 named the tailnet interface: %v", err)
		}
		if err := CheckPlaintext(other, "http://100.100.1.2:7070"); !errors.Is(err, ErrPlaintext) {
			t.Errorf("100.100.1.2 out tailscale0 with eth0 named the tailnet interface: %v, want ErrPlaintext", err)
		}
		if err := CheckPlaintext(ContextWithSecurity(ctx, Security{InsecurePlaintext: true}), "http://100.80.0.9:7070"); err != nil {
			t.Errorf("100.80.0.9 with --insecure-plaintext: %v", err)
		}
	})
}
