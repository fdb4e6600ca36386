package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podiumhq/podium/agent/identity"
)

func TestCommandLine(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	// A node enrolled with a coordinator it would reach in clear text across
	// a network (192.0.2.1: TEST-NET-1, reachable by nobody).
	plainDir := filepath.Join(t.TempDir(), "plain")
	if err := identity.Save(plainDir, &identity.Identity{CoordinatorURL: "http://192.0.2.1:7070", NodeID: "node_x", NodeKey: "k"}); err != nil {
		t.Fatal(err)
	}
	badCA := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(badCA, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args   []string
		code   int
		stdout string // substring expected on stdout
		stderr string // substring expected on stderr
	}{
		{args: nil, code: exitUsage, stderr: "Usage:"},
		{args: []string{"--help"}, code: exitOK, stdout: "podium-agent enroll"},
		{args: []string{"bogus"}, code: exitUsage, stderr: `unknown command "bogus"`},
		// Flags in the layout all three binaries share: --name, never Go's -name.
		{args: []string{"enroll", "--help"}, code: exitOK, stdout: "\n  --coordinator string"},
		// help COMMAND is COMMAND --help, not the top-level usage.
		{args: []string{"help", "run"}, code: exitOK, stdout: "\n  --max-tasks int"},
		{args: []string{"help", "enroll"}, code: exitOK, stdout: "-coordinator"},
		{args: []string{"run", "-h"}, code: exitOK, stdout: "-max-tasks"},
		{args: []string{"enroll", "--nope"}, code: exitUsage, stderr: "flag provided but not defined: -nope"},
		{args: []string{"enroll", "--token", "t"}, code: exitUsage, stderr: "--coordinator is required"},
		{args: []string{"enroll", "--coordinator", "http://c"}, code: exitUsage, stderr: "--token is required"},
		{args: []string{"enroll", "--coordinator", "c:80", "--token", "t", "--data-dir", dir}, code: exitFail, stderr: "write http://c:80"},
		{args: []string{"run", "--max-tasks", "x"}, code: exitUsage, stderr: "invalid value"},
		{args: []string{"run", "--max-tasks", "-1"}, code: exitUsage, stderr: "positive number"},
		{args: []string{"run", "--log-format", "xml"}, code: exitUsage, stderr: "use text or json"},
		{args: []string{"run", "extra"}, code: exitUsage, stderr: `unexpected argument "extra"`},
		{args: []string{"run", "--allow-egress", "169.254.169.254/16"}, code: exitUsage, stderr: "--allow-egress: \"169.254.169.254/16\" has bits set past its /16: write 169.254.0.0/16"},
		{args: []string{"run", "--permit-egress", "10.0.0.0/8,bogus"}, code: exitUsage, stderr: `--permit-egress: "bogus" is not an address or a CIDR range`},
		{args: []string{"run", "--egress-filter=false", "--permit-egress", "10.0.0.0/8"}, code: exitUsage, stderr: "--egress-filter=false turns off"},
		{args: []string{"run", "--default-memory", "lots"}, code: exitUsage, stderr: `--default-memory "lots": want a size`},
		{args: []string{"run", "--default-pids", "9000", "--max-pids", "4096"}, code: exitUsage, stderr: "--default-pids 9000 is above --max-pids 4096"},
		{args: []string{"run", "-h"}, code: exitOK, stdout: "PODIUM_AGENT_DEFAULT_PIDS"},
		{args: []string{"run", "-h"}, code: exitOK, stdout: "-disk-full-after"},
		{args: []string{"run", "--disk-full-after", "0s"}, code: exitUsage, stderr: "--disk-full-after 0s: give a duration between 1s and 24h"},
		{args: []string{"run", "--disk-full-after", "48h"}, code: exitUsage, stderr: "--disk-full-after 48h0m0s: give a duration between 1s and 24h"},
		{args: []string{"run", "-h"}, code: exitOK, stdout: "-network-pool"},
		{args: []string{"run", "-h"}, code: exitOK, stdout: "-allow-privileged-sidecars"},
		{args: []string{"run", "-h"}, code: exitOK, stdout: "-nvidia-smi"},
		{args: []string{"run", "--nvidia-smi", "/nonexistent/nvidia-smi"}, code: exitUsage, stderr: "--nvidia-smi /nonexistent/nvidia-smi: not an executable file"},
		{args: []string{"run", "--network-pool", "-1"}, code: exitUsage, stderr: "--network-pool -1: give the number of networks to keep ready, or 0 for none"},
		{args: []string{"run", "--data-dir", dir}, code: exitFail, stderr: "podium-agent enroll --coordinator URL --token T"},
		// Plain http:// goes only to loopback or the tailnet, unless the
		// operator says so; the refusals name the way out.
		{args: []string{"enroll", "--coordinator", "http://192.0.2.1:7070", "--token", "t", "--data-dir", dir}, code: exitFail, stderr: "--insecure-plaintext"},
		{args: []string{"enroll", "--coordinator", "http://192.0.2.1:7070", "--token", "t", "--data-dir", dir}, code: exitFail, stderr: "https://"},
		{args: []string{"run", "--data-dir", plainDir}, code: exitFail, stderr: "--insecure-plaintext"},
		// 100.80.0.9 is in 100.64.0.0/10 but this machine has no tailscale0
		// to route it out (issue 28): carrier-grade NAT, not the tailnet.
		{args: []string{"enroll", "--coordinator", "http://100.80.0.9:7070", "--token", "t", "--data-dir", dir}, code: exitFail, stderr: "tailnet interface tailscale0"},
		{args: []string{"enroll", "--coordinator", "http://100.80.0.9:7070", "--token", "t", "--data-dir", dir}, code: exitFail, stderr: "--tailnet-interface NAME"},
		{args: []string{"enroll", "--coordinator", "http://100.80.0.9:7070", "--token", "t", "--data-dir", dir, "--tailnet-interface", "ts/0"}, code: exitFail, stderr: `--tailnet-interface "ts/0" is not an interface name`},
		{args: []string{"run", "--data-dir", plainDir, "--tailnet-interface", strings.Repeat("t", 16)}, code: exitFail, stderr: "at most 15 characters"},
		{args: []string{"enroll", "--coordinator", "https://c", "--token", "t", "--ca-file", badCA, "--data-dir", dir}, code: exitFail, stderr: "holds no PEM certificate"},
		{args: []string{"run", "--data-dir", plainDir, "--ca-file", "/nonexistent/ca.pem"}, code: exitFail, stderr: "CA file"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			for _, v := range []string{"PODIUM_ENROLL_TOKEN", "PODIUM_CA_FILE", "PODIUM_INSECURE_PLAINTEXT", "PODIUM_TSNET_AUTHKEY", "PODIUM_TAILNET_INTERFACE"} {
				t.Setenv(v, "")
			}
			var stdout, stderr bytes.Buffer
			code := run(tc.args, &stdout, &stderr)
			if code != tc.code {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, tc.code, stderr.String())
			}
			if !strings.Contains(stdout.String(), tc.stdout) {
				t.Errorf("stdout %q does not contain %q", stdout.String(), tc.stdout)
			}
			if !strings.Contains(stderr.String(), tc.stderr) {
				t.Errorf("stderr %q does not contain %q", stderr.String(), tc.stderr)
			}
		})
	}
}
