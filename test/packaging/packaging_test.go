package packaging

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/podiumhq/podium/test/testenv/dockertest"
	"github.com/podiumhq/podium/test/testenv/pgtest"
	"github.com/podiumhq/podium/test/testenv/tlstest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// nodeCAFile is where the Debian node keeps the CA of the coordinator's
// certificate: not in /etc/podium, which the purge below must leave empty.
const nodeCAFile = "/etc/podium-test-coordinator-ca.pem"

// apiToken is the coordinator's API token in this test (the coordinator
// wants 32 bytes or more).
const apiToken = "packagingtest-token-0123456789abcdef0123456789"

// The two versions the test ships: the coordinator image of each carries
// the agent's package of the same version.
const (
	versionN, debVersionN   = "v0.0.1", "0.0.1"
	versionN1, debVersionN1 = "v0.0.2", "0.0.2"
)

// TestAgentPackageAndCoordinatorImage installs the podium-agent package in
// Debian with systemd as PID 1 and runs it the way an operator would, against
// a coordinator started from its image with nothing but environment
// variables: README's "Install an agent" (the coordinator's /install.sh adds
// its signed apt repository and installs the agent of the coordinator's
// version N), then docs/operations.md's upgrade (the coordinator is replaced
// by version N+1 on the same database; drain, `apt-get upgrade`, undrain),
// and a repository whose Packages file has one byte changed in transit
// refused by apt-get update. Each step checks what an operator would look at:
// systemctl, dpkg, apt, the CLI's output.
//
// It is one test, not one per story, because the two coordinator images and
// the booted Debian node are most of its time.
func TestAgentPackageAndCoordinatorImage(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("the packaging test needs root: it builds a Debian rootfs with debootstrap and keeps the " +
			"agent's data directory under /var/lib (see scripts/ensure-packaging.sh)")
	}
	h := &harness{t: t, root: repoRoot(t), suffix: randomSuffix(t), start: time.Now(),
		keep: os.Getenv("PODIUM_PACKAGINGTEST_KEEP") != ""}

	// The systemd image is mostly download and disk work (debootstrap the
	// first time, docker import after that), so it is made while the
	// binaries compile; version N+1's image, needed only for the upgrade, is
	// built while the node boots and installs.
	rootfs := make(chan buildResult, 1)
	go func() {
		out, err := h.command(10*time.Minute, filepath.Join(h.root, "scripts/bookworm-systemd-image.sh"))
		rootfs <- buildResult{strings.TrimSpace(lastLine(out)), out, err}
	}()

	debDir := h.buildPackages(versionN, debVersionN)
	imageN := h.buildCoordinatorImage(versionN, debVersionN)
	nextImage := make(chan buildResult, 1)
	go func() {
		image, out, err := h.tryBuildCoordinatorImage(versionN1, debVersionN1)
		nextImage <- buildResult{image, out, err}
	}()
	// However the test ends, the build is waited for (it logs to t) and
	// its image removed.
	var next buildResult
	nextReceived := false
	t.Cleanup(func() {
		if !nextReceived {
			next = <-nextImage
		}
		if next.err == nil {
			_, _ = h.command(time.Minute, "docker", "rmi", "-f", next.image)
		}
	})
	cli := h.buildCLI()
	taskImage := dockertest.EnsureImage(t)

	network := "podium-pkgtest-" + h.suffix
	h.must(time.Minute, "docker", "network", "create", network)
	h.cleanup("network "+network, func() { _, _ = h.command(time.Minute, "docker", "network", "rm", network) })

	// A secrets key: with it, the coordinator makes the repository's
	// signing key once and keeps it in Postgres, so that version N+1,
	// started later on the same database, signs with the same key.
	keyDir := h.secretsKeyDir()
	coord := h.startCoordinator(imageN, network, "-v", keyDir+":/secrets:ro", "-e", "PODIUM_SECRETS_KEY_FILE=/secrets/key")
	cli.server, cli.caFile = coord.url, coord.tls.CAFile
	coordURL := "https://" + coord.name + ":7070"
	coord.checkPublicPaths(versionN)

	h.step("waiting for the Debian systemd image")
	r := <-rootfs
	if r.err != nil {
		t.Fatalf("scripts/bookworm-systemd-image.sh: %v\n%s", r.err, r.output)
	}
	h.step("image " + r.image)

	// The agent's data directory has the same path in the Debian container
	// and on the host: the agent asks the host's engine to bind-mount the
	// runner and the tasks' directories from it, and the engine resolves
	// those paths on the host. It is not under /tmp, /var/tmp or /root: the
	// unit's PrivateTmp and ProtectHome would hide it from the agent.
	dataDir, err := os.MkdirTemp("/var/lib", "podium-packagingtest-")
	if err != nil {
		t.Fatal(err)
	}
	h.cleanup(dataDir, func() { _ = os.RemoveAll(dataDir) })

	node := h.bootNode(r.image, network, debDir, dataDir)
	node.installCA(coord.tls.CAFile)
	node.must(2*time.Minute, "apt-get install -y /debs/podium-test-fake-docker_1.0.0_all.deb")

	h.step("install.sh from the coordinator")
	// The one line of README is curl ... | sh; this minimal Debian has no
	// curl, so apt's own downloader fetches the script (which falls back
	// to it as well).
	// The fingerprint is pinned as README says: read on the coordinator
	// with podium-coordinator apt key, given to install.sh as FINGERPRINT.
	fpOut, fpErr, fpCode := h.run(time.Minute, "docker", "exec", coord.name, "podium-coordinator", "apt", "key")
	fingerprint := strings.TrimSpace(fpOut)
	if fpCode != 0 || len(fingerprint) != 40 {
		t.Fatalf("podium-coordinator apt key: exit %d, printed %q\n%s", fpCode, fpOut, fpErr)
	}
	fetch := "/usr/lib/apt/apt-helper -qq download-file " + coordURL + "/install.sh /root/install.sh >/dev/null && FINGERPRINT=" + fingerprint + " sh /root/install.sh"
	installOut := node.must(5*time.Minute, fetch+" 2>/root/install.log")
	if !strings.Contains(installOut, "podium-agent enroll --coordinator "+coordURL+" --token TOKEN") {
		t.Errorf("install.sh did not print the enroll command for %s:\n%s", coordURL, installOut)
	}
	// What apt printed (install.sh sends it to stderr) has the package's
	// own word on enrolling, from postinst.
	if aptOut := node.must(time.Minute, "cat /root/install.log"); !strings.Contains(aptOut, "podium-agent enroll --coordinator URL --token TOKEN") {
		t.Errorf("installing the package did not tell the operator to enroll the node; install.sh's stderr:\n%s", tail(aptOut, 30))
	}
	if got := node.must(time.Minute, "dpkg-query -W -f='${Version}' podium-agent"); got != debVersionN+"-1" {
		t.Fatalf("install.sh installed podium-agent %s, want %s-1", got, debVersionN)
	}
	sources := node.must(time.Minute, "cat /etc/apt/sources.list.d/podium.sources")
	for _, want := range []string{"Types: deb", "URIs: " + coordURL + "/apt", "Suites: stable", "Components: main", "Signed-By: /etc/apt/keyrings/podium.gpg"} {
		if !strings.Contains(sources, want) {
			t.Errorf("podium.sources lacks %q:\n%s", want, sources)
		}
	}
	if node.exitCode("grep -rqs trusted=yes /etc/apt/sources.list /etc/apt/sources.list.d/") == 0 {
		t.Error("install.sh left trusted=yes in apt's sources")
	}
	h.step("the podium CLI from the same repository")
	node.must(3*time.Minute, "DEBIAN_FRONTEND=noninteractive apt-get install -y podium >/dev/null 2>&1")
	if got := node.must(time.Minute, "podium version"); !strings.HasPrefix(got, "podium "+versionN+" ") {
		t.Errorf("apt install podium: podium version says %q, want podium %s", got, versionN)
	}
	if got := node.must(time.Minute, "dpkg-query -W -f='${Version}' podium"); got != debVersionN+"-1" {
		t.Errorf("apt installed podium %s, want %s-1", got, debVersionN)
	}
	h.step("install.sh again: it changes nothing")
	node.must(5*time.Minute, fetch+" >/dev/null 2>&1")
	if got := node.must(time.Minute, "ls /etc/apt/sources.list.d/ /etc/apt/keyrings/ | sort | tr '\\n' ' '"); strings.Count(got, "podium") != 2 {
		t.Errorf("after a second run, apt's directories hold: %s", got)
	}

	h.step("checking what was installed")
	if out := node.must(time.Minute, "systemd-analyze verify /lib/systemd/system/podium-agent.service 2>&1"); out != "" {
		t.Errorf("systemd-analyze verify printed, want nothing:\n%s", out)
	}
	if got := node.output("systemctl is-enabled podium-agent"); got != "enabled" {
		t.Errorf("after install the unit is %q, want enabled", got)
	}
	// Not enrolled yet: postinst must not have started it.
	if got := node.output("systemctl is-active podium-agent"); got != "inactive" {
		t.Errorf("before enrollment the agent is %q, want inactive", got)
	}
	if got := node.must(time.Minute, "dpkg-query -W -f='${Conffiles}' podium-agent"); !strings.Contains(got, "/etc/podium/agent.env") {
		t.Errorf("/etc/podium/agent.env is not a conffile; dpkg lists:\n%s", got)
	}
	if got := node.must(time.Minute, "stat -c %a /var/lib/podium-agent"); got != "700" {
		t.Errorf("/var/lib/podium-agent has mode %s, want 700", got)
	}

	h.step("configuring the agent")
	flags := node.configureAgent(dataDir)

	h.step("starting before enrollment: skipped, not failed")
	// The unit is enabled from install on, so it is also started at boot
	// before anyone enrolled the node: it must say why and stay down, not fail
	// and restart every few seconds.
	node.must(time.Minute, "systemctl start podium-agent")
	if state, restarts := node.show("ActiveState"), node.show("NRestarts"); state != "inactive" || restarts != "0" {
		t.Errorf("an agent started before enrollment is %s with %s restarts, want inactive and 0", state, restarts)
	}
	if journal := node.output("journalctl -u podium-agent --no-pager"); !strings.Contains(journal, "this node is not enrolled") {
		t.Errorf("starting before enrollment did not say the node is not enrolled; the journal has:\n%s", tail(journal, 20))
	}

	h.step("enrolling the node")
	token, tokenErr, tokenCode := h.run(time.Minute, cli.path, cli.args("token", "create")...)
	if tokenCode != 0 {
		t.Fatalf("podium token create exited %d:\n%s", tokenCode, tokenErr)
	}
	token = strings.TrimSpace(token)
	// enroll prints the node id on stdout and what it did on stderr.
	nodeID, enrollErr, enrollCode := h.run(time.Minute, "docker", "exec", node.name,
		"podium-agent", "enroll", "--coordinator", coordURL, "--ca-file", nodeCAFile, "--token", token, "--data-dir", dataDir)
	nodeID = strings.TrimSpace(nodeID)
	if enrollCode != 0 || !strings.HasPrefix(nodeID, "node_") {
		t.Fatalf("podium-agent enroll exited %d and printed %q, want the node id\n%s", enrollCode, nodeID, enrollErr)
	}
	// The node's tasks run on the host's engine: if the test stops half way,
	// what they left there goes too.
	h.cleanup("the node's task containers", func() { h.removeTaskObjects(nodeID) })

	h.step("systemctl start podium-agent")
	// Type=notify: start returns once the agent has told systemd it is
	// connected.
	node.must(2*time.Minute, "systemctl start podium-agent")
	if got := node.output("systemctl is-active podium-agent"); got != "active" {
		t.Fatalf("after start the agent is %q, want active", got)
	}
	if status := node.show("StatusText"); !strings.Contains(status, "connected to "+coordURL) {
		t.Errorf("systemctl show -p StatusText is %q, want it to name the coordinator %s", status, coordURL)
	}
	pid := node.show("MainPID")
	if cmdline := node.must(time.Minute, "tr '\\0' ' ' </proc/"+pid+"/cmdline"); !strings.Contains(cmdline, flags) {
		t.Errorf("the agent runs as %q, want PODIUM_AGENT_FLAGS (%s) from agent.env in it", cmdline, flags)
	}

	h.step("checking the unit's sandbox is in force")
	node.checkSandbox(pid, dataDir)

	h.step("podium run through the packaged agent")
	runTask := func(greeting string) {
		t.Helper()
		stdout, stderr, code := h.run(2*time.Minute, cli.path, cli.args("run", "--image", taskImage, "--",
			"sh", "-c", "echo "+greeting+"; echo to stderr >&2; exit 3")...)
		if stdout != greeting+"\n" || code != 3 {
			t.Errorf("podium run: stdout %q, exit %d; want the task's output and its exit code 3\nstderr:\n%s", stdout, code, stderr)
		}
		if !strings.Contains(stderr, "to stderr\n") {
			t.Errorf("podium run: the task's stderr is missing from podium's:\n%s", stderr)
		}
	}
	runTask("hello from a packaged agent")
	if v, err := h.nodeVersion(cli, nodeID); err != nil || v != versionN {
		t.Errorf("podium nodes shows agent version %q (%v), want %s", v, err, versionN)
	}

	h.step("the coordinator's /metrics shows the task that ran")
	h.eventually(time.Minute, "/metrics to count the failed task", func() (bool, string) {
		res, err := coord.hc.Get(coord.url + "/metrics")
		if err != nil {
			return false, err.Error()
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		return strings.Contains(string(body), `podium_tasks{state="failed"} 1`) &&
				strings.Contains(string(body), `podium_nodes{status="online"} 1`),
			fmt.Sprintf("HTTP %d", res.StatusCode)
	})

	h.step("freezing the agent: systemd's watchdog must restart it")
	restarts := node.show("NRestarts")
	node.must(time.Minute, "kill -STOP "+pid)
	h.eventually(time.Minute, "systemd to restart the frozen agent", func() (bool, string) {
		n, p, state := node.show("NRestarts"), node.show("MainPID"), node.show("ActiveState")
		return n != restarts && p != pid && p != "0" && state == "active",
			fmt.Sprintf("NRestarts=%s MainPID=%s ActiveState=%s", n, p, state)
	})
	if journal := node.output("journalctl -u podium-agent --no-pager"); !strings.Contains(journal, "Watchdog timeout") {
		t.Errorf("the agent was restarted, but the journal does not say the watchdog did it:\n%s", tail(journal, 40))
	}

	h.step("apt-get install --reinstall: postinst restarts the enrolled agent")
	pid = node.show("MainPID")
	node.must(3*time.Minute, "apt-get install -y --reinstall podium-agent")
	if p, state := node.show("MainPID"), node.show("ActiveState"); p == pid || state != "active" {
		t.Errorf("after the reinstall the agent is %s with MainPID %s (was %s); want a new, active agent", state, p, pid)
	}

	h.step("draining the node: --exit-on-drain stops the agent")
	// docs/operations.md, "Upgrading a node". Exit status 0 on drain is not
	// a failure, so Restart=on-failure leaves the agent stopped.
	h.must(time.Minute, cli.path, cli.args("node", "drain", nodeID)...)
	h.eventually(time.Minute, "the drained agent to exit", func() (bool, string) {
		state, result, status := node.show("ActiveState"), node.show("Result"), node.show("ExecMainStatus")
		return state == "inactive" && result == "success" && status == "0",
			fmt.Sprintf("ActiveState=%s Result=%s ExecMainStatus=%s", state, result, status)
	})

	h.step("replacing the coordinator with version " + versionN1)
	next, nextReceived = <-nextImage, true
	if next.err != nil {
		t.Fatalf("make image VERSION=%s: %v\n%s", versionN1, next.err, next.output)
	}
	h.must(time.Minute, "docker", "rm", "-f", coord.name)
	coord.run(next.image)
	cli.server = coord.url
	if out := h.must(time.Minute, cli.path, cli.args("nodes")...); !strings.Contains(out, versionN+" (older)") {
		t.Errorf("after the coordinator moved to %s, podium nodes does not flag the node's %s as older:\n%s", versionN1, versionN, out)
	}

	h.step("apt-get update && apt-get upgrade on the drained node")
	node.must(5*time.Minute, "apt-get update && DEBIAN_FRONTEND=noninteractive apt-get upgrade -y")
	if got := node.must(time.Minute, "dpkg-query -W -f='${Version}' podium-agent"); got != debVersionN1+"-1" {
		t.Fatalf("apt-get upgrade left podium-agent at %s, want %s-1", got, debVersionN1)
	}
	if got := node.must(time.Minute, "podium-agent --version 2>&1 || true"); !strings.Contains(got, versionN1) {
		t.Errorf("the upgraded podium-agent says %q, want %s", got, versionN1)
	}
	if out := h.must(time.Minute, cli.path, cli.args("node", "get", nodeID)...); !strings.Contains(out, "draining:") {
		t.Errorf("after the upgrade the node is no longer draining:\n%s", out)
	}
	if out := h.must(time.Minute, cli.path, cli.args("tasks", "--node", nodeID)...); strings.Count(out, "failed") != 1 {
		t.Errorf("after the upgrade the node's finished task is not listed once as failed:\n%s", out)
	}

	h.step("undrain: the agent reports " + versionN1)
	h.must(time.Minute, cli.path, cli.args("node", "undrain", nodeID)...)
	// postinst started the new agent; if it found the node still drained it
	// exited again, and this start brings it back. Either way it is up.
	node.must(2*time.Minute, "systemctl start podium-agent")
	if got := node.output("systemctl is-active podium-agent"); got != "active" {
		t.Fatalf("after drain, upgrade and undrain the agent is %q, want active", got)
	}
	h.eventually(time.Minute, "podium nodes to show the upgraded agent", func() (bool, string) {
		v, err := h.nodeVersion(cli, nodeID)
		if err != nil {
			return false, err.Error()
		}
		return v == versionN1, v
	})
	if out := h.must(time.Minute, cli.path, cli.args("nodes")...); strings.Contains(out, "(older)") {
		t.Errorf("after the upgrade podium nodes still flags a node:\n%s", out)
	}
	runTask("hello again after the upgrade")

	h.step("a Packages file changed by one byte: apt-get update refuses it")
	gateway := strings.TrimSpace(h.must(time.Minute, "docker", "network", "inspect", "-f", "{{(index .IPAM.Config 0).Gateway}}", network))
	proxy := h.tamperingProxy(net.JoinHostPort(gateway, "0"), coord)
	node.must(time.Minute, "sed -i.orig 's#^URIs: .*#URIs: "+proxy+"/apt#' /etc/apt/sources.list.d/podium.sources")
	out, err := node.exec(5*time.Minute, "apt-get update 2>&1")
	if err == nil {
		t.Errorf("apt-get update accepted a tampered Packages file:\n%s", out)
	}
	if !strings.Contains(out, "Hash Sum mismatch") {
		t.Errorf("apt-get update did not report a hash mismatch for the tampered Packages file:\n%s", out)
	}
	node.must(time.Minute, "mv /etc/apt/sources.list.d/podium.sources.orig /etc/apt/sources.list.d/podium.sources")

	h.step("systemctl stop podium-agent")
	node.must(2*time.Minute, "systemctl stop podium-agent")
	// 1 is CLD_EXITED: the agent exited by itself, with status 0, rather
	// than being killed by the signal.
	if state, result, code, status := node.show("ActiveState"), node.show("Result"), node.show("ExecMainCode"), node.show("ExecMainStatus"); state != "inactive" || result != "success" || code != "1" || status != "0" {
		t.Errorf("after stop: ActiveState=%s Result=%s ExecMainCode=%s ExecMainStatus=%s; want inactive, success, exited 0",
			state, result, code, status)
	}

	// Every task's containers, network and volume were removed by the agent,
	// sandbox and all.
	dockertest.AssertNothingLeftFor(t, dockertest.Client(t), "podium.node="+nodeID)

	h.step("apt purge podium-agent")
	// The drop-in is the operator's own file, not the package's: an admin
	// removes it like the test does.
	node.must(time.Minute, "rm -r /etc/systemd/system/podium-agent.service.d")
	node.must(2*time.Minute, "apt-get purge -y podium-agent")
	for _, path := range []string{
		"/usr/bin/podium-agent",
		"/lib/systemd/system/podium-agent.service",
		"/etc/systemd/system/multi-user.target.wants/podium-agent.service",
		"/var/lib/systemd/deb-systemd-helper-enabled/podium-agent.service",
		"/var/lib/systemd/deb-systemd-helper-masked/podium-agent.service",
		"/etc/podium",
		"/var/lib/podium-agent",
	} {
		if node.exitCode("test -e "+path+" || test -L "+path) == 0 {
			t.Errorf("after purge %s is still there", path)
		}
	}
	if node.exitCode("getent passwd podium-agent || getent group podium-agent") == 0 {
		t.Error("after purge a podium-agent account is still there")
	}
	node.must(time.Minute, "systemctl daemon-reload")
	if got := node.output("systemctl list-unit-files --no-legend podium-agent.service"); got != "" {
		t.Errorf("after purge systemd still has the unit file: %q", got)
	}

	coord.checkHealth()
	h.step("done")
}

