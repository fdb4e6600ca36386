package enroll

import (
	"fmt"
	"testing"
	"time"

	"github.com/podiumhq/podium/test/testenv/wait"
)

// Failures are counted per host, whatever port a client dials from: once an
// address has spent its burst it is refused, and other addresses are not.
func TestEnrollLimiterIsPerAddress(t *testing.T) {
	l := newEnrollLimiter(time.Hour, 3)
	for i := range 3 {
		addr := fmt.Sprintf("10.0.0.1:%d", 40000+i)
		if !l.allowed(addr) {
			t.Fatalf("failure %d refused before the burst of 3 was spent", i)
		}
		l.failed(addr)
	}
	if l.allowed("10.0.0.1:50000") {
		t.Fatal("an address that spent its burst may still try, from another port")
	}
	for _, other := range []string{"10.0.0.2:40000", "[::1]:40000", "10.0.0.10:1"} {
		if !l.allowed(other) {
			t.Fatalf("%s was refused for another address's failures", other)
		}
	}
}

// A refused address may try again once its bucket refills.
func TestEnrollLimiterRefills(t *testing.T) {
	l := newEnrollLimiter(time.Second, 1)
	l.failed("10.0.0.1:1")
	if l.allowed("10.0.0.1:1") {
		t.Fatal("allowed right after spending its one failure")
	}
	wait.For(t, 30*time.Second, "the address's bucket to refill", func() bool { return l.allowed("10.0.0.1:1") })
}

// The limiter forgets addresses whose bucket is full again, so a scan from
// many addresses does not grow it without bound.
func TestEnrollLimiterForgetsRefilledAddresses(t *testing.T) {
	l := newEnrollLimiter(time.Nanosecond, 1) // every bucket is full again at once
	for i := range 2000 {
		l.failed(fmt.Sprintf("10.%d.%d.1:1", i/250, i%250))
	}
	l.mu.Lock()
	n := len(l.buckets)
	l.mu.Unlock()
	if n > 1025 {
		t.Fatalf("%d addresses remembered after 2000 refilled ones; want at most 1025", n)
	}
}

func TestHostDropsThePort(t *testing.T) {
	for in, want := range map[string]string{
		"10.0.0.1:443": "10.0.0.1", "[fd7a::1]:7070": "fd7a::1", "10.0.0.1": "10.0.0.1", "": "",
	} {
		if got := host(in); got != want {
			t.Errorf("host(%q) = %q, want %q", in, got, want)
		}
	}
}
