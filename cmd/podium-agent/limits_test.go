package main

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/podiumhq/podium/agent/executor"
)

// The limit flags read into the executor's limits: the built-in defaults
// worked out from the machine, sizes in any binary unit, shares of memory,
// and each mistake named by its flag.
func TestLimitFlags(t *testing.T) {
	t.Parallel()
	m := machine{cores: 8, memoryMB: 32768}
	for _, tc := range []struct {
		name string
		args []string
		m    machine
		want executor.Limits
		err  string
	}{
		{name: "built-in defaults", m: m,
			want: executor.Limits{DefaultCPU: 7, DefaultMemoryMB: 8192, DefaultPids: 4096, WorkspaceBytes: 10 << 30}},
		{name: "a one-core machine still gets a core", m: machine{cores: 1, memoryMB: 1024},
			want: executor.Limits{DefaultCPU: 1, DefaultMemoryMB: 256, DefaultPids: 4096, WorkspaceBytes: 10 << 30}},
		{name: "an unmeasured machine gets no machine-relative default", m: machine{},
			want: executor.Limits{DefaultPids: 4096, WorkspaceBytes: 10 << 30}},
		{name: "every flag", m: m,
			args: []string{"--default-cpu", "0.5", "--default-memory", "512m", "--default-pids", "100", "--default-timeout", "24h",
				"--default-user", "65534", "--max-cpu", "4", "--max-memory", "4GiB", "--max-pids", "1000", "--max-timeout", "48h",
				"--workspace-limit", "1.5g"},
			want: executor.Limits{DefaultCPU: 0.5, DefaultMemoryMB: 512, DefaultPids: 100, DefaultTimeout: 24 * time.Hour, DefaultUser: "65534",
				MaxCPU: 4, MaxMemoryMB: 4096, MaxPids: 1000, MaxTimeout: 48 * time.Hour, WorkspaceBytes: 3 << 29}},
		{name: "zeros turn the limits off", m: m,
			args: []string{"--default-cpu", "0", "--default-memory", "0", "--default-pids", "0", "--workspace-limit", "0"},
			want: executor.Limits{}},
		{name: "a maximum lowers a built-in default to it", m: m,
			args: []string{"--max-cpu", "2", "--max-memory", "50%", "--max-pids", "512"},
			want: executor.Limits{DefaultCPU: 2, DefaultMemoryMB: 8192, DefaultPids: 512, MaxCPU: 2, MaxMemoryMB: 16384, MaxPids: 512, WorkspaceBytes: 10 << 30}},
		{name: "a default given above its maximum is refused", m: m,
			args: []string{"--default-memory", "8g", "--max-memory", "4g"}, err: "--default-memory 8g is above --max-memory 4g"},
		{name: "a default timeout above the maximum is refused", m: m,
			args: []string{"--default-timeout", "2h", "--max-timeout", "1h"}, err: "--default-timeout 2h is above --max-timeout 1h"},
		{name: "bad size", m: m, args: []string{"--default-memory", "lots"}, err: `--default-memory "lots": want a size`},
		{name: "memory below what Docker takes", m: m, args: []string{"--default-memory", "1m"}, err: "at least 6 MiB"},
		{name: "bad share", m: m, args: []string{"--max-memory", "150%"}, err: "--max-memory \"150%\": want a share"},
		{name: "bad cpu", m: m, args: []string{"--max-cpu", "-1"}, err: "--max-cpu \"-1\": want a number of cores"},
		{name: "bad pids", m: m, args: []string{"--default-pids", "1.5"}, err: "--default-pids \"1.5\": want a whole number"},
		{name: "timeout without a unit", m: m, args: []string{"--max-timeout", "3600"}, err: "--max-timeout \"3600\""},
		{name: "bad user", m: m, args: []string{"--default-user", "nobody:nogroup"}, err: "--default-user \"nobody:nogroup\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fs := flag.NewFlagSet("run", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			lf := taskLimitFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			got, err := lf.limits(tc.m)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("limits %+v, want %+v", got, tc.want)
			}
		})
	}
}

// The environment variables agent.env sets are the flags' defaults; a flag
// on the command line still wins.
func TestLimitFlagsFromEnvironment(t *testing.T) {
	t.Setenv("PODIUM_AGENT_DEFAULT_PIDS", "128")
	t.Setenv("PODIUM_AGENT_DEFAULT_USER", "65534")
	t.Setenv("PODIUM_AGENT_MAX_MEMORY", "2GiB")
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	lf := taskLimitFlags(fs)
	if err := fs.Parse([]string{"--default-pids", "256"}); err != nil {
		t.Fatal(err)
	}
	got, err := lf.limits(machine{cores: 4, memoryMB: 16384})
	if err != nil {
		t.Fatal(err)
	}
	if got.DefaultPids != 256 || got.DefaultUser != "65534" || got.MaxMemoryMB != 2048 || got.DefaultMemoryMB != 2048 {
		t.Fatalf("limits %+v, want pids 256 from the flag, user 65534 and a 2 GiB maximum (and default) from the environment", got)
	}
}
