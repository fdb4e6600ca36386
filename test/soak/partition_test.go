package soak

import (
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// An agent is cut off from every replica by the kernel: the agent runs with
// a group id of its own (as root still, uid 0), a mangle rule marks every
// TCP connection a process of that group opens, and the partition drops
// every packet of a marked connection, both ways, without a reset: a
// black hole around that one agent, as a pulled cable would make. (A
// proxy cannot do it alone: the agent learns the replicas' advertised
// addresses and would go round a proxy of its own.) Its engine is reached
// over a unix socket, which the partition leaves alone, as a cable would.

// agentGID is the group the i-th agent runs as: ids no account uses.
func agentGID(i int) uint32 { return uint32(64101 + i) }

// agentMark is the connection mark of the i-th agent's connections.
func agentMark(i int) string { return fmt.Sprintf("0x50d%d", i+1) }

func iptables(args ...string) error {
	out, err := exec.Command("iptables", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("iptables %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// markAgentConnections makes the rule that marks the i-th agent's
// connections, removed when the test ends (with any partition left).
func markAgentConnections(t *testing.T, a *agent, i int) {
	t.Helper()
	rule := []string{"OUTPUT", "-m", "owner", "--gid-owner", fmt.Sprint(agentGID(i)), "-j", "CONNMARK", "--set-mark", agentMark(i)}
	if err := iptables(append([]string{"-t", "mangle", "-I"}, rule...)...); err != nil {
		t.Fatalf("mark agent %s's connections (the soak needs root and iptables): %v", a.name, err)
	}
	a.mark = agentMark(i)
	a.gid = agentGID(i)
	t.Cleanup(func() {
		_ = a.partition(false)
		if err := iptables(append([]string{"-t", "mangle", "-D"}, rule...)...); err != nil {
			t.Errorf("remove the rule marking agent %s's connections: %v", a.name, err)
		}
	})
}

// partition drops (cut) or lets through again (!cut) every packet of the
// agent's connections.
func (a *agent) partition(cut bool) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if cut == a.cut {
		return nil
	}
	op := "-D"
	if cut {
		op = "-I"
	}
	for _, chain := range []string{"INPUT", "OUTPUT"} {
		if err := iptables(op, chain, "-m", "connmark", "--mark", a.mark, "-j", "DROP"); err != nil {
			return err
		}
	}
	a.cut = cut
	fmt.Fprintf(a.log, "=== soak: partition agent %s: %t\n", a.name, cut)
	return nil
}

// credential runs the agent as root with its own group.
func (a *agent) credential() *syscall.SysProcAttr {
	if a.gid == 0 {
		return nil
	}
	return &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 0, Gid: a.gid, NoSetGroups: true}}
}