// buildResult is what a build running beside the others produced.
type buildResult struct {
	image  string
	output string
	err    error
}

// harness runs the test's commands, with the time each step started.
type harness struct {
	t      *testing.T
	root   string
	suffix string
	start  time.Time
	// keep leaves the containers, network and data directory of a failed
	// run in place to look into (PODIUM_PACKAGINGTEST_KEEP=1). The
	// coordinator's database goes with the test's Postgres.
	keep bool
}

// cleanup is t.Cleanup, except that with keep a failed run's things stay.
func (h *harness) cleanup(what string, f func()) {
	h.t.Cleanup(func() {
		if h.keep && h.t.Failed() {
			h.t.Logf("kept %s (PODIUM_PACKAGINGTEST_KEEP)", what)
			return
		}
		f()
	})
}

func (h *harness) step(what string) {
	h.t.Logf("%6.1fs  %s", time.Since(h.start).Seconds(), what)
}

// command runs a program and returns its combined output.
func (h *harness) command(timeout time.Duration, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = h.root
	cmd.Env = childEnv()
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		err = fmt.Errorf("%v (gave up after %s)", err, timeout)
	}
	return string(out), err
}

// must runs a program and fails the test, with its output, if it fails.
func (h *harness) must(timeout time.Duration, name string, args ...string) string {
	h.t.Helper()
	out, err := h.command(timeout, name, args...)
	if err != nil {
		h.t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

// run runs a program and returns its stdout, stderr and exit code.
func (h *harness) run(timeout time.Duration, name string, args ...string) (string, string, int) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		h.t.Fatalf("%s: %v", name, err)
	}
	return stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()
}

