// Package tailnettest runs a whole Tailscale tailnet inside a test process:
// tailscale's test control server, a DERP relay and a STUN server, all on
// loopback, and tsnet devices joined to it. Devices get real WireGuard
// addresses, real tags and logins, and WhoIs answers about them exactly as it
// does on a real tailnet, so the coordinator's identity decisions are tested
// against the real thing, not a stand-in. Production code never imports it.
//
// Nothing here leaves the machine: the control, DERP and STUN servers listen
// on 127.0.0.1, the port mapper (which would probe the LAN gateway) is off,
// and devices advertise no interface addresses, so peers find each other
// through STUN on loopback.
package tailnettest

import (
	"context"
	"crypto/tls"
	"errors"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"tailscale.com/derp/derpserver"
	"tailscale.com/envknob"
	"tailscale.com/ipn/store/mem"
	"tailscale.com/net/netns"
	"tailscale.com/net/stun"
	"tailscale.com/tailcfg"
	"tailscale.com/tsnet"
	"tailscale.com/tstest/integration/testcontrol"
	"tailscale.com/types/key"
	"tailscale.com/types/logger"
)

// MagicDNSDomain is the tailnet's DNS suffix.
const MagicDNSDomain = "tail-scale.ts.net"

// LoginDomain is the domain of the logins the test control server hands out:
// the first person's device is user-1@LoginDomain, and so on.
const LoginDomain = "fake-control.example.net"

// joinTimeout bounds bringing up one device. On loopback it takes well under
// a second; the margin is for a loaded CI machine.
const joinTimeout = 30 * time.Second

var setup sync.Once

// processSetup does what must be done once per process before any tsnet
// starts: network namespaces (socket marks) need privileges tests do not
// have, and the knobs keep every packet on this machine.
func processSetup() {
	setup.Do(func() {
		netns.SetEnabled(false)
		envknob.Setenv("TS_DISABLE_PORTMAPPER", "1")
		envknob.Setenv("TS_DEBUG_OMIT_LOCAL_ADDRS", "1")
	})
}

// Tailnet is a running in-process tailnet.
type Tailnet struct {
	// ControlURL is what tsnet.Server.ControlURL (or the coordinator's
	// --ts-control-url) points at.
	ControlURL string
	Control    *testcontrol.Server
	logf       logger.Logf
}

// verbose reports whether tailscale's own logs should be shown, which is
// useful when a tailnet test hangs.
func verbose() bool { return os.Getenv("PODIUM_TEST_TAILNET_LOG") != "" }

// New starts a tailnet that lives until the test ends.
func New(t testing.TB) *Tailnet {
	t.Helper()
	processSetup()
	logf := logger.Discard
	if verbose() {
		logf = log.Printf // not t.Logf: tailscale logs from goroutines that outlive the test
	}
	derpMap := runDERPAndSTUN(t, logf)
	ctrl := &testcontrol.Server{
		DERPMap:        derpMap,
		DNSConfig:      &tailcfg.DNSConfig{Proxied: true},
		MagicDNSDomain: MagicDNSDomain,
		// A non-nil map makes the server honour the tags a device asks for,
		// as a tailnet whose ACL lets the key's owner assign them does.
		TagOwners: map[string][]string{},
		AllOnline: true,
		Logf:      logf,
	}
	ctrl.HTTPTestServer = httptest.NewUnstartedServer(ctrl)
	ctrl.HTTPTestServer.Config.ErrorLog = logger.StdLogger(logf)
	ctrl.HTTPTestServer.Start()
	t.Cleanup(ctrl.HTTPTestServer.Close)
	return &Tailnet{ControlURL: ctrl.HTTPTestServer.URL, Control: ctrl, logf: logf}
}

