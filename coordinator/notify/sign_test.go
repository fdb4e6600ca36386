package notify_test

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/podiumhq/podium/coordinator/notify"
)

// Issue 19, test 5: a signature verifies for the body and time it was made
// for, and fails for a stale timestamp (a replay), a changed body, another
// secret, or a header that is not one.
func TestVerify(t *testing.T) {
	secret, body := []byte("0123456789abcdef"), []byte(`{"schema":"podium.event.v1","id":"evt_1"}`)
	at := time.Unix(1_800_000_000, 0)
	h := notify.Sign(secret, body, at)
	if !strings.HasPrefix(h, "t=1800000000,v1=") {
		t.Fatalf("header %q: want t=<unix seconds>,v1=<hex>", h)
	}
	if err := notify.Verify(secret, h, body, at.Add(time.Minute), 0); err != nil {
		t.Fatalf("a fresh signature: %v", err)
	}
	for _, c := range []struct {
		what   string
		secret []byte
		header string
		body   []byte
		now    time.Time
		want   error
	}{
		{"stale timestamp", secret, h, body, at.Add(notify.DefaultTolerance + time.Second), notify.ErrStale},
		{"timestamp far ahead", secret, h, body, at.Add(-notify.DefaultTolerance - time.Second), notify.ErrStale},
		{"changed body", secret, h, append([]byte(nil), append(body, ' ')...), at, notify.ErrBadSignature},
		{"other secret", []byte("another secret"), h, body, at, notify.ErrBadSignature},
		{"timestamp changed", secret, strings.Replace(h, "t=1800000000", "t=1800000001", 1), body, at, notify.ErrBadSignature},
		{"no header", secret, "", body, at, notify.ErrNoSignature},
		{"no v1", secret, "t=1800000000", body, at, notify.ErrNoSignature},
	} {
		if err := notify.Verify(c.secret, c.header, c.body, c.now, 0); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.what, err, c.want)
		}
	}
	// A receiver changing secrets over accepts either of two signatures.
	both := notify.Sign([]byte("old"), body, at) + "," + strings.Split(h, ",")[1]
	if err := notify.Verify(secret, both, body, at, time.Minute); err != nil {
		t.Fatalf("two v1 signatures, the second matching: %v", err)
	}
}

// The per-task notify dialer's rule: loopback, private, link-local (the
// cloud metadata address included), shared (CGNAT, tailnet) and
// unspecified addresses are refused, in IPv4, IPv6 and IPv4-mapped form.
func TestPrivateAddress(t *testing.T) {
	for _, a := range []string{"127.0.0.1", "::1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254", "fe80::1",
		"fd00::1", "0.0.0.0", "::", "100.100.100.100", "::ffff:127.0.0.1", "224.0.0.1"} {
		if !notify.PrivateAddress(netip.MustParseAddr(a)) {
			t.Errorf("%s is not refused", a)
		}
	}
	for _, a := range []string{"93.184.216.34", "2606:2800:220:1::1", "8.8.8.8"} {
		if notify.PrivateAddress(netip.MustParseAddr(a)) {
			t.Errorf("%s is refused", a)
		}
	}
}

// Backoff doubles from the base to the cap, and the jitter takes off at
// most half.
func TestBackoff(t *testing.T) {
	w := notify.New(notify.Config{BackoffBase: time.Second, BackoffCap: 8 * time.Second}, notify.Deps{})
	for attempts, full := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 4: 8 * time.Second, 10: 8 * time.Second, 100: 8 * time.Second} {
		for range 50 {
			if d := w.Backoff(attempts); d < full/2 || d > full {
				t.Fatalf("after %d attempts: %v, want %v to %v", attempts, d, full/2, full)
			}
		}
	}
}

// A receiver in Go checks a delivery like this (the example in
// docs/webhooks.md).
func ExampleVerify() {
	secret := []byte("the secret podium webhook add printed")
	body := []byte(`{"schema":"podium.event.v1"}`)
	header := notify.Sign(secret, body, time.Now()) // what arrives as Podium-Signature
	if err := notify.Verify(secret, header, body, time.Now(), 5*time.Minute); err != nil {
		fmt.Println("refused:", err)
		return
	}
	fmt.Println("ok")
	// Output: ok
}
