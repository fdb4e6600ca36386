// Package egress keeps a node's tasks away from what they should not reach:
// the cloud's metadata service and the rest of link-local, the node itself
// (every address it has, Docker's bridge gateways included), and the
// tailnet the node sits on. A task is untrusted code on a machine a team
// shares; a route to 169.254.169.254 hands it the machine's cloud
// credentials, a route to the host hands it the coordinator's port and
// whatever else listens there, and a route into the tailnet hands it every
// other machine of the team.
//
// # How
//
// Every task attempt runs on a private bridge network whose Linux bridge is
// given a name Podium chooses (BridgeName, set through the network option
// BridgeOption), so its packets can be told apart by the interface they
// come in on. The rules live in the filter table, in chains of Podium's own,
// for IPv4 (iptables) and IPv6 (ip6tables) alike:
//
//	INPUT         -i podium-+ -j PODIUM-EGRESS          (traffic to the host itself)
//	DOCKER-USER   -i podium-+ -j PODIUM-EGRESS          (traffic routed through it)
//	PODIUM-EGRESS -i podium-1a2b3c4d -g PODIUM-EGRESS-1a2b3c4d   one per task network
//	              -j REJECT                             a task bridge without its rules
//	PODIUM-EGRESS-1a2b3c4d                              the network's own rules:
//	              -o podium-1a2b3c4d -j RETURN          its own containers (the sidecars)
//	              --ctstate RELATED,ESTABLISHED -j RETURN   replies (the agent's readiness probes)
//	              -d RESOLVER --dport 53 -j RETURN      the host's name servers, DNS alone
//	              -d ALLOWED -j RETURN                  --allow-egress, and the spec's allow_egress
//	              -d BLOCKED -j REJECT                  Blocked: link-local, tailnet, metadata
//	              --dst-type LOCAL|BROADCAST|MULTICAST -j REJECT   the host's own addresses
//	              --ctstate DNAT -j REJECT              the host's addresses, rewritten by a
//	                                                    published port to a container's
//
// DOCKER-USER is where Docker lets others filter forwarded traffic before its
// own rules accept it; it does not see traffic addressed to the host, which
// is why INPUT is hooked too. Where a table has no DOCKER-USER (ip6tables
// under Docker 20.10, or an engine run without its iptables rules) the hook is
// at the top of FORWARD instead. The host's addresses are matched by type
// (addrtype LOCAL) when the packet is seen, not listed when the rules are
// made, so an address added later (a new Docker network's gateway, a
// tailnet address) is covered too. Whatever is not refused returns to
// Docker's own rules unchanged.
//
// The name servers of the host's resolv.conf stay reachable on port 53
// whatever their address: Docker's embedded resolver forwards each task's
// queries to them from inside the task's network, and on some clouds the
// resolver is the metadata address itself (169.254.169.254 on GCE).
//
// Refused traffic is rejected rather than silently dropped: the task's
// connect fails at once with "no route to host" instead of hanging until
// its own timeout, which is kinder to a build that probes for a metadata
// service. Nothing is sent beyond the host either way.
//
// The catch-all REJECT of PODIUM-EGRESS fails closed: a task bridge whose
// own rules are missing, for whatever reason, reaches nothing outside its
// network.
//
// # Lifetime
//
// Open installs a network's rules once the network exists and before any of
// its containers start; Close removes them once the network is gone. The
// rules outlive the agent process on purpose (its tasks do too, and a task
// must not gain a route because its agent restarted); New sweeps away the
// rules of bridges that no longer exist, which is what an agent that
// crashed between removing a network and its rules leaves behind. Every
// change is made under a lock file shared by every agent process on the
// machine, and a network's rules are replaced in one iptables-restore
// transaction, so no packet sees half of them.
//
// # Which iptables
//
// The rules must go where Docker's are: iptables has two back ends (nf_tables
// and the legacy one) and a rule added through the other one than dockerd
// uses would sit in tables nobody consults first. New picks the variant
// (iptables, iptables-nft, iptables-legacy) whose filter table holds Docker's
// DOCKER-USER chain, falling back to plain iptables.
package egress

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	// Chain is Podium's own chain, jumped to from INPUT and DOCKER-USER for
	// packets that come in on a task bridge.
	Chain = "PODIUM-EGRESS"
	// networkChainPrefix starts the name of one network's chain, followed
	// by the bridge name's suffix: PODIUM-EGRESS-1a2b3c4d (22 bytes; iptables
	// allows 28).
	networkChainPrefix = Chain + "-"
	// BridgePrefix starts the Linux bridge name of every task network
	// (podium-1a2b3c4d: 15 bytes, the kernel's limit).
	BridgePrefix = "podium-"
	// BridgeOption is the Docker network option that names the network's
	// Linux bridge (Docker's bridge driver, every engine version).
	BridgeOption = "com.docker.network.bridge.name"
	// DefaultLockPath is the lock file every agent process on the machine
	// takes before changing the rules. /run/podium-agent is the unit's
	// RuntimeDirectory, writable under its sandbox.
	DefaultLockPath = "/run/podium-agent/egress.lock"
)

