package gpu_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podiumhq/podium/agent/gpu"
)

func readTestdata(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseEightH100s(t *testing.T) {
	t.Parallel()
	gpus, err := gpu.Parse(readTestdata(t, "h100x8.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if len(gpus) != 8 {
		t.Fatalf("%d GPUs, want 8", len(gpus))
	}
	for i, g := range gpus {
		if g.Index != i || g.Model != "NVIDIA H100 80GB HBM3" || g.MemoryMiB != 81559 || !strings.HasPrefix(g.UUID, "GPU-") {
			t.Errorf("GPU %d = %+v", i, g)
		}
	}
}

func TestParseMixedMachineAndUnitlessMemory(t *testing.T) {
	t.Parallel()
	out := readTestdata(t, "mixed.txt")
	gpus, err := gpu.Parse(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(gpus) != 2 || gpus[0].Model != "NVIDIA A100-SXM4-80GB" || gpus[0].MemoryMiB != 81920 ||
		gpus[1].Model != "NVIDIA GeForce RTX 4090" || gpus[1].MemoryMiB != 24564 {
		t.Fatalf("parsed %+v", gpus)
	}
	// --format=csv,noheader,nounits prints the memory without its unit.
	again, err := gpu.Parse([]byte(strings.ReplaceAll(string(out), " MiB", "")))
	if err != nil || len(again) != 2 || again[1].MemoryMiB != 24564 {
		t.Fatalf("without units: %+v, %v", again, err)
	}
}

func TestParseEmptyIsNoGPUs(t *testing.T) {
	t.Parallel()
	for _, out := range []string{"", "\n", "\r\n\n"} {
		gpus, err := gpu.Parse([]byte(out))
		if err != nil || len(gpus) != 0 {
			t.Errorf("Parse(%q) = %v, %v; want no GPUs", out, gpus, err)
		}
	}
}

// What a broken driver, a wrapper on PATH or a hostile file could print is
// refused whole, with the line and the field named.
func TestParseRefusesWhatIsNotAGPUList(t *testing.T) {
	t.Parallel()
	const u = "GPU-0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9"
	var many strings.Builder
	for i := range gpu.MaxGPUs + 1 {
		fmt.Fprintf(&many, "%d, GPU-0a1b2c3d-4e5f-6071-8293-%012x, NVIDIA H100 80GB HBM3, 81559 MiB\n", i, i)
	}
	for _, c := range []struct{ name, out, want string }{
		{"the driver's failure text", "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n", "want 4 comma-separated fields"},
		{"three fields", "0, " + u + ", 81559 MiB\n", "want 4 comma-separated fields"},
		{"index not a number", "zero, " + u + ", NVIDIA H100, 81559 MiB\n", `index "zero"`},
		{"negative index", "-1, " + u + ", NVIDIA H100, 81559 MiB\n", `index "-1"`},
		{"not a GPU UUID", "0, MIG-0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9, NVIDIA H100, 81559 MiB\n", "is not a GPU UUID"},
		{"empty name", "0, " + u + ", , 81559 MiB\n", "name must be"},
		{"control bytes in the name", "0, " + u + ", NVIDIA\x1b[2J H100, 81559 MiB\n", "name must be"},
		{"a name too long", "0, " + u + ", " + strings.Repeat("N", 129) + ", 81559 MiB\n", "name must be"},
		{"memory not a size", "0, " + u + ", NVIDIA H100, [N/A]\n", "memory.total"},
		{"memory zero", "0, " + u + ", NVIDIA H100, 0 MiB\n", "memory.total"},
		{"memory in other units", "0, " + u + ", NVIDIA H100, 80 GiB\n", "memory.total"},
		{"the same GPU twice", "0, " + u + ", NVIDIA H100, 81559 MiB\n1, " + u + ", NVIDIA H100, 81559 MiB\n", "listed twice"},
		{"the same index twice", "0, " + u + ", NVIDIA H100, 81559 MiB\n0, GPU-0a1b2c3d-4e5f-6071-8293-000000000000, NVIDIA H100, 81559 MiB\n", "listed twice"},
		{"more GPUs than a node reports", many.String(), "more than 64 GPUs"},
	} {
		gpus, err := gpu.Parse([]byte(c.out))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Parse = %v, %v; want an error saying %q", c.name, gpus, err, c.want)
		}
	}
}

// standIn writes an executable nvidia-smi that prints out and exits with
// code, after checking it was asked the query Discover documents. It stands
// in for the real one because this machine has no NVIDIA GPU or driver.
func standIn(t *testing.T, out string, code int) string {
	t.Helper()
	dir := t.TempDir()
	data := filepath.Join(dir, "out.txt")
	if err := os.WriteFile(data, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf(`#!/bin/sh
[ "$*" = %q ] || { echo "unexpected arguments: $*" >&2; exit 64; }
cat %q
exit %d
`, strings.Join(gpu.Query, " "), data, code)
	path := filepath.Join(dir, "nvidia-smi")
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestDiscoverRunsNvidiaSMI(t *testing.T) {
	t.Parallel()
	path := standIn(t, string(readTestdata(t, "h100x8.txt")), 0)
	gpus, err := gpu.Discover(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	if len(gpus) != 8 || gpus[7].Index != 7 {
		t.Fatalf("discovered %+v, want the 8 GPUs nvidia-smi printed", gpus)
	}
}

func TestDiscoverFailingNvidiaSMIIsAnErrorThatSaysWhatToDo(t *testing.T) {
	t.Parallel()
	path := standIn(t, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n", 9)
	gpus, err := gpu.Discover(context.Background(), path)
	if err == nil || gpus != nil || !strings.Contains(err.Error(), "couldn't communicate with the NVIDIA driver") ||
		!strings.Contains(err.Error(), "SIGHUP") {
		t.Fatalf("Discover = %v, %v; want no GPUs and an error quoting nvidia-smi and saying to send SIGHUP", gpus, err)
	}
}

func TestDiscoverBoundsWhatItReads(t *testing.T) {
	t.Parallel()
	path := standIn(t, strings.Repeat("0, GPU-0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9, NVIDIA H100, 81559 MiB\n", 1200), 0)
	gpus, err := gpu.Discover(context.Background(), path)
	if err == nil || gpus != nil || !strings.Contains(err.Error(), "more than 65536 bytes") {
		t.Fatalf("Discover of 80 KB = %d GPUs, %v; want no GPUs and the bound named", len(gpus), err)
	}
}

// A machine without the driver has no nvidia-smi, and so no GPUs: not an
// error. (Not parallel: it sets PATH.)
func TestDiscoverWithoutNvidiaSMIIsNoGPUs(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	gpus, err := gpu.Discover(context.Background(), "")
	if err != nil || gpus != nil {
		t.Fatalf("Discover = %v, %v; want nil, nil", gpus, err)
	}
}