func (h *harness) eventually(timeout time.Duration, what string, cond func() (bool, string)) {
	h.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("gave up after %s waiting for %s; last seen: %s", timeout, what, state)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// removeTaskObjects removes what the node's tasks left in the host's engine:
// containers first, then the networks and volumes they used.
func (h *harness) removeTaskObjects(nodeID string) {
	filter := "label=podium.node=" + nodeID
	for _, kind := range []struct{ list, remove []string }{
		{[]string{"ps", "-aq"}, []string{"rm", "-f"}},
		{[]string{"network", "ls", "-q"}, []string{"network", "rm"}},
		{[]string{"volume", "ls", "-q"}, []string{"volume", "rm", "-f"}},
	} {
		out, err := h.command(time.Minute, "docker", append(kind.list, "--filter", filter)...)
		if ids := strings.Fields(out); err == nil && len(ids) > 0 {
			_, _ = h.command(time.Minute, "docker", append(kind.remove, ids...)...)
		}
	}
}

// buildPackages builds the agent's .deb of version for this machine's
// architecture with `make lint-deb`, so the Makefile target, nfpm.yaml and
// the lintian check are what is tested, and the fake docker.io package
// beside it. The node installs the agent from the coordinator's repository,
// which holds the same package built again by `make image`.
func (h *harness) buildPackages(version, debVersion string) string {
	h.step("make lint-deb (build the .deb, then lintian)")
	dir := filepath.Join(h.t.TempDir(), "debs")
	h.must(15*time.Minute, "make", "--no-print-directory", "lint-deb", "DIST="+dir, "DEB_ARCHES="+runtime.GOARCH,
		"VERSION="+version, "DEB_VERSION="+debVersion)
	h.step("building the fake docker.io package")
	nfpm := filepath.Join(strings.TrimSpace(h.must(time.Minute, "go", "env", "GOPATH")), "bin", "nfpm")
	h.must(time.Minute, nfpm, "package", "--config", "test/packaging/testdata/fake-docker.nfpm.yaml",
		"--packager", "deb", "--target", dir+"/")
	// Readable by the container's apt, which drops to the _apt account.
	if err := os.Chmod(dir, 0o755); err != nil {
		h.t.Fatal(err)
	}
	return dir
}

// buildCoordinatorImage builds the coordinator image stamped with version
// (and its agent package with debVersion), for this machine's architecture:
// the image carries the agent's .debs, and this architecture's is enough.
func (h *harness) buildCoordinatorImage(version, debVersion string) string {
	image, out, err := h.tryBuildCoordinatorImage(version, debVersion)
	if err != nil {
		h.t.Fatalf("make image VERSION=%s: %v\n%s", version, err, out)
	}
	h.t.Cleanup(func() { _, _ = h.command(time.Minute, "docker", "rmi", "-f", image) })
	return image
}

// tryBuildCoordinatorImage is buildCoordinatorImage for a goroutine: it
// returns what went wrong instead of failing the test, and leaves removing
// the image to its caller.
func (h *harness) tryBuildCoordinatorImage(version, debVersion string) (image, output string, err error) {
	h.step("make image VERSION=" + version)
	image = "podium-test/coordinator:pkgtest-" + h.suffix + "-" + debVersion
	output, err = h.command(10*time.Minute, "make", "--no-print-directory", "image", "IMAGE="+image,
		"VERSION="+version, "DEB_VERSION="+debVersion, "DEB_ARCHES="+runtime.GOARCH)
	return image, output, err
}

// cliBinary is the podium CLI, pointed at the coordinator's published port
// once it is known.
type cliBinary struct {
	path   string
	server string
	caFile string
}

func (c *cliBinary) args(args ...string) []string {
	return append([]string{"--server", c.server, "--token", apiToken, "--ca-file", c.caFile}, args...)
}

func (h *harness) buildCLI() *cliBinary {
	h.step("go build ./cmd/podium")
	path := filepath.Join(h.t.TempDir(), "podium")
	// As `make build` builds it, so that it shares the build cache of the
	// packages' binaries.
	cmd := exec.Command("go", "build", "-trimpath", "-o", path, "./cmd/podium")
	cmd.Dir, cmd.Env = h.root, append(childEnv(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		h.t.Fatalf("go build ./cmd/podium: %v\n%s", err, out)
	}
	return &cliBinary{path: path}
}

// coordinator is the coordinator's container.
type coordinator struct {
	h    *harness
	name string
	url  string // as the host reaches it
	// tls is the coordinator's certificate and the CA that signed it: the
	// image's examples serve TLS, and so does this test.
	tls    *tlstest.CA
	tlsDir string       // the certificate and key, as the container reads them
	hc     *http.Client // trusts tls's CA
	// db, network and extra (more docker run arguments) are what run
	// starts the container with.
	db, network string
	extra       []string
}

// startCoordinator runs the coordinator image on a fresh, empty database of
// the test's Postgres, configured by environment variables alone, and waits
// for /readyz. The container reaches Postgres through its unix socket
// directory, bind-mounted. extra are more `docker run` arguments.
func (h *harness) startCoordinator(image, network string, extra ...string) *coordinator {
	t := h.t
	h.step("starting the coordinator container")
	db := "pkgtest_" + h.suffix
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, pgtest.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	// template0: really empty, so the coordinator has the schema to create.
	if _, err := admin.Exec(ctx, "create database "+db+" template template0"); err != nil {
		t.Fatal(err)
	}
	// The database goes with the test's Postgres cluster anyway.
	t.Cleanup(func() {
		c, err := pgx.Connect(ctx, pgtest.URL("postgres"))
		if err != nil {
			return
		}
		defer c.Close(ctx)
		_, _ = c.Exec(ctx, "drop database if exists "+db+" with (force)")
	})

	c := &coordinator{h: h, name: "podium-pkgtest-coord-" + h.suffix, db: db, network: network, extra: extra}
	c.tls = tlstest.New(t, c.name)
	// The image runs as user 65532: the certificate and key go in a
	// directory it can read.
	tlsDir, err := os.MkdirTemp("", "podium-pkgtest-tls-")
	if err != nil {
		t.Fatal(err)
	}
	h.cleanup(tlsDir, func() { _ = os.RemoveAll(tlsDir) })
	for src, dst := range map[string]string{c.tls.CertFile: "cert.pem", c.tls.KeyFile: "key.pem"} {
		b, err := os.ReadFile(src)
		if err == nil {
			err = os.WriteFile(filepath.Join(tlsDir, dst), b, 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(tlsDir, 0o755); err != nil {
		t.Fatal(err)
	}
	c.tlsDir = tlsDir
	c.hc = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: c.tls.Pool}}}
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := h.command(time.Minute, "docker", "logs", "--tail", "100", c.name)
			t.Logf("coordinator log:\n%s", logs)
		}
	})
	h.cleanup("container "+c.name, func() { _, _ = h.command(time.Minute, "docker", "rm", "-f", c.name) })
	c.run(image)
	conn, err := pgx.Connect(ctx, pgtest.URL(db))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var views int
	if err := conn.QueryRow(ctx, "select count(*) from pg_views where schemaname = 'podium' and viewname in ('node_health', 'task_queue')").Scan(&views); err != nil || views != 2 {
		t.Fatalf("the coordinator did not create the schema with its views (found %d of 2, err %v)", views, err)
	}
	return c
}

