package executor_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/network"

	"github.com/podiumhq/podium/agent/egress"
	"github.com/podiumhq/podium/agent/executor"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/wait"
)

// TestEgress runs tasks under the egress filter against targets the test
// makes on this machine, and nowhere else:
//
//   - an HTTP server of the test's own on the host, listening on every
//     address: reached through the task's own gateway, and through the
//     gateway of another Docker network the test creates (a host address
//     the task has no business with);
//   - a network namespace the test creates, joined to the host by a veth
//     pair, serving HTTP on an address outside every refused range (what the
//     internet is to a real task: traffic routed through the host) and on
//     one in the tailnet's range (100.64.0.0/10), which the test names as
//     the node's name server, so its port 53 stays open.
//
// Only the metadata address is outside the test's own: the task tries it
// once, for at most two seconds (busybox's own wget -T crashes, hence
// timeout), and the rules installed before the task
// starts reject it on the host.
func TestEgress(t *testing.T) {
	needRoot(t)
	t.Parallel()
	e := setup(t)
	ctx := context.Background()

	hostPort := serveHost(t)
	otherGW := otherNetworkGateway(t, e)
	ns := newNetns(t)

	e.egress = newFilter(t, egress.Config{
		// What the node lets a spec open: the other network's gateway and
		// the tailnet. Nothing opened for every task.
		Permit: []netip.Prefix{netip.PrefixFrom(otherGW, 32), netip.MustParsePrefix("100.64.0.0/10")},
		// The node's name server, as resolv.conf would name it, at an
		// address of the tailnet range: reachable on port 53 alone.
		Resolvers: []netip.Addr{ns.tailnet},
	})
	e.exec = e.newExecutor()
	// The same tasks on networks of a warm pool: their rules must be the
	// same as on networks made for them.
	pooled := e.startPool(t, 2)
	e.waitIdle(t, pooled, 2)

	script := fmt.Sprintf(`gw=$(ip route | awk '/^default/ {print $3}')
probe() { if out=$(timeout 2 wget -q -O- "$2" 2>/dev/null); then echo "$1 reached: $out"; else echo "$1 refused"; fi; }
probe metadata http://169.254.169.254/
probe own-gateway "http://$gw:%[1]d/"
probe other-gateway http://%[2]s:%[1]d/
probe tailnet http://%[3]s:8080/
probe tailnet-port-53 http://%[3]s:53/
probe outside http://%[4]s:8080/
podium-runner ask >/dev/null
`, hostPort, otherGW, ns.tailnet, ns.outside)

	// runProbes runs the script under spec's allow_egress on ex and
	// returns what it printed, checking on the way that the network's rules
	// are in place while the task runs and gone once it has been torn down.
	runProbes := func(t *testing.T, ex *executor.Executor, allow []string) string {
		rec := newRecorder()
		spec := e.sh(script)
		spec.AllowEgress = allow
		a := e.assign(t, spec)
		key := executor.Key{TaskID: a.TaskId, Attempt: a.Attempt}
		done, err := ex.Start(ctx, a, rec.emit)
		if err != nil {
			t.Fatal(err)
		}
		rec.waitState(t, podiumv1.TaskState_TASK_STATE_RUNNING)
		name, nw := e.networkOf(t, key)
		bridge := nw.Options[egress.BridgeOption]
		if pool := ex == pooled; pool != strings.HasPrefix(name, "podium-pool-") || (!pool && bridge != ex.BridgeName(key)) {
			t.Fatalf("the task runs on network %s with bridge %q (from the pool: want %v)", name, bridge, pool)
		}
		rules, err := e.egress.Rules(ctx, bridge)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(strings.Join(rules, "\n"), "-A PODIUM-EGRESS -i "+bridge+" -g PODIUM-EGRESS-") {
			t.Errorf("while the task runs, its bridge %s has no rules: %q", bridge, rules)
		}
		if _, err := ex.Inject(a.TaskId, a.Attempt, 1, "done"); err != nil {
			t.Fatal(err)
		}
		wait.Closed(t, time.Minute, "the task to end", done)
		if st := rec.final(t, key); st.GetState() != podiumv1.TaskState_TASK_STATE_SUCCEEDED {
			t.Fatalf("final status %v; stderr %q", st, rec.output(t, podiumv1.LogStream_LOG_STREAM_STDERR))
		}
		// Teardown removed the network, and its rules with it.
		if rules, err := e.egress.Rules(ctx, bridge); err != nil || len(rules) > 0 {
			t.Errorf("after teardown the rules of %s are %q (%v), want none", bridge, rules, err)
		}
		if out, _ := exec.Command("iptables", "-w", "-S").Output(); strings.Contains(string(out), bridge) {
			t.Errorf("after teardown iptables -S still names %s:\n%s", bridge, out)
		}
		return string(rec.output(t, podiumv1.LogStream_LOG_STREAM_STDOUT))
	}

	for _, c := range []struct {
		name string
		ex   *executor.Executor
	}{{"", e.exec}, {" on a pool network", pooled}} {
		t.Run("refused by default"+c.name, func(t *testing.T) {
			t.Parallel()
			got := runProbes(t, c.ex, nil)
			want := "metadata refused\nown-gateway refused\nother-gateway refused\ntailnet refused\ntailnet-port-53 reached: namespace\noutside reached: namespace\n"
			if got != want {
				t.Errorf("the task's probes printed\n%s\nwant\n%s", got, want)
			}
		})

		t.Run("opened by allow_egress where the node permits"+c.name, func(t *testing.T) {
			t.Parallel()
			got := runProbes(t, c.ex, []string{otherGW.String(), ns.tailnet.String() + "/32"})
			// The same targets as above, now reached: what refused them
			// before was the filter, not the way there.
			want := "metadata refused\nown-gateway refused\nother-gateway reached: host\ntailnet reached: namespace\ntailnet-port-53 reached: namespace\noutside reached: namespace\n"
			if got != want {
				t.Errorf("the task's probes printed\n%s\nwant\n%s", got, want)
			}
		})
	}

	t.Run("allow_egress the node does not permit", func(t *testing.T) {
		t.Parallel()
		spec := e.sh("echo should not run")
		spec.AllowEgress = []string{"100.64.0.0/10", "198.51.100.0/24"}
		rec := newRecorder()
		a := e.assign(t, spec)
		done, err := e.exec.Start(ctx, a, rec.emit)
		if err != nil {
			t.Fatal(err)
		}
		wait.Closed(t, time.Minute, "the task to end", done)
		st := rec.final(t, executor.Key{TaskID: a.TaskId, Attempt: a.Attempt})
		if st.GetState() != podiumv1.TaskState_TASK_STATE_FAILED || !strings.Contains(st.GetReason(), "allow_egress[1] 198.51.100.0/24: not permitted on this node") ||
			!strings.Contains(st.GetReason(), "--permit-egress") {
			t.Fatalf("final status %v, want FAILED naming allow_egress[1] and --permit-egress", st)
		}
		if out := rec.output(t, podiumv1.LogStream_LOG_STREAM_STDOUT); len(out) > 0 {
			t.Fatalf("the refused task ran and printed %q", out)
		}
	})

	t.Run("sidecars and their readiness", func(t *testing.T) {
		// The task's own network is not refused, whatever its addresses,
		// and the agent's readiness probes (from the host to the sidecar)
		// are answered through the filter.
		t.Parallel()
		spec := e.sh("timeout 2 wget -qO- http://web:8080/index.html; timeout 2 wget -qO- http://api:8081/index.html")
		spec.Sidecars = []*podiumv1.Sidecar{
			e.webSidecar("web", 8080, &podiumv1.Readiness{HttpPath: "/index.html", HttpPort: 8080, TimeoutSeconds: 20}),
			e.webSidecar("api", 8081, &podiumv1.Readiness{TcpPort: 8081, TimeoutSeconds: 20}),
		}
		rec, key := e.run(t, spec)
		if st := rec.final(t, key); st.GetState() != podiumv1.TaskState_TASK_STATE_SUCCEEDED {
			t.Fatalf("final status %v; stderr %q", st, rec.output(t, podiumv1.LogStream_LOG_STREAM_STDERR))
		}
		if got := string(rec.output(t, podiumv1.LogStream_LOG_STREAM_STDOUT)); got != "hello from web\nhello from api\n" {
			t.Fatalf("stdout %q", got)
		}
	})
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the egress filter changes iptables rules, which needs root")
	}
}

