package egress

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
)

func TestBridgeName(t *testing.T) {
	a, b := BridgeName("node_1/podium-task_1-1"), BridgeName("node_1/podium-task_1-2")
	if a == b {
		t.Fatalf("two networks got the same bridge name %s", a)
	}
	if a != BridgeName("node_1/podium-task_1-1") {
		t.Fatal("BridgeName is not the same for the same network")
	}
	// IFNAMSIZ: 15 bytes and a NUL.
	if len(a) > 15 || !strings.HasPrefix(a, "podium-") || !IsBridge(a) {
		t.Fatalf("BridgeName = %q, want podium- and 8 hex digits, at most 15 bytes", a)
	}
	if c := networkChain(a); len(c) > 28 || c != "PODIUM-EGRESS-"+strings.TrimPrefix(a, "podium-") {
		t.Fatalf("the chain of %s is %q, want PODIUM-EGRESS- and its hex digits, at most 28 bytes", a, c)
	}
	for _, name := range []string{"", "podium-", "podium-1234567", "podium-123456789", "podium-1234567G", "podium-ABCDEF12", "br-1234567890ab", "docker0", "podium-1234 678"} {
		if IsBridge(name) {
			t.Errorf("IsBridge(%q) = true", name)
		}
	}
}

func TestCheck(t *testing.T) {
	f := &Filter{
		permit: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")},
		allow:  []netip.Prefix{netip.MustParsePrefix("192.0.2.10/32")},
	}
	for _, ok := range []string{"10.0.0.0/8", "10.1.2.0/24", "10.1.2.3/32", "192.0.2.10/32", "fd00:1::/32"} {
		if err := f.Check([]netip.Prefix{netip.MustParsePrefix(ok)}); err != nil {
			t.Errorf("Check(%s) = %v, want nil", ok, err)
		}
	}
	for _, refused := range []string{"0.0.0.0/0", "10.0.0.0/7", "11.0.0.0/8", "192.0.2.0/24", "169.254.169.254/32", "::/0", "fe80::/10", "::ffff:10.0.0.0/104"} {
		allow := []netip.Prefix{netip.MustParsePrefix("10.9.0.0/16"), netip.MustParsePrefix(refused)}
		err := f.Check(allow)
		if !errors.Is(err, ErrNotPermitted) || !strings.Contains(err.Error(), "allow_egress[1] "+refused) ||
			!strings.Contains(err.Error(), "permits only 10.0.0.0/8, fd00::/8, 192.0.2.10/32 (podium-agent --permit-egress)") {
			t.Errorf("Check(%s) = %v, want ErrNotPermitted naming allow_egress[1] and what the node permits", refused, err)
		}
	}
	none := &Filter{}
	if err := none.Check([]netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}); !errors.Is(err, ErrNotPermitted) || !strings.Contains(err.Error(), "permits no range") {
		t.Errorf("Check on a node that permits nothing = %v", err)
	}
	if err := none.Check(nil); err != nil {
		t.Errorf("Check(nil) = %v", err)
	}
	if got := strings.Join(f.PermitEgress(), " "); got != "10.0.0.0/8 fd00::/8 192.0.2.10/32" {
		t.Errorf("PermitEgress = %q", got)
	}
}

// The name servers come from resolv.conf as Docker reads them, less the
// loopback ones Docker does not hand to containers.
func TestHostResolvers(t *testing.T) {
	dir := t.TempDir()
	etc, resolved := dir+"/resolv.conf", dir+"/resolved.conf"
	if err := os.WriteFile(etc, []byte("# a comment\nsearch example.org\nnameserver 127.0.0.53\nnameserver 169.254.169.254\noptions edns0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(resolved, []byte("nameserver 10.0.0.2\nnameserver fe80::1%eth0\nnameserver 169.254.169.254\nnameserver ::1\nnameserver bogus\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprint(hostResolvers(etc, dir+"/missing", resolved))
	if got != "[169.254.169.254 10.0.0.2 fe80::1]" {
		t.Errorf("hostResolvers = %s, want [169.254.169.254 10.0.0.2 fe80::1]", got)
	}
}

// A node without iptables cannot filter: New says how to install it and how
// to turn the filter off.
func TestNewWithoutIptables(t *testing.T) {
	t.Parallel()
	_, err := New(context.Background(), Config{SearchPath: t.TempDir(), LockPath: t.TempDir() + "/lock"})
	if err == nil {
		t.Fatal("New found iptables in an empty directory")
	}
	for _, want := range []string{"needs iptables, which is not installed", "apt-get install iptables", "--egress-filter=false"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("New's error %q does not say %q", err, want)
		}
	}
}

// needRoot skips a test that changes the host's firewall where it cannot.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("changing iptables rules needs root")
	}
}

