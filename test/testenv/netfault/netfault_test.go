package netfault

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// echo serves a TCP echo on a free loopback port until the test ends.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

// A black-holed proxy passes nothing and closes nothing; once restored, what
// was held back arrives, in order, on the same connection.
func TestBlackHoleHoldsAndRestoreDelivers(t *testing.T) {
	t.Parallel()
	p := New(t, echo(t))
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 5)
	if _, err := c.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "hello" {
		t.Fatalf("through the proxy: %q, %v", buf, err)
	}

	p.BlackHole()
	if _, err := c.Write([]byte("world")); err != nil {
		t.Fatalf("a write into the black hole failed (%v); it should go nowhere silently", err)
	}
	// Absence can only be shown over a while: nothing comes back in 300 ms,
	// and the connection is not closed (a timeout, not EOF or a reset).
	_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if n, err := c.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read through the black hole: %d bytes, %v; want nothing and no error but the deadline", n, err)
	}

	p.Restore()
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "world" {
		t.Fatalf("after Restore: %q, %v; want what was held back", buf, err)
	}
}
