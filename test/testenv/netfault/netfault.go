// Package netfault puts a TCP proxy the test owns between two of Podium's
// parts (an agent and a coordinator replica), so that a test can cut the
// link as a pulled cable or a dropping firewall would, and mend it. It is
// in-process and needs no privileges. Production code never imports it.
package netfault

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
)

// Proxy forwards every TCP connection made to Addr to the target address.
type Proxy struct {
	target string
	ln     net.Listener

	mu    sync.Mutex
	open  chan struct{} // closed while traffic flows; a fresh one while black-holed
	holed bool
	conns map[net.Conn]struct{}

	closed chan struct{}
	wg     sync.WaitGroup
}

// New starts a proxy on a free loopback port forwarding to target
// ("host:port"); it is closed when the test ends.
func New(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("netfault: listen: %v", err)
	}
	p := &Proxy{target: target, ln: ln, open: make(chan struct{}), conns: map[net.Conn]struct{}{}, closed: make(chan struct{})}
	close(p.open)
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's "host:port".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// URL is "http://" and Addr: what an agent enrolls with, or a coordinator
// advertises, to be reached through the proxy.
func (p *Proxy) URL() string { return "http://" + p.Addr() }

// BlackHole stops forwarding in both directions, on every connection and on
// those made from now on, without closing anything: nothing is read, nothing
// is written, no error and no FIN or RST reaches either side. The kernel's
// buffers fill and the senders stall, as on a cut cable where TCP keeps
// retransmitting. (A new connection still completes its handshake with the
// proxy's kernel, then hears nothing back.)
func (p *Proxy) BlackHole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.holed {
		p.holed = true
		p.open = make(chan struct{})
	}
}

// Restore resumes forwarding: what was held back flows on, in order, as
// TCP's retransmissions would deliver it once the cable is back.
func (p *Proxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.holed {
		p.holed = false
		close(p.open)
	}
}

// Close stops the proxy and closes every connection through it.
func (p *Proxy) Close() {
	select {
	case <-p.closed:
		return
	default:
	}
	close(p.closed)
	_ = p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// flowing waits until traffic may flow; false once the proxy is closed.
func (p *Proxy) flowing() bool {
	p.mu.Lock()
	open := p.open
	p.mu.Unlock()
	select {
	case <-open:
		return true
	case <-p.closed:
		return false
	}
}

// track registers a connection for Close; false if the proxy is closed.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.closed:
		_ = c.Close()
		return false
	default:
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// serve dials the target once traffic may flow (a black hole answers no
// connection either) and pumps both ways.
func (p *Proxy) serve(c net.Conn) {
	defer p.wg.Done()
	defer c.Close()
	if !p.flowing() {
		return
	}
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	if !p.track(up) {
		return
	}
	defer up.Close()
	done := make(chan struct{}, 2)
	go func() { p.pump(up, c); done <- struct{}{} }()
	go func() { p.pump(c, up); done <- struct{}{} }()
	// One side ending ends the connection: close both, which ends the other
	// pump too.
	<-done
	_ = c.Close()
	_ = up.Close()
	<-done
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, up)
	p.mu.Unlock()
}

// pump copies src to dst, holding each read and each write while the proxy
// is black-holed.
func (p *Proxy) pump(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		if !p.flowing() {
			return
		}
		n, err := src.Read(buf)
		if n > 0 {
			if !p.flowing() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				// Half-close: pass the FIN on.
				if tc, ok := dst.(*net.TCPConn); ok {
					_ = tc.CloseWrite()
				}
			}
			return
		}
	}
}