// run starts the coordinator's container from image, under the
// coordinator's name (a replacement keeps the name, so nodes find it), and
// waits for /readyz on its newly published port.
func (c *coordinator) run(image string) {
	h, t := c.h, c.h.t
	pgURL, err := url.Parse(pgtest.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	socketDir := pgURL.Query().Get("host")
	args := []string{"run", "-d", "--name", c.name, "--network", c.network,
		"-p", "127.0.0.1::7070",
		"-v", socketDir + ":/pgsock",
		"-v", c.tlsDir + ":/tls:ro",
		"-e", "PODIUM_DATABASE_URL=postgres://postgres@/" + c.db + "?host=/pgsock&sslmode=disable",
		"-e", "PODIUM_TOKEN=" + apiToken,
		"-e", "PODIUM_LISTEN=0.0.0.0:7070",
		"-e", "PODIUM_ALLOW_NON_LOOPBACK=1",
		"-e", "PODIUM_TLS_CERT=/tls/cert.pem",
		"-e", "PODIUM_TLS_KEY=/tls/key.pem",
		"-e", "PODIUM_ADVERTISE=https://" + c.name + ":7070"}
	args = append(args, c.extra...)
	h.must(time.Minute, "docker", append(args, image)...)
	port := strings.TrimSpace(h.must(time.Minute, "docker", "port", c.name, "7070/tcp"))
	c.url = "https://" + lastLine(port)
	h.eventually(time.Minute, "the coordinator to answer /readyz", func() (bool, string) {
		res, err := c.hc.Get(c.url + "/readyz")
		if err != nil {
			return false, err.Error()
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK, res.Status
	})
}

// checkHealth checks the image's HEALTHCHECK: the command it runs answers,
// and Docker calls the container healthy.
func (c *coordinator) checkHealth() {
	h := c.h
	h.step("the coordinator container's health")
	// As the image's HEALTHCHECK runs it: the port and the scheme come from
	// PODIUM_LISTEN and PODIUM_TLS_CERT.
	out, err := h.command(time.Minute, "docker", "exec", c.name, "/usr/bin/podium-coordinator", "healthcheck")
	if err != nil {
		h.t.Errorf("podium-coordinator healthcheck in the container: %v\n%s", err, out)
	}
	h.eventually(time.Minute, "Docker to call the coordinator healthy", func() (bool, string) {
		status := strings.TrimSpace(h.must(time.Minute, "docker", "inspect", "-f", "{{.State.Health.Status}}", c.name))
		return status == "healthy", status
	})
}

// debianNode is the Debian container that boots systemd.
type debianNode struct {
	h    *harness
	name string
}

// bootNode boots the systemd image with the recipe of the design notes
// (section 7), plus the host's Docker socket, the packages at /debs and the
// agent's data directory at its own path.
func (h *harness) bootNode(image, network, debDir, dataDir string) *debianNode {
	t := h.t
	h.step("booting Debian with systemd")
	n := &debianNode{h: h, name: "podium-pkgtest-node-" + h.suffix}
	h.must(time.Minute, "docker", "run", "-d", "--name", n.name, "--hostname", "pkgtest-node",
		"--network", network,
		"--cap-add", "SYS_ADMIN", "--cgroupns=host", "-v", "/sys/fs/cgroup:/sys/fs/cgroup:ro",
		"--tmpfs", "/run", "--tmpfs", "/run/lock", "-e", "container=docker", "--stop-signal", "SIGRTMIN+3",
		"-v", "/var/run/docker.sock:/run/docker.sock",
		"-v", debDir+":/debs:ro",
		"-v", dataDir+":"+dataDir,
		image, "/sbin/init")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("agent journal:\n%s", tail(n.output("journalctl -u podium-agent --no-pager"), 80))
		}
	})
	h.cleanup("container "+n.name, func() { _, _ = h.command(time.Minute, "docker", "rm", "-f", n.name) })
	// systemctl cannot talk to systemd until it has set up its socket, a
	// moment after the container starts; then --wait waits for the boot to
	// end. It exits non-zero for "degraded" (a unit failed), which does not
	// stop the test; the units that failed are logged.
	var state string
	h.eventually(time.Minute, "systemd to boot", func() (bool, string) {
		state = n.output("systemctl is-system-running --wait")
		return state == "running" || state == "degraded", state
	})
	if state == "degraded" {
		t.Logf("systemd booted degraded:\n%s", n.output("systemctl --failed --no-legend"))
	}
	return n
}

