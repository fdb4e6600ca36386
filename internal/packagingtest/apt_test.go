//go:build apttest

package packagingtest

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/podiumhq/podium/internal/testenv/dockertest"
)

// The two versions the test builds: the coordinator image of each carries
// the agent's package of the same version.
const (
	aptVersionN, aptDebN   = "v0.0.1", "0.0.1"
	aptVersionN1, aptDebN1 = "v0.0.2", "0.0.2"
)

// TestAptRepositoryInstallAndUpgrade is README's "Install an agent" and
// docs/operations.md's upgrade, end to end: a Debian node with systemd runs
// the coordinator's /install.sh, which adds the coordinator's signed apt
// repository and installs the agent of the coordinator's version N; the node
// enrolls and runs a task. The coordinator is then replaced by version N+1
// on the same database; the node is drained, `apt-get update && apt-get
// upgrade` moves it to N+1, and the drained node's state and finished task
// are still there; undrained, it reports N+1 and runs a task. Last, a
// repository whose Packages file has one byte changed in transit is refused
// by apt-get update.
func TestAptRepositoryInstallAndUpgrade(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("the packaging test needs root (see TestAgentPackageAndCoordinatorImage)")
	}
	h := &harness{t: t, root: repoRoot(t), suffix: randomSuffix(t), start: time.Now(),
		keep: os.Getenv("PODIUM_PACKAGINGTEST_KEEP") != ""}

	rootfs := make(chan buildResult, 1)
	go func() {
		out, err := h.command(10*time.Minute, filepath.Join(h.root, "scripts/bookworm-systemd-image.sh"))
		rootfs <- buildResult{strings.TrimSpace(lastLine(out)), out, err}
	}()

	imageN := h.buildVersionImage(aptVersionN, aptDebN)
	imageN1 := h.buildVersionImage(aptVersionN1, aptDebN1)
	debDir := h.buildFakeDocker()
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
	base := "https://" + coord.name + ":7070"

	h.step("the repository needs no token; the API still does")
	for path, want := range map[string]int{"/apt/dists/stable/InRelease": 200, "/apt/podium.gpg": 200, "/install.sh": 200,
		"/apt/../metrics": 404, "/apt/nothing": 404, "/podium.v1.AdminService/ListNodes": 401} {
		req, _ := http.NewRequest(http.MethodGet, coord.url+path, nil)
		if path == "/podium.v1.AdminService/ListNodes" {
			req.Method = http.MethodPost
		}
		res, err := (&http.Client{Transport: coord.hc.Transport, CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		}}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		// The mux answers a path with ".." with a redirect to the
		// cleaned path, and serves nothing of the repository for it.
		redirected := res.StatusCode >= 300 && res.StatusCode < 400
		if res.StatusCode != want && !(want == 404 && redirected) {
			t.Errorf("GET %s without a token: %d, want %d", path, res.StatusCode, want)
		}
	}

	h.step("waiting for the Debian systemd image")
	r := <-rootfs
	if r.err != nil {
		t.Fatalf("scripts/bookworm-systemd-image.sh: %v\n%s", r.err, r.output)
	}
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
	fetch := "/usr/lib/apt/apt-helper -qq download-file " + base + "/install.sh /root/install.sh >/dev/null && sh /root/install.sh"
	out := node.must(5*time.Minute, fetch+" 2>/dev/null")
	if !strings.Contains(out, "podium-agent enroll --coordinator "+base+" --token TOKEN") {
		t.Errorf("install.sh did not print the enroll command for %s:\n%s", base, out)
	}
	if got := node.must(time.Minute, "dpkg-query -W -f='${Version}' podium-agent"); got != aptDebN+"-1" {
		t.Fatalf("install.sh installed podium-agent %s, want %s-1", got, aptDebN)
	}
	sources := node.must(time.Minute, "cat /etc/apt/sources.list.d/podium.sources")
	for _, want := range []string{"Types: deb", "URIs: " + base + "/apt", "Suites: stable", "Components: main", "Signed-By: /etc/apt/keyrings/podium.gpg"} {
		if !strings.Contains(sources, want) {
			t.Errorf("podium.sources lacks %q:\n%s", want, sources)
		}
	}
	if node.exitCode("grep -rqs trusted=yes /etc/apt/sources.list /etc/apt/sources.list.d/") == 0 {
		t.Error("install.sh left trusted=yes in apt's sources")
	}
	h.step("install.sh again: it changes nothing")
	node.must(5*time.Minute, fetch+" >/dev/null 2>&1")
	if got := node.must(time.Minute, "ls /etc/apt/sources.list.d/ /etc/apt/keyrings/ | sort | tr '\\n' ' '"); strings.Count(got, "podium") != 2 {
		t.Errorf("after a second run, apt's directories hold: %s", got)
	}

	h.step("configuring, enrolling and starting the agent")
	node.configureAgent(dataDir)
	token, tokenErr, code := h.run(time.Minute, cli.path, cli.args("token", "create")...)
	if code != 0 {
		t.Fatalf("podium token create exited %d:\n%s", code, tokenErr)
	}
	token = strings.TrimSpace(token)
	nodeID, enrollErr, code := h.run(time.Minute, "docker", "exec", node.name,
		"podium-agent", "enroll", "--coordinator", base, "--ca-file", nodeCAFile, "--token", token, "--data-dir", dataDir)
	nodeID = strings.TrimSpace(nodeID)
	if code != 0 || !strings.HasPrefix(nodeID, "node_") {
		t.Fatalf("podium-agent enroll exited %d and printed %q\n%s", code, nodeID, enrollErr)
	}
	h.cleanup("the node's task containers", func() { h.removeTaskObjects(nodeID) })
	node.must(2*time.Minute, "systemctl start podium-agent")
	runTask := func(greeting string) {
		t.Helper()
		stdout, stderr, code := h.run(2*time.Minute, cli.path, cli.args("run", "--image", taskImage, "--", "sh", "-c", "echo "+greeting)...)
		if stdout != greeting+"\n" || code != 0 {
			t.Fatalf("podium run: stdout %q, exit %d\nstderr:\n%s", stdout, code, stderr)
		}
	}
	runTask("installed from the repository of the coordinator")
	if v, err := h.nodeVersion(cli, nodeID); err != nil || v != aptVersionN {
		t.Errorf("podium nodes shows agent version %q (%v), want %s", v, err, aptVersionN)
	}

	h.step("draining the node")
	h.must(time.Minute, cli.path, cli.args("node", "drain", nodeID)...)
	h.eventually(time.Minute, "the drained agent to exit", func() (bool, string) {
		state, result := node.show("ActiveState"), node.show("Result")
		return state == "inactive" && result == "success", "ActiveState=" + state + " Result=" + result
	})

	h.step("replacing the coordinator with version " + aptVersionN1)
	h.must(time.Minute, "docker", "rm", "-f", coord.name)
	coord.run(imageN1)
	cli.server = coord.url
	nodesOut := h.must(time.Minute, cli.path, cli.args("nodes")...)
	if !strings.Contains(nodesOut, aptVersionN+" (older)") {
		t.Errorf("after the coordinator moved to %s, podium nodes does not flag the node's %s as older:\n%s", aptVersionN1, aptVersionN, nodesOut)
	}

	h.step("apt-get update && apt-get upgrade on the drained node")
	node.must(5*time.Minute, "apt-get update && DEBIAN_FRONTEND=noninteractive apt-get upgrade -y")
	if got := node.must(time.Minute, "dpkg-query -W -f='${Version}' podium-agent"); got != aptDebN1+"-1" {
		t.Fatalf("apt-get upgrade left podium-agent at %s, want %s-1", got, aptDebN1)
	}
	if got := node.must(time.Minute, "podium-agent --version 2>&1 || true"); !strings.Contains(got, aptVersionN1) {
		t.Errorf("the upgraded podium-agent says %q, want %s", got, aptVersionN1)
	}
	nodeGet := h.must(time.Minute, cli.path, cli.args("node", "get", nodeID)...)
	if !strings.Contains(nodeGet, "draining:") {
		t.Errorf("after the upgrade the node is no longer draining:\n%s", nodeGet)
	}
	tasks := h.must(time.Minute, cli.path, cli.args("tasks", "--node", nodeID)...)
	if !strings.Contains(tasks, "succeeded") {
		t.Errorf("after the upgrade the node's finished task is gone:\n%s", tasks)
	}

	h.step("undrain: the agent reports " + aptVersionN1)
	h.must(time.Minute, cli.path, cli.args("node", "undrain", nodeID)...)
	node.must(2*time.Minute, "systemctl start podium-agent")
	h.eventually(time.Minute, "podium nodes to show the upgraded agent", func() (bool, string) {
		v, err := h.nodeVersion(cli, nodeID)
		if err != nil {
			return false, err.Error()
		}
		return v == aptVersionN1, v
	})
	if out := h.must(time.Minute, cli.path, cli.args("nodes")...); strings.Contains(out, "(older)") {
		t.Errorf("after the upgrade podium nodes still flags a node:\n%s", out)
	}
	runTask("upgraded by apt")

	h.step("a Packages file changed by one byte: apt-get update refuses it")
	gateway := strings.TrimSpace(h.must(time.Minute, "docker", "network", "inspect", "-f", "{{(index .IPAM.Config 0).Gateway}}", network))
	proxy := h.tamperingProxy(net.JoinHostPort(gateway, "0"), coord)
	node.must(time.Minute, "sed -i 's#^URIs: .*#URIs: "+proxy+"/apt#' /etc/apt/sources.list.d/podium.sources")
	out, err = node.exec(5*time.Minute, "apt-get update 2>&1")
	if err == nil {
		t.Errorf("apt-get update accepted a tampered Packages file:\n%s", out)
	}
	if !strings.Contains(out, "Hash Sum mismatch") {
		t.Errorf("apt-get update did not report a hash mismatch for the tampered Packages file:\n%s", out)
	}
	h.step("done")
}