// newBridge creates a Linux bridge with a task bridge's name, as Docker
// would for a task network, and removes it when the test ends unless the
// test removed it first.
func newBridge(t *testing.T) string {
	t.Helper()
	name := BridgeName(fmt.Sprintf("egress-test/%d/%s/%s", os.Getpid(), t.Name(), rand.Text()))
	ip(t, "link", "add", name, "type", "bridge")
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", name).Run() })
	return name
}

func ip(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func newFilter(t *testing.T, cfg Config) *Filter {
	t.Helper()
	cfg.Logger = slog.New(slog.NewTextHandler(testWriter{t}, nil))
	f, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// iptablesS is `iptables -S` (or ip6tables) of the filter table, as the
// filter's own tool prints it.
func iptablesS(t *testing.T, f *Filter, v6 bool) string {
	t.Helper()
	for _, fam := range f.fams {
		if fam.v6 == v6 {
			out, err := run(context.Background(), fam.cmd, nil, "-w", "-S")
			if err != nil {
				t.Fatal(err)
			}
			return string(out)
		}
	}
	t.Fatalf("the filter has no family with v6=%v", v6)
	return ""
}

// Open installs a network's chain and the jump to it, hooked from INPUT and
// DOCKER-USER; opening it again replaces its rules; Close removes both, and
// closing again is no error.
func TestOpenAndClose(t *testing.T) {
	needRoot(t)
	t.Parallel()
	ctx := context.Background()
	br := newBridge(t)
	f := newFilter(t, Config{
		Allow:     []netip.Prefix{netip.MustParsePrefix("192.0.2.10/32")},
		Resolvers: []netip.Addr{netip.MustParseAddr("169.254.169.254"), netip.MustParseAddr("fd00:ec2::254")},
	})
	t.Cleanup(func() { _ = f.Close(ctx, br) })
	if err := f.Open(ctx, br, []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24"), netip.MustParsePrefix("fd00:1::/32")}); err != nil {
		t.Fatal(err)
	}
	chain := networkChain(br)
	rules, err := f.Rules(ctx, br)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(rules, "\n")
	for _, want := range []string{
		"IPv4: -A PODIUM-EGRESS -i " + br + " -g " + chain,
		"IPv4: -A " + chain + " -o " + br + " -j RETURN",
		"IPv4: -A " + chain + " -m conntrack --ctstate RELATED,ESTABLISHED -j RETURN",
		"IPv4: -A " + chain + " -d 192.0.2.10/32 -j RETURN",
		"IPv4: -A " + chain + " -d 198.51.100.0/24 -j RETURN",
		"IPv4: -A " + chain + " -d 169.254.169.254/32 -p udp -m udp --dport 53 -j RETURN",
		"IPv4: -A " + chain + " -d 169.254.169.254/32 -p tcp -m tcp --dport 53 -j RETURN",
		"IPv4: -A " + chain + " -d 169.254.0.0/16 -j REJECT --reject-with icmp-admin-prohibited",
		"IPv4: -A " + chain + " -d 100.64.0.0/10 -j REJECT --reject-with icmp-admin-prohibited",
		"IPv4: -A " + chain + " -m addrtype --dst-type LOCAL -j REJECT --reject-with icmp-admin-prohibited",
		"IPv4: -A " + chain + " -m conntrack --ctstate DNAT -j REJECT --reject-with icmp-admin-prohibited",
	} {
		if !strings.Contains(got, want+"\n") {
			t.Errorf("the rules of %s lack %q; they are:\n%s", br, want, got)
		}
	}
	if strings.Contains(got, "IPv4: -A "+chain+" -d fd00") || strings.Contains(got, "IPv6: -A "+chain+" -d 198.51") {
		t.Errorf("a range went to the other family's rules:\n%s", got)
	}
	// Allowed first, then refused: the first match decides.
	for _, allowed := range []string{"-d 198.51.100.0/24 -j RETURN", "-d 169.254.169.254/32 -p tcp -m tcp --dport 53 -j RETURN"} {
		if strings.Index(got, allowed) > strings.Index(got, "-d 169.254.0.0/16") {
			t.Errorf("a refusal comes before %q:\n%s", allowed, got)
		}
	}
	if ipv6Enabled() {
		for _, want := range []string{
			"IPv6: -A PODIUM-EGRESS -i " + br + " -g " + chain,
			"IPv6: -A " + chain + " -d fd00:1::/32 -j RETURN",
			"IPv6: -A " + chain + " -d fd00:ec2::254/128 -p udp -m udp --dport 53 -j RETURN",
			"IPv6: -A " + chain + " -d fd7a:115c:a1e0::/48 -j REJECT --reject-with icmp6-adm-prohibited",
			"IPv6: -A " + chain + " -m addrtype --dst-type LOCAL -j REJECT --reject-with icmp6-adm-prohibited",
		} {
			if !strings.Contains(got, want+"\n") {
				t.Errorf("the rules of %s lack %q; they are:\n%s", br, want, got)
			}
		}
	}
	// The hooks, and the catch-all behind the networks' jumps.
	for _, v6 := range []bool{false, true} {
		if v6 && !ipv6Enabled() {
			continue
		}
		tbl := parseTable([]byte(iptablesS(t, f, v6)))
		if r := tbl.rules["INPUT"]; len(r) == 0 || !contains(r, "-i podium-+ -j PODIUM-EGRESS") {
			t.Errorf("v6=%v: INPUT does not jump to PODIUM-EGRESS: %q", v6, r)
		}
		fwd := "DOCKER-USER"
		if !tbl.chains[fwd] {
			fwd = "FORWARD"
		}
		if r := tbl.rules[fwd]; !contains(r, "-i podium-+ -j PODIUM-EGRESS") {
			t.Errorf("v6=%v: %s does not jump to PODIUM-EGRESS: %q", v6, fwd, r)
		}
		base := tbl.rules[Chain]
		if len(base) == 0 || !strings.HasPrefix(base[len(base)-1], "-j REJECT") {
			t.Errorf("v6=%v: PODIUM-EGRESS does not end with its catch-all REJECT: %q", v6, base)
		}
	}

	// Opening again replaces the rules: the spec's ranges of before are gone.
	if err := f.Open(ctx, br, nil); err != nil {
		t.Fatal(err)
	}
	rules, _ = f.Rules(ctx, br)
	got = strings.Join(rules, "\n") + "\n"
	if strings.Contains(got, "198.51.100.0/24") || !strings.Contains(got, "192.0.2.10/32") || strings.Count(got, "-A PODIUM-EGRESS -i "+br) != len(f.fams) {
		t.Errorf("after opening again with no ranges of its own, the rules are:\n%s", got)
	}

	if err := f.Close(ctx, br); err != nil {
		t.Fatal(err)
	}
	if rules, _ := f.Rules(ctx, br); len(rules) > 0 {
		t.Errorf("after Close the rules of %s are still there:\n%s", br, strings.Join(rules, "\n"))
	}
	if s := iptablesS(t, f, false); strings.Contains(s, chain) {
		t.Errorf("after Close iptables still names %s:\n%s", chain, s)
	}
	if err := f.Close(ctx, br); err != nil {
		t.Errorf("closing again: %v", err)
	}
}

// Rules outlive the agent process while their bridge exists (its tasks keep
// running, and must stay filtered); the next agent process's New removes
// those of bridges that are gone.
func TestNewSweepsRulesOfBridgesThatAreGone(t *testing.T) {
	needRoot(t)
	t.Parallel()
	ctx := context.Background()
	live, gone := newBridge(t), newBridge(t)
	f := newFilter(t, Config{})
	t.Cleanup(func() { _ = f.Close(ctx, live); _ = f.Close(ctx, gone) })
	for _, br := range []string{live, gone} {
		if err := f.Open(ctx, br, nil); err != nil {
			t.Fatal(err)
		}
	}
	ip(t, "link", "del", gone)

	newFilter(t, Config{}) // the next agent process
	if rules, _ := f.Rules(ctx, gone); len(rules) > 0 {
		t.Errorf("the rules of %s, whose bridge is gone, were not swept:\n%s", gone, strings.Join(rules, "\n"))
	}
	if rules, _ := f.Rules(ctx, live); len(rules) == 0 {
		t.Errorf("the rules of %s, whose bridge exists, were swept", live)
	}
}

// A bridge the agent cannot see (it runs in another network namespace than
// the engine) would be filtered by nothing: Open refuses it.
func TestOpenRefusesAnInvisibleBridge(t *testing.T) {
	needRoot(t)
	t.Parallel()
	f := newFilter(t, Config{})
	br := BridgeName(fmt.Sprintf("egress-test/%d/%s", os.Getpid(), rand.Text()))
	err := f.Open(context.Background(), br, nil)
	if err == nil || !strings.Contains(err.Error(), "is not among this machine's interfaces") || !strings.Contains(err.Error(), "--egress-filter=false") {
		t.Fatalf("Open of a bridge that does not exist = %v", err)
	}
	if err := f.Open(context.Background(), "docker0", nil); err == nil || !strings.Contains(err.Error(), "not a task bridge name") {
		t.Fatalf("Open(docker0) = %v", err)
	}
}

func contains(rules []string, rule string) bool {
	for _, r := range rules {
		if r == rule {
			return true
		}
	}
	return false
}