func newFilter(t *testing.T, cfg egress.Config) *egress.Filter {
	t.Helper()
	cfg.Logger = slog.New(slog.NewTextHandler(testWriter{t}, nil))
	f, err := egress.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// serveHost serves "host" over HTTP on every address of this machine, as a
// coordinator or anything else on a node might, and returns its port.
func serveHost(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "host") }),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return l.Addr().(*net.TCPAddr).Port
}

// otherNetworkGateway creates a Docker network of the test's own and
// returns its gateway: an address of this host, on a bridge that is not the
// task's.
func otherNetworkGateway(t *testing.T, e *env) netip.Addr {
	t.Helper()
	ctx := context.Background()
	name := "podium-egress-test-" + rand.Text()[:10]
	resp, err := e.docker.NetworkCreate(ctx, name, network.CreateOptions{Driver: "bridge", Labels: map[string]string{"podium.test": t.Name()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.docker.NetworkRemove(context.Background(), resp.ID) })
	info, err := e.docker.NetworkInspect(ctx, resp.ID, network.InspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range info.IPAM.Config {
		if gw, err := netip.ParseAddr(c.Gateway); err == nil && gw.Is4() {
			mustBeLocal(t, gw)
			return gw
		}
	}
	t.Fatalf("network %s has no IPv4 gateway: %+v", name, info.IPAM.Config)
	return netip.Addr{}
}

// mustBeLocal makes sure a probe of addr stays on this machine: the kernel
// routes it to one of the host's own addresses.
func mustBeLocal(t *testing.T, addr netip.Addr) {
	t.Helper()
	out, err := exec.Command("ip", "route", "get", addr.String()).CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "local "+addr.String()+" ") {
		t.Fatalf("%s is not an address of this host (ip route get: %v %s); the test will not send anything there", addr, err, out)
	}
}

// netns is a network namespace the test creates, joined to the host by a
// veth pair, with busybox httpd serving "namespace" on two addresses, on
// ports 8080 and 53.
type netns struct {
	outside netip.Addr // outside every refused range: routed through the host like the internet
	tailnet netip.Addr // in 100.64.0.0/10, refused unless allowed
}

// newNetns makes the namespace. Its addresses are random /30s of
// 198.18.0.0/15 (set aside for tests of network devices) and of
// 100.127.0.0/16, and the test checks the host routes both into the veth
// before anything is sent.
func newNetns(t *testing.T) *netns {
	t.Helper()
	id := hex.EncodeToString([]byte(rand.Text()[:3]))
	name, hostIf, nsIf := "podium-egt-"+id, "pdeh"+id, "pden"+id
	quad := func(base [4]byte) (host, peer netip.Addr) {
		n, _ := rand.Int(rand.Reader, big.NewInt(1<<14))
		v := int(n.Int64())
		base[2] += byte(v >> 6)
		base[3] = byte(v&63) * 4
		b := base
		b[3]++
		host = netip.AddrFrom4(b)
		b[3]++
		return host, netip.AddrFrom4(b)
	}
	outHost, outPeer := quad([4]byte{198, 18, 0, 0})
	tailHost, tailPeer := quad([4]byte{100, 127, 0, 0})
	ipCmd(t, "netns", "add", name)
	t.Cleanup(func() {
		_ = exec.Command("ip", "netns", "del", name).Run()
		_ = exec.Command("ip", "link", "del", hostIf).Run()
	})
	ipCmd(t, "link", "add", hostIf, "type", "veth", "peer", "name", nsIf)
	ipCmd(t, "link", "set", nsIf, "netns", name)
	ipCmd(t, "addr", "add", outHost.String()+"/30", "dev", hostIf)
	ipCmd(t, "addr", "add", tailHost.String()+"/30", "dev", hostIf)
	ipCmd(t, "link", "set", hostIf, "up")
	ipCmd(t, "-n", name, "addr", "add", outPeer.String()+"/30", "dev", nsIf)
	ipCmd(t, "-n", name, "addr", "add", tailPeer.String()+"/30", "dev", nsIf)
	ipCmd(t, "-n", name, "link", "set", "lo", "up")
	ipCmd(t, "-n", name, "link", "set", nsIf, "up")
	ipCmd(t, "-n", name, "route", "add", "default", "via", outHost.String())
	for _, a := range []netip.Addr{outPeer, tailPeer} {
		out, err := exec.Command("ip", "route", "get", a.String()).CombinedOutput()
		if err != nil || !strings.Contains(string(out), " dev "+hostIf+" ") {
			t.Fatalf("the host does not route %s into the test's namespace (ip route get: %v %s)", a, err, out)
		}
	}

	www := t.TempDir()
	if err := os.WriteFile(filepath.Join(www, "index.html"), []byte("namespace"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Port 53 stands for a name server (the filter lets DNS through to the
	// node's resolvers); HTTP on it is what busybox can serve and fetch.
	client := &http.Client{Timeout: 2 * time.Second}
	for _, port := range []string{"8080", "53"} {
		httpd := exec.Command("ip", "netns", "exec", name, "/bin/busybox", "httpd", "-f", "-p", port, "-h", www)
		if err := httpd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = httpd.Process.Kill(); _ = httpd.Wait() })
		wait.For(t, 30*time.Second, "busybox httpd on port "+port+" in the test's namespace", func() bool {
			resp, err := client.Get("http://" + outPeer.String() + ":" + port + "/")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		})
	}
	return &netns{outside: outPeer, tailnet: tailPeer}
}

func ipCmd(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}