// configureAgent sets the node's agent up as TestAgentPackageAndCoordinatorImage
// explains: the data directory shared with the host, the runner from there,
// no egress filter (the node is a container), the test CA, and a drop-in
// that lets the sandboxed unit write its data directory.
func (n *debianNode) configureAgent(dataDir string) {
	n.must(time.Minute, "cp /usr/bin/podium-runner "+dataDir+"/podium-runner")
	flags := "--max-tasks 2 --exit-on-drain --egress-filter=false --runner " + dataDir + "/podium-runner"
	n.must(time.Minute, fmt.Sprintf("printf '%%s\\n' 'PODIUM_AGENT_DATA_DIR=%s' 'PODIUM_AGENT_FLAGS=%s' 'PODIUM_CA_FILE=%s' >>/etc/podium/agent.env",
		dataDir, flags, nodeCAFile))
	n.must(time.Minute, "mkdir -p /etc/systemd/system/podium-agent.service.d && cat >/etc/systemd/system/podium-agent.service.d/packagingtest.conf <<'EOF'\n"+
		"[Service]\nReadWritePaths="+dataDir+"\nEOF\nsystemctl daemon-reload")
}

// buildVersionImage builds the coordinator image stamped with version (and
// its agent package with debVersion), for this machine's architecture.
func (h *harness) buildVersionImage(version, debVersion string) string {
	h.step("make image VERSION=" + version)
	image := "podium-test/coordinator:pkgtest-" + h.suffix + "-" + debVersion
	h.must(10*time.Minute, "make", "--no-print-directory", "image", "IMAGE="+image,
		"VERSION="+version, "DEB_VERSION="+debVersion, "DEB_ARCHES="+runtime.GOARCH)
	h.t.Cleanup(func() { _, _ = h.command(time.Minute, "docker", "rmi", "-f", image) })
	return image
}

