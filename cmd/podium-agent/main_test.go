package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

func TestCommandLine(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	for _, tc := range []struct {
		args   []string
		code   int
		stdout string // substring expected on stdout
		stderr string // substring expected on stderr
	}{
		{args: nil, code: exitUsage, stderr: "Usage:"},
		{args: []string{"--help"}, code: exitOK, stdout: "podium-agent enroll"},
		{args: []string{"bogus"}, code: exitUsage, stderr: `unknown command "bogus"`},
		{args: []string{"enroll", "--help"}, code: exitOK, stdout: "-coordinator"},
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
		{args: []string{"run", "--data-dir", dir}, code: exitFail, stderr: "podium-agent enroll --coordinator URL --token T"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Setenv("PODIUM_ENROLL_TOKEN", "")
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