// bridgeHexLen is how many hex digits of a hash follow BridgePrefix.
const bridgeHexLen = 8

// Blocked are the ranges a task may not reach unless the node allows them
// (Config.Allow) or permits its spec to ask (Config.Permit). The node's own
// addresses are refused as well; they are matched by type, not listed here.
var Blocked = []netip.Prefix{
	// Link-local: the cloud metadata service (169.254.169.254) and
	// whatever else a provider answers there.
	netip.MustParsePrefix("169.254.0.0/16"),
	// Shared address space, which Tailscale uses for tailnet addresses.
	netip.MustParsePrefix("100.64.0.0/10"),
	// IPv6 link-local.
	netip.MustParsePrefix("fe80::/10"),
	// Tailscale's IPv6 tailnet range.
	netip.MustParsePrefix("fd7a:115c:a1e0::/48"),
	// The cloud metadata service over IPv6 (EC2's address).
	netip.MustParsePrefix("fd00:ec2::254/128"),
}

// Everything is what a node without the filter reports it permits: a task
// may ask for any range, since none is refused there.
var Everything = []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}

// ErrNotPermitted is returned by Check for an allow_egress range the node
// does not permit.
var ErrNotPermitted = errors.New("not permitted on this node")

// Config is what New needs.
type Config struct {
	// Allow are opened for every task on the node (podium-agent
	// --allow-egress), a proxy on a host address, say.
	Allow []netip.Prefix
	// Permit are the ranges a task's spec may open for itself with
	// allow_egress (podium-agent --permit-egress).
	Permit []netip.Prefix
	// Logger receives what the filter does; nil means slog.Default().
	Logger *slog.Logger
	// LockPath is the lock file shared by every agent process on the
	// machine; empty means DefaultLockPath.
	LockPath string
	// Resolvers are the name servers tasks' DNS queries go to: Docker's
	// embedded resolver forwards them from inside the task's network, so
	// one in a refused range (GCE's is 169.254.169.254, a dnsmasq may sit
	// on a host address) must stay reachable, on port 53 alone. Nil means
	// the nameservers of /etc/resolv.conf and of systemd-resolved's
	// /run/systemd/resolve/resolv.conf, which is where Docker takes them
	// from.
	Resolvers []netip.Addr
	// SearchPath is where iptables is looked for, as $PATH lists
	// directories; empty means $PATH and the sbin directories, which a
	// non-root $PATH leaves out.
	SearchPath string
}

// Filter installs and removes the rules of task networks. It is safe for
// concurrent use.
type Filter struct {
	allow     []netip.Prefix
	permit    []netip.Prefix
	resolvers []netip.Addr
	log       *slog.Logger
	lockPath  string
	fams      []*family
	mu        sync.Mutex
}

// family is one address family's tools and the chain its forwarded traffic
// is hooked from.
type family struct {
	name     string // IPv4, IPv6
	v6       bool
	cmd      string // iptables, ip6tables, or a variant: the absolute path
	restore  string // the matching -restore
	forward  string // DOCKER-USER, or FORWARD when the table has none
	rejectIt string // the REJECT target with this family's ICMP type
}

// BridgeName is the Linux bridge name of the task network named id: short
// enough for the kernel (15 bytes), recognisable as Podium's, and the same
// every time for the same network, so a restarted agent finds the rules of
// the networks it left.
func BridgeName(id string) string {
	h := sha256.Sum256([]byte(id))
	return BridgePrefix + hex.EncodeToString(h[:])[:bridgeHexLen]
}

