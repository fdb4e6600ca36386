package runner

import (
	"os"
	"path/filepath"
	"testing"
)

// The cgroup trees below are stand-ins: plain files laid out as the kernel
// lays out a container's cgroup filesystem, because a test cannot make the
// kernel show it a cgroup v2 tree on a v1 machine or a kernel without
// memory.peak. The real cgroup is read end to end by test/e2e's
// TestUsageOfABusyTaskIsReported.

func writeFiles(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func figure(p *int64) any {
	if p == nil {
		return "unknown"
	}
	return *p
}

func TestReadUsageOfCgroupV2InAPrivateNamespace(t *testing.T) {
	root := t.TempDir()
	writeFiles(t, root, map[string]string{
		"cgroup.controllers": "cpu memory pids\n",
		"cgroup.type":        "domain\n",
		"cpu.stat":           "usage_usec 1023456\nuser_usec 1000000\nsystem_usec 23456\n",
		"memory.peak":        "109051904\n",
	})
	cpu, peak := readUsage(root, []byte("0::/\n"))
	if cpu == nil || *cpu != 1023456 || peak == nil || *peak != 109051904 {
		t.Fatalf("cpu %v µs, peak %v B; want 1023456 and 109051904", figure(cpu), figure(peak))
	}
}

// A kernel before 5.19 has no memory.peak: the peak is unknown, not 0, and
// the CPU time is still read.
func TestReadUsageWithoutMemoryPeakIsUnknown(t *testing.T) {
	root := t.TempDir()
	writeFiles(t, root, map[string]string{
		"cgroup.controllers": "cpu memory\n",
		"cgroup.type":        "domain\n",
		"cpu.stat":           "usage_usec 5000\n",
	})
	cpu, peak := readUsage(root, []byte("0::/\n"))
	if cpu == nil || *cpu != 5000 || peak != nil {
		t.Fatalf("cpu %v, peak %v; want 5000 and unknown", figure(cpu), figure(peak))
	}
}

// With the host's cgroup namespace and the whole hierarchy mounted, the
// container's directory is found by its path; the root's figures (the whole
// machine's) are never taken for the task's.
func TestReadUsageFindsTheContainersDirectoryAndRefusesTheRoot(t *testing.T) {
	root := t.TempDir()
	scope := "system.slice/docker-abc.scope"
	writeFiles(t, root, map[string]string{
		"cgroup.controllers":          "cpu memory\n",
		"cpu.stat":                    "usage_usec 999999999\n",
		scope + "/cgroup.controllers": "cpu memory\n",
		scope + "/cgroup.type":        "domain\n",
		scope + "/cpu.stat":           "usage_usec 42\n",
		scope + "/memory.peak":        "4096\n",
	})
	cpu, peak := readUsage(root, []byte("0::/"+scope+"\n"))
	if cpu == nil || *cpu != 42 || peak == nil || *peak != 4096 {
		t.Fatalf("cpu %v, peak %v; want the scope's 42 and 4096", figure(cpu), figure(peak))
	}
	cpu, peak = readUsage(root, []byte("0::/somewhere/not/mounted\n"))
	if cpu != nil || peak != nil {
		t.Fatalf("the root cgroup read as the task's: cpu %v, peak %v; want unknown", figure(cpu), figure(peak))
	}
}

// cgroup v1, as runc mounts it in a container: each controller's container
// directory in place of the controller's hierarchy.
func TestReadUsageOfCgroupV1(t *testing.T) {
	root := t.TempDir()
	writeFiles(t, root, map[string]string{
		"cpuacct/cpuacct.usage":            "2500000000\n",
		"memory/memory.max_usage_in_bytes": "104857600\n",
	})
	self := []byte("12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n0::/\n")
	cpu, peak := readUsage(root, self)
	if cpu == nil || *cpu != 2500000 || peak == nil || *peak != 104857600 {
		t.Fatalf("cpu %v µs, peak %v B; want 2500000 and 104857600", figure(cpu), figure(peak))
	}
	// Garbage in a file is unknown, not 0.
	writeFiles(t, root, map[string]string{"memory/memory.max_usage_in_bytes": "lots\n"})
	if _, peak := readUsage(root, self); peak != nil {
		t.Fatalf("peak %v from a file that holds no number; want unknown", figure(peak))
	}
}