// runDERPAndSTUN starts a DERP relay (over TLS with a self-signed
// certificate, which the DERP map marks as acceptable for tests) and a STUN
// server, both on 127.0.0.1, and returns the DERP map naming them.
func runDERPAndSTUN(t testing.TB, logf logger.Logf) *tailcfg.DERPMap {
	d := derpserver.New(key.NewNode(), logf)
	derp := httptest.NewUnstartedServer(derpserver.Handler(d))
	derp.Config.ErrorLog = logger.StdLogger(logf)
	// DERP is HTTP/1.1 with an Upgrade; keep HTTP/2 off the table.
	derp.Config.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){}
	derp.StartTLS()

	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("tailnettest: STUN listener: %v", err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); serveSTUN(pc) }()
	t.Cleanup(func() {
		_ = pc.Close()
		wg.Wait()
		derp.CloseClientConnections()
		derp.Close()
		_ = d.Close()
	})
	return &tailcfg.DERPMap{Regions: map[int]*tailcfg.DERPRegion{
		1: {RegionID: 1, RegionCode: "test", Nodes: []*tailcfg.DERPNode{{
			Name: "t1", RegionID: 1, HostName: "127.0.0.1", IPv4: "127.0.0.1", IPv6: "none",
			STUNPort: pc.LocalAddr().(*net.UDPAddr).Port, STUNTestIP: "127.0.0.1",
			DERPPort:         derp.Listener.Addr().(*net.TCPAddr).Port,
			InsecureForTests: true,
		}}},
	}}
}

// serveSTUN answers binding requests with the address they came from, which
// is all a Tailscale client asks of STUN, until pc is closed.
func serveSTUN(pc net.PacketConn) {
	buf := make([]byte, 1500)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		tx, err := stun.ParseBindingRequest(buf[:n])
		if err != nil {
			continue
		}
		ua, ok := from.(*net.UDPAddr)
		if !ok {
			continue
		}
		_, _ = pc.WriteTo(stun.Response(tx, ua.AddrPort()), from)
	}
}

// Device is a tsnet device on the tailnet.
type Device struct {
	*tsnet.Server
	// IP is the device's tailnet IPv4 address.
	IP netip.Addr
	// Tags are the tags it asked for (and, here, got).
	Tags []string
}

// Join brings up a device named hostname with the given tags (none makes it
// a person's device, with a login of its own) and waits until it can talk to
// peers. It leaves the tailnet when the test ends.
func (tn *Tailnet) Join(t testing.TB, hostname string, tags ...string) *Device {
	t.Helper()
	dir := filepath.Join(t.TempDir(), hostname)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	s := &tsnet.Server{
		Dir: dir, Store: new(mem.Store), Hostname: hostname, ControlURL: tn.ControlURL,
		Ephemeral: true, AdvertiseTags: tags, UserLogf: tn.logf, Logf: tn.logf,
	}
	t.Cleanup(func() { _ = s.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), joinTimeout)
	defer cancel()
	st, err := s.Up(ctx)
	if err != nil {
		t.Fatalf("tailnettest: join %s: %v", hostname, err)
	}
	if err := WaitForDERP(ctx, s); err != nil {
		t.Fatalf("tailnettest: %s: %v", hostname, err)
	}
	d := &Device{Server: s, Tags: tags}
	for _, ip := range st.TailscaleIPs {
		if ip.Is4() {
			d.IP = ip
		}
	}
	return d
}

// WaitForDERP waits until s has chosen its home DERP region and heard from
// it. Until then the relay drops peers' discovery messages for s, and the
// first connection to it would stall for seconds on retransmits.
func WaitForDERP(ctx context.Context, s *tsnet.Server) error {
	health := s.Sys().HealthTracker.Get()
	sock := s.Sys().MagicSock.Get()
	for {
		if r := sock.GetLastNetcheckReport(ctx); r != nil && r.PreferredDERP != 0 &&
			!health.GetDERPRegionReceivedTime(r.PreferredDERP).IsZero() {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.New("no home DERP connection: " + ctx.Err().Error())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// HTTPClient speaks HTTP/2 without TLS through the device, as the agent and
// the CLI do to a coordinator on the tailnet.
func (d *Device) HTTPClient() *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: &p, DialContext: d.Dial}}
}

// HTTPSClient speaks HTTP/2 over TLS through the device, trusting ca, for a
// coordinator serving the tailnet's HTTPS name.
func (d *Device) HTTPSClient(ca *CA) *http.Client {
	var p http.Protocols
	p.SetHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: &p, DialContext: d.Dial,
		TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}
}