// IsBridge reports whether name is a bridge name BridgeName gives.
func IsBridge(name string) bool {
	suffix, ok := strings.CutPrefix(name, BridgePrefix)
	if !ok || len(suffix) != bridgeHexLen {
		return false
	}
	for _, c := range suffix {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

func networkChain(bridge string) string {
	return networkChainPrefix + strings.TrimPrefix(bridge, BridgePrefix)
}

// New finds iptables, hooks Podium's chain into INPUT and DOCKER-USER (or
// FORWARD) if it is not there yet, and removes the rules of task bridges that
// no longer exist. It fails, saying how to install iptables or how to turn
// the filter off, when iptables is missing or cannot be used (the agent is
// not root).
func New(ctx context.Context, cfg Config) (*Filter, error) {
	f := &Filter{
		allow:    slices.Clone(cfg.Allow),
		permit:   slices.Clone(cfg.Permit),
		log:      cfg.Logger,
		lockPath: cfg.LockPath,
	}
	f.resolvers = cfg.Resolvers
	if f.resolvers == nil {
		f.resolvers = hostResolvers("/etc/resolv.conf", "/run/systemd/resolve/resolv.conf")
	}
	if f.log == nil {
		f.log = slog.Default()
	}
	if f.lockPath == "" {
		f.lockPath = DefaultLockPath
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := f.findTools(ctx, cfg.SearchPath); err != nil {
		return nil, err
	}
	unlock, err := f.lock(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	for _, fam := range f.fams {
		if err := f.setUp(ctx, fam); err != nil {
			return nil, err
		}
	}
	names := make([]string, 0, len(f.fams))
	for _, fam := range f.fams {
		names = append(names, fmt.Sprintf("%s (%s, hooked from INPUT and %s)", fam.name, filepath.Base(fam.cmd), fam.forward))
	}
	f.log.Info("task egress filter on", "families", strings.Join(names, "; "),
		"allow", prefixStrings(f.allow), "permit", prefixStrings(f.permit), "dns_to", f.resolvers)
	return f, nil
}

// notInstalled is the error for a node without iptables.
func notInstalled(what string) error {
	return fmt.Errorf("the task egress filter needs %s, which is not installed here: install it "+
		"(apt-get install iptables; docker.io and docker-ce depend on it), or run podium-agent with "+
		"--egress-filter=false, which lets tasks reach link-local (cloud metadata), this host's and tailnet addresses", what)
}

// findTools picks the iptables variant Docker uses and its IPv6 twin.
func (f *Filter) findTools(ctx context.Context, searchPath string) error {
	if searchPath == "" {
		searchPath = os.Getenv("PATH") + string(filepath.ListSeparator) + "/usr/sbin:/sbin:/usr/bin:/bin"
	}
	find := func(name string) string {
		for _, dir := range filepath.SplitList(searchPath) {
			if dir == "" {
				continue
			}
			p := filepath.Join(dir, name)
			if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
				return p
			}
		}
		return ""
	}
	var chosen string
	var chosenDocker bool
	var firstErr error
	for _, variant := range []string{"iptables", "iptables-nft", "iptables-legacy"} {
		p := find(variant)
		if p == "" {
			continue
		}
		out, err := run(ctx, p, nil, "-w", "-S")
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		if parseTable(out).chains["DOCKER-USER"] {
			chosen, chosenDocker = variant, true
			break
		}
		if chosen == "" {
			chosen = variant
		}
	}
	if chosen == "" {
		if firstErr != nil {
			return fmt.Errorf("the task egress filter cannot use iptables (%v): run podium-agent as root "+
				"(it needs CAP_NET_ADMIN), or with --egress-filter=false, which lets tasks reach link-local "+
				"(cloud metadata), this host's and tailnet addresses", firstErr)
		}
		return notInstalled("iptables")
	}
	v6 := "ip6" + strings.TrimPrefix(chosen, "ip")
	for _, spec := range []struct {
		name, cmd string
		v6        bool
	}{{"IPv4", chosen, false}, {"IPv6", v6, true}} {
		cmd, restore := find(spec.cmd), find(spec.cmd+"-restore")
		if spec.v6 && !ipv6Enabled() {
			f.log.Info("IPv6 is off in this kernel; the task egress filter covers IPv4 only")
			continue
		}
		if cmd == "" {
			return notInstalled(spec.cmd)
		}
		if restore == "" {
			return notInstalled(spec.cmd + "-restore")
		}
		out, err := run(ctx, cmd, nil, "-w", "-S")
		if err != nil {
			return fmt.Errorf("the task egress filter cannot use %s (%v): run podium-agent as root, "+
				"or with --egress-filter=false, which lets tasks reach link-local (cloud metadata), this host's and tailnet addresses", spec.cmd, err)
		}
		fam := &family{name: spec.name, v6: spec.v6, cmd: cmd, restore: restore, forward: "FORWARD",
			rejectIt: "-j REJECT --reject-with icmp-admin-prohibited"}
		if spec.v6 {
			fam.rejectIt = "-j REJECT --reject-with icmp6-adm-prohibited"
		}
		if parseTable(out).chains["DOCKER-USER"] {
			fam.forward = "DOCKER-USER"
		} else if !spec.v6 {
			f.log.Warn("iptables has no DOCKER-USER chain (is the Docker engine running with its iptables rules?); "+
				"hooking the task egress filter at the top of FORWARD instead", "iptables", chosen, "docker_user_found", chosenDocker)
		}
		f.fams = append(f.fams, fam)
	}
	return nil
}

// ipv6Enabled says whether the kernel has IPv6 at all: without it there is
// nothing for ip6tables to filter, and it cannot run.
func ipv6Enabled() bool {
	_, err := os.Stat("/proc/net/if_inet6")
	return err == nil
}

// setUp adds what is missing of the chain and its hooks, and sweeps the
// rules of bridges that are gone. The lock is held.
func (f *Filter) setUp(ctx context.Context, fam *family) error {
	tbl, err := f.list(ctx, fam)
	if err != nil {
		return err
	}
	if lines := f.base(fam, tbl); len(lines) > 0 {
		if err := f.restore(ctx, fam, lines); err != nil {
			return fmt.Errorf("install the %s chain %s: %w", fam.name, Chain, err)
		}
		if tbl, err = f.list(ctx, fam); err != nil {
			return err
		}
	}
	var flush, drop []string
	gone := map[string]bool{}
	for name := range tbl.chains {
		if suffix, ok := strings.CutPrefix(name, networkChainPrefix); ok && !bridgeExists(BridgePrefix+suffix) {
			gone[name] = true
		}
	}
	for _, r := range tbl.rules[Chain] {
		in, target := ruleJump(r)
		if target == "" || !strings.HasPrefix(target, networkChainPrefix) {
			continue
		}
		if gone[target] || !bridgeExists(in) {
			flush = append(flush, "-D "+Chain+" "+r)
			if tbl.chains[target] {
				gone[target] = true
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(gone)) {
		flush = append(flush, "-F "+name)
		drop = append(drop, "-X "+name)
	}
	if len(gone) > 0 {
		f.log.Info("removing the egress rules of task networks that no longer exist", "family", fam.name, "chains", len(gone))
	}
	return f.remove(ctx, fam, flush, drop)
}

// base is what the restore input needs to add to make Podium's chain and
// its hooks complete.
func (f *Filter) base(fam *family, tbl table) []string {
	var lines []string
	if !tbl.chains[Chain] {
		lines = append(lines, ":"+Chain+" - [0:0]", "-A "+Chain+" "+fam.rejectIt)
	} else if !slices.Contains(tbl.rules[Chain], fam.rejectIt) {
		lines = append(lines, "-A "+Chain+" "+fam.rejectIt)
	}
	hook := "-i " + BridgePrefix + "+ -j " + Chain
	for _, from := range []string{"INPUT", fam.forward} {
		if !slices.Contains(tbl.rules[from], hook) {
			lines = append(lines, "-I "+from+" 1 "+hook)
		}
	}
	return lines
}

// Check returns nil if the node lets a task open every range of allow
// (the spec's allow_egress): each must lie within a range of Config.Permit
// or Config.Allow. The error, wrapping ErrNotPermitted, names the first one
// that does not and what the node permits.
func (f *Filter) Check(allow []netip.Prefix) error {
	ok := append(slices.Clone(f.permit), f.allow...)
	for i, p := range allow {
		if !covered(p, ok) {
			if len(ok) == 0 {
				return fmt.Errorf("allow_egress[%d] %s: %w, which permits no range (podium-agent --permit-egress CIDR permits one)", i, p, ErrNotPermitted)
			}
			return fmt.Errorf("allow_egress[%d] %s: %w, which permits only %s (podium-agent --permit-egress)",
				i, p, ErrNotPermitted, strings.Join(prefixStrings(ok), ", "))
		}
	}
	return nil
}

// Covered reports whether p lies wholly within one of the ranges of within.
func Covered(p netip.Prefix, within []netip.Prefix) bool { return covered(p, within) }

func covered(p netip.Prefix, within []netip.Prefix) bool {
	for _, q := range within {
		if q.Addr().Is4() == p.Addr().Is4() && q.Bits() <= p.Bits() && q.Contains(p.Addr()) {
			return true
		}
	}
	return false
}

// PermitEgress is what the node reports a spec's allow_egress may name: the
// ranges it permits and those it opens for every task anyway.
func (f *Filter) PermitEgress() []string {
	return prefixStrings(append(slices.Clone(f.permit), f.allow...))
}

// Open installs the rules of the task network whose bridge is bridge (a
// BridgeName): what every task may not reach, less the node's Allow and
// allow, the ranges the task's spec opens (checked with Check beforehand).
// It replaces whatever rules the network had, so calling it again is safe.
// The bridge must exist and be visible here: rules for an interface this
// network namespace does not have would filter nothing.
func (f *Filter) Open(ctx context.Context, bridge string, allow []netip.Prefix) error {
	if !IsBridge(bridge) {
		return fmt.Errorf("egress: %q is not a task bridge name (want %s followed by %d hex digits)", bridge, BridgePrefix, bridgeHexLen)
	}
	if !bridgeExists(bridge) {
		return fmt.Errorf("the task network's bridge %s is not among this machine's interfaces as the agent sees them, "+
			"so its egress rules would filter nothing: run podium-agent in the Docker engine's network namespace "+
			"(on the host, not in a container), or with --egress-filter=false", bridge)
	}
	open := append(slices.Clone(f.allow), allow...)
	unlock, err := f.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	chain := networkChain(bridge)
	jump := "-i " + bridge + " -g " + chain
	for _, fam := range f.fams {
		tbl, err := f.list(ctx, fam)
		if err != nil {
			return err
		}
		lines := f.base(fam, tbl)
		lines = append(lines, ":"+chain+" - [0:0]")
		for _, r := range fam.networkRules(bridge, open, f.resolvers) {
			lines = append(lines, "-A "+chain+" "+r)
		}
		if !slices.Contains(tbl.rules[Chain], jump) {
			// First, before the catch-all REJECT.
			lines = append(lines, "-I "+Chain+" 1 "+jump)
		}
		if err := f.restore(ctx, fam, lines); err != nil {
			return fmt.Errorf("install the %s egress rules of bridge %s: %w", fam.name, bridge, err)
		}
	}
	return nil
}

// networkRules are the rules of one network's chain, in order.
func (fam *family) networkRules(bridge string, open []netip.Prefix, resolvers []netip.Addr) []string {
	rules := []string{
		// Between the network's own containers (the task and its
		// sidecars): always, whatever ranges the engine's address pools
		// use.
		"-o " + bridge + " -j RETURN",
		// Replies to connections made from elsewhere: the agent's
		// readiness probes of sidecars, for one.
		"-m conntrack --ctstate RELATED,ESTABLISHED -j RETURN",
	}
	if fam.v6 {
		// Neighbour discovery, without which IPv6 reaches nothing.
		rules = append(rules,
			"-p ipv6-icmp -m icmp6 --icmpv6-type 135 -j RETURN",
			"-p ipv6-icmp -m icmp6 --icmpv6-type 136 -j RETURN")
	}
	for _, a := range resolvers {
		if a.Is6() == fam.v6 {
			for _, proto := range []string{"udp", "tcp"} {
				rules = append(rules, fmt.Sprintf("-d %s -p %s -m %s --dport 53 -j RETURN", netip.PrefixFrom(a, a.BitLen()), proto, proto))
			}
		}
	}
	seen := map[netip.Prefix]bool{}
	for _, p := range open {
		if p.Addr().Is6() == fam.v6 && !seen[p] {
			seen[p] = true
			rules = append(rules, "-d "+p.String()+" -j RETURN")
		}
	}
	for _, p := range Blocked {
		if p.Addr().Is6() == fam.v6 {
			rules = append(rules, "-d "+p.String()+" "+fam.rejectIt)
		}
	}
	types := []string{"LOCAL", "MULTICAST"}
	if !fam.v6 {
		types = []string{"LOCAL", "BROADCAST", "MULTICAST"}
	}
	for _, t := range types {
		rules = append(rules, "-m addrtype --dst-type "+t+" "+fam.rejectIt)
	}
	return append(rules, "-m conntrack --ctstate DNAT "+fam.rejectIt)
}

// Close removes the rules of the network whose bridge is bridge. Rules that
// are already gone are no error. Call it once the network is removed: while
// it exists, its containers must stay filtered.
func (f *Filter) Close(ctx context.Context, bridge string) error {
	if !IsBridge(bridge) {
		return nil
	}
	unlock, err := f.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	chain := networkChain(bridge)
	var errs []error
	for _, fam := range f.fams {
		tbl, err := f.list(ctx, fam)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var flush, drop []string
		for _, r := range tbl.rules[Chain] {
			if _, target := ruleJump(r); target == chain {
				flush = append(flush, "-D "+Chain+" "+r)
			}
		}
		if tbl.chains[chain] {
			flush = append(flush, "-F "+chain)
			drop = append(drop, "-X "+chain)
		}
		if err := f.remove(ctx, fam, flush, drop); err != nil {
			errs = append(errs, fmt.Errorf("remove the %s egress rules of bridge %s (remove them by hand with "+
				"`%s -D %s -i %s -g %s; %s -F %s; %s -X %s`): %w",
				fam.name, bridge, filepath.Base(fam.cmd), Chain, bridge, chain, filepath.Base(fam.cmd), chain, filepath.Base(fam.cmd), chain, err))
		}
	}
	return errors.Join(errs...)
}

// remove applies deletions in two transactions: iptables-nft refuses to
// delete a chain in the same transaction that removes the last jump to it.
func (f *Filter) remove(ctx context.Context, fam *family, flush, drop []string) error {
	if len(flush) > 0 {
		if err := f.restore(ctx, fam, flush); err != nil {
			return err
		}
	}
	if len(drop) > 0 {
		return f.restore(ctx, fam, drop)
	}
	return nil
}

// Rules lists the rules of the network whose bridge is bridge, as
// `iptables -S` prints them, IPv4 first, and the jump to them: what an
// operator would look at, and what the tests check is gone after teardown.
func (f *Filter) Rules(ctx context.Context, bridge string) ([]string, error) {
	chain := networkChain(bridge)
	var out []string
	for _, fam := range f.fams {
		tbl, err := f.list(ctx, fam)
		if err != nil {
			return nil, err
		}
		for _, r := range tbl.rules[Chain] {
			if _, target := ruleJump(r); target == chain {
				out = append(out, fam.name+": -A "+Chain+" "+r)
			}
		}
		if tbl.chains[chain] {
			out = append(out, fam.name+": -N "+chain)
		}
		for _, r := range tbl.rules[chain] {
			out = append(out, fam.name+": -A "+chain+" "+r)
		}
	}
	return out, nil
}

// table is the filter table as `iptables -S` prints it.
type table struct {
	chains map[string]bool     // user-defined chains
	rules  map[string][]string // chain → its rules, without "-A CHAIN "
}

func parseTable(out []byte) table {
	t := table{chains: map[string]bool{}, rules: map[string][]string{}}
	for line := range strings.SplitSeq(string(out), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "-N "):
			t.chains[strings.TrimPrefix(line, "-N ")] = true
		case strings.HasPrefix(line, "-A "):
			chain, rule, _ := strings.Cut(strings.TrimPrefix(line, "-A "), " ")
			t.rules[chain] = append(t.rules[chain], rule)
		}
	}
	return t
}

// ruleJump returns the input interface and goto target of a rule of Chain
// ("-i podium-1a2b3c4d -g PODIUM-EGRESS-1a2b3c4d").
func ruleJump(rule string) (in, target string) {
	fields := strings.Fields(rule)
	for i := 0; i+1 < len(fields); i++ {
		switch fields[i] {
		case "-i":
			in = fields[i+1]
		case "-g":
			target = fields[i+1]
		}
	}
	return in, target
}

func (f *Filter) list(ctx context.Context, fam *family) (table, error) {
	out, err := run(ctx, fam.cmd, nil, "-w", "-S")
	if err != nil {
		return table{}, fmt.Errorf("list the %s filter table: %w", fam.name, err)
	}
	return parseTable(out), nil
}

// restore applies lines to the filter table in one transaction, leaving
// every other rule as it is.
func (f *Filter) restore(ctx context.Context, fam *family, lines []string) error {
	var in bytes.Buffer
	in.WriteString("*filter\n")
	for _, l := range lines {
		in.WriteString(l + "\n")
	}
	in.WriteString("COMMIT\n")
	_, err := run(ctx, fam.restore, &in, "-w", "--noflush")
	return err
}

// run runs an iptables program and returns its standard output. The error
// carries what it printed on standard error, less the warnings iptables-nft
// prints about legacy tables.
func run(ctx context.Context, prog string, stdin *bytes.Buffer, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, prog, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if stdin != nil {
		cmd.Stdin = stdin
	}
	// iptables reads no locale, but a legacy one may ask modprobe for
	// modules; a clean environment keeps its messages in English.
	cmd.Env = []string{"PATH=/usr/sbin:/sbin:/usr/bin:/bin", "LC_ALL=C"}
	if err := cmd.Run(); err != nil {
		var msg []string
		for line := range strings.SplitSeq(stderr.String(), "\n") {
			if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
				msg = append(msg, line)
			}
		}
		if len(msg) > 0 {
			return nil, fmt.Errorf("%s %s: %v: %s", filepath.Base(prog), strings.Join(args, " "), err, strings.Join(msg, " "))
		}
		return nil, fmt.Errorf("%s %s: %v", filepath.Base(prog), strings.Join(args, " "), err)
	}
	return stdout.Bytes(), nil
}

// lock takes the machine-wide lock on the rules. Every agent process on the
// machine (one in production, several in tests) changes the same chains,
// and a check-then-add must not interleave with another's.
func (f *Filter) lock(ctx context.Context) (func(), error) {
	f.mu.Lock()
	if err := os.MkdirAll(filepath.Dir(f.lockPath), 0o755); err != nil {
		f.mu.Unlock()
		return nil, fmt.Errorf("create the egress lock's directory: %w", err)
	}
	fd, err := os.OpenFile(f.lockPath, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		f.mu.Unlock()
		return nil, fmt.Errorf("open the egress lock: %w", err)
	}
	for {
		err := syscall.Flock(int(fd.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			fd.Close()
			f.mu.Unlock()
			return nil, fmt.Errorf("take the egress lock %s: %w", f.lockPath, err)
		}
		select {
		case <-ctx.Done():
			fd.Close()
			f.mu.Unlock()
			return nil, fmt.Errorf("waiting for the egress lock %s (held by another podium-agent on this machine): %w", f.lockPath, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	return func() {
		fd.Close() // releases the flock
		f.mu.Unlock()
	}, nil
}

// hostResolvers reads the nameservers of resolv.conf files, leaving out
// loopback ones: Docker does not hand those to containers, and they are
// not reached through a task's network anyway.
func hostResolvers(files ...string) []netip.Addr {
	out := []netip.Addr{}
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			continue
		}
		for line := range strings.SplitSeq(string(b), "\n") {
			fields := strings.Fields(line)
			if len(fields) < 2 || fields[0] != "nameserver" {
				continue
			}
			a, err := netip.ParseAddr(fields[1])
			if err != nil {
				continue
			}
			a = a.WithZone("").Unmap()
			if !a.IsLoopback() && !a.IsUnspecified() && !slices.Contains(out, a) {
				out = append(out, a)
			}
		}
	}
	return out
}

// bridgeExists says whether this network namespace has an interface named
// name.
func bridgeExists(name string) bool {
	if name == "" {
		return false
	}
	_, err := net.InterfaceByName(name)
	return err == nil
}

func prefixStrings(ps []netip.Prefix) []string {
	out := make([]string, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.String())
	}
	return out
}