// buildFakeDocker builds the empty package that stands in for docker.io
// (see testdata/fake-docker.nfpm.yaml) into a directory of its own.
func (h *harness) buildFakeDocker() string {
	h.step("building the fake docker.io package")
	dir := filepath.Join(h.t.TempDir(), "debs")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		h.t.Fatal(err)
	}
	h.must(time.Minute, "make", "--no-print-directory", "nfpm")
	nfpm := filepath.Join(strings.TrimSpace(h.must(time.Minute, "go", "env", "GOPATH")), "bin", "nfpm")
	h.must(time.Minute, nfpm, "package", "--config", "internal/packagingtest/testdata/fake-docker.nfpm.yaml",
		"--packager", "deb", "--target", dir+"/")
	if err := os.Chmod(dir, 0o755); err != nil {
		h.t.Fatal(err)
	}
	return dir
}

// secretsKeyDir is a directory holding a secrets key the coordinator's user
// (65532 in the image) owns, mode 0600 as the coordinator insists.
func (h *harness) secretsKeyDir() string {
	dir, err := os.MkdirTemp("", "podium-pkgtest-secrets-")
	if err != nil {
		h.t.Fatal(err)
	}
	h.cleanup(dir, func() { _ = os.RemoveAll(dir) })
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		h.t.Fatal(err)
	}
	path := filepath.Join(dir, "key")
	if err := os.WriteFile(path, key, 0o600); err != nil {
		h.t.Fatal(err)
	}
	if err := os.Chown(path, 65532, 65532); err != nil {
		h.t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		h.t.Fatal(err)
	}
	return dir
}

