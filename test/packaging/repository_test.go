package packaging

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// checkPublicPaths checks that the repository, /install.sh and the CLI's
// downloads need no token while the API still does, and that nothing but
// the repository is served under /apt/; then the download itself
// (checkDownloads) for the image's version.
func (c *coordinator) checkPublicPaths(version string) {
	h, t := c.h, c.h.t
	h.step("the repository needs no token; the API still does")
	noRedirects := &http.Client{Transport: c.hc.Transport, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}
	for path, want := range map[string]int{"/apt/dists/stable/InRelease": 200, "/apt/podium.gpg": 200, "/install.sh": 200,
		"/apt/../metrics": 404, "/apt/nothing": 404, "/podium.v1.AdminService/ListNodes": 401,
		"/download/": 200, "/download/SHA256SUMS": 200, "/download/nothing": 404} {
		method := http.MethodGet
		if strings.HasPrefix(path, "/podium.v1.") {
			method = http.MethodPost
		}
		req, err := http.NewRequest(method, c.url+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		res, err := noRedirects.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		// The mux answers a path with ".." with a redirect to the
		// cleaned path, and serves nothing of the repository for it.
		redirected := res.StatusCode >= 300 && res.StatusCode < 400
		if res.StatusCode != want && !(want == 404 && redirected) {
			t.Errorf("%s %s without a token: %d, want %d", method, path, res.StatusCode, want)
		}
	}
	c.checkDownloads(version)
}

// checkDownloads fetches the CLI for this machine's architecture from the
// image's /download/, checks it against the SHA-256 in SHA256SUMS, and runs
// it: it is the podium of the image's version.
func (c *coordinator) checkDownloads(version string) {
	h, t := c.h, c.h.t
	h.step("the CLI from /download/, checked against SHA256SUMS")
	fetch := func(path string) []byte {
		res, err := c.hc.Get(c.url + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		if err != nil || res.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %v", path, res.StatusCode, err)
		}
		return b
	}
	name := "podium-linux-" + runtime.GOARCH
	sums := string(fetch("/download/SHA256SUMS"))
	bin := fetch("/download/" + name)
	sum := sha256.Sum256(bin)
	if !strings.Contains(sums, hex.EncodeToString(sum[:])+"  "+name+"\n") {
		t.Fatalf("the downloaded %s (sha256 %x) is not in SHA256SUMS:\n%s", name, sum, sums)
	}
	path := filepath.Join(t.TempDir(), "podium")
	if err := os.WriteFile(path, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if out := h.must(time.Minute, path, "version"); !strings.HasPrefix(out, "podium "+version+" ") {
		t.Errorf("the downloaded CLI says %q, want podium %s", out, version)
	}
}

// configureAgent is the operator's configuration, and returns the agent's
// flags: agent.env moves the data directory and adds flags; a drop-in lets
// the sandboxed unit write there, and shortens the watchdog so that a frozen
// agent is noticed in seconds.
//   - --exit-on-drain: the upgrade path of docs/operations.md.
//   - --runner: the agent bind-mounts the runner by its path, which the
//     host's engine resolves on the host, so the packaged runner is used
//     from the shared data directory rather than from the container's
//     /usr/bin.
//   - --egress-filter=false: the node is a container of its own network
//     namespace on the host's engine, so the task networks' bridges are not
//     its interfaces and rules it made would filter nothing (the agent would
//     refuse every task, rightly); it has no iptables either.
//   - PODIUM_CA_FILE: the coordinator's certificate is the test CA's
//     (installCA).
func (n *debianNode) configureAgent(dataDir string) string {
	n.must(time.Minute, "cp /usr/bin/podium-runner "+dataDir+"/podium-runner")
	flags := "--max-tasks 2 --exit-on-drain --egress-filter=false --runner " + dataDir + "/podium-runner"
	n.must(time.Minute, fmt.Sprintf("printf '%%s\\n' 'PODIUM_AGENT_DATA_DIR=%s' 'PODIUM_AGENT_FLAGS=%s' 'PODIUM_CA_FILE=%s' >>/etc/podium/agent.env",
		dataDir, flags, nodeCAFile))
	n.must(time.Minute, "mkdir -p /etc/systemd/system/podium-agent.service.d && cat >/etc/systemd/system/podium-agent.service.d/packagingtest.conf <<'EOF'\n"+
		"[Service]\nReadWritePaths="+dataDir+"\nWatchdogSec=3s\nRestartSec=1s\nEOF\nsystemctl daemon-reload")
	return flags
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