// exec runs a shell script in the container.
func (n *debianNode) exec(timeout time.Duration, script string) (string, error) {
	return n.h.command(timeout, "docker", "exec", n.name, "sh", "-c", script)
}

func (n *debianNode) must(timeout time.Duration, script string) string {
	n.h.t.Helper()
	out, err := n.exec(timeout, script)
	if err != nil {
		n.h.t.Fatalf("in the Debian container: %s: %v\n%s", script, err, out)
	}
	return strings.TrimSpace(out)
}

// output is what a command printed, whether or not it succeeded.
func (n *debianNode) output(script string) string {
	out, _ := n.exec(2*time.Minute, script)
	return strings.TrimSpace(out)
}

func (n *debianNode) exitCode(script string) int {
	_, err := n.exec(time.Minute, script)
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		n.h.t.Fatalf("docker exec %s: %v", script, err)
	}
	return 0
}

// checkSandbox checks, from outside, that systemd applied the unit's
// sandbox to the agent (pid): no new privileges, a system-call filter, no
// capability beyond the four the unit keeps, a read-only file system but for
// its data directory. (Without CAP_SYS_ADMIN in the container systemd would
// skip the namespaces silently; this catches that too.)
func (n *debianNode) checkSandbox(pid, dataDir string) {
	t := n.h.t
	status := n.must(time.Minute, "cat /proc/"+pid+"/status")
	field := func(name string) string {
		for _, line := range strings.Split(status, "\n") {
			if v, ok := strings.CutPrefix(line, name+":"); ok {
				return strings.TrimSpace(v)
			}
		}
		return ""
	}
	if got := field("NoNewPrivs"); got != "1" {
		t.Errorf("the agent's NoNewPrivs is %q, want 1", got)
	}
	if got := field("Seccomp"); got != "2" {
		t.Errorf("the agent's Seccomp is %q, want 2 (a filter)", got)
	}
	// CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER: bits 0-3;
	// CAP_NET_ADMIN and CAP_NET_RAW (iptables, for the egress rules): 12, 13.
	if bnd, err := strconv.ParseUint(field("CapBnd"), 16, 64); err != nil || bnd&^0x300f != 0 {
		t.Errorf("the agent's capability bounding set is %q, want no more than 0x300f", field("CapBnd"))
	}
	// nsenter -m: the agent's view of the file system, with this shell's
	// privileges, so only the read-only mounts can refuse.
	if out, err := n.exec(time.Minute, "nsenter -t "+pid+" -m touch /etc/podium/probe"); err == nil || !strings.Contains(out, "Read-only file system") {
		t.Errorf("the agent can write /etc (ProtectSystem=strict is not in force): %v %s", err, out)
	}
	n.must(time.Minute, "nsenter -t "+pid+" -m sh -c 'touch "+dataDir+"/probe && rm "+dataDir+"/probe'")
}

// show is one property of the agent's unit, as `systemctl show` has it.
func (n *debianNode) show(property string) string {
	return n.must(time.Minute, "systemctl show -p "+property+" --value podium-agent")
}

// childEnv is this process's environment without what a `make test` that
// started it passed down for its own use: the test's `make` is a make of its
// own, not a sub-make sharing the parent's job server.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES":
			continue
		}
		env = append(env, kv)
	}
	return env
}

func repoRoot(t *testing.T) string {
	dir, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "nfpm.yaml")); err != nil {
		t.Fatalf("the repository root is not at %s: %v", dir, err)
	}
	return dir
}

func randomSuffix(t *testing.T) string {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = append([]string{"… " + strconv.Itoa(len(lines)-n) + " lines before"}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}