// tamperingProxy serves the coordinator's /apt/ on addr over plain HTTP,
// with one byte of every Packages index changed: what a hostile mirror or
// network in between would do. It stops when the test ends.
func (h *harness) tamperingProxy(addr string, coord *coordinator) string {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		h.t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		res, err := coord.hc.Get(coord.url + r.URL.Path)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer res.Body.Close()
		body, err := io.ReadAll(io.LimitReader(res.Body, 64<<20))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		if strings.Contains(r.URL.Path, "/Packages") && len(body) > 0 {
			body = bytes.Clone(body)
			body[len(body)/2] ^= 0x01
		}
		w.WriteHeader(res.StatusCode)
		_, _ = w.Write(body)
	})}
	go func() { _ = srv.Serve(ln) }()
	h.t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}

// installCA makes the node trust the test CA the coordinator's certificate
// is from, system-wide (apt and apt-helper use the system's CA store) and at
// nodeCAFile for the agent, as an operator with a private CA would.
func (n *debianNode) installCA(caFile string) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		n.h.t.Fatal(err)
	}
	n.must(time.Minute, "cat >/usr/local/share/ca-certificates/podium-test.crt <<'EOF'\n"+string(pem)+"EOF\n"+
		"cp /usr/local/share/ca-certificates/podium-test.crt "+nodeCAFile+" && update-ca-certificates >/dev/null")
}

// nodeVersion is what `podium nodes --json` says of the node's agent version.
func (h *harness) nodeVersion(cli *cliBinary, nodeID string) (string, error) {
	out, stderr, code := h.run(time.Minute, cli.path, cli.args("nodes", "--json")...)
	if code != 0 {
		return "", fmt.Errorf("podium nodes exited %d: %s", code, stderr)
	}
	var nodes []struct {
		ID           string `json:"id"`
		AgentVersion string `json:"agent_version"`
		Draining     bool   `json:"draining"`
	}
	if err := json.Unmarshal([]byte(out), &nodes); err != nil {
		return "", fmt.Errorf("%v: %s", err, out)
	}
	for _, n := range nodes {
		if n.ID == nodeID {
			return n.AgentVersion, nil
		}
	}
	return "", fmt.Errorf("no node %s in %s", nodeID, out)
}
