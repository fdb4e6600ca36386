// Package gpu finds the NVIDIA GPUs of the machine the agent runs on, so the
// node can offer them to tasks one by one.
//
// It asks nvidia-smi, which ships with the driver wherever the NVIDIA
// container runtime works, rather than linking NVML: the agent stays a static
// binary, and a machine without the driver simply has no nvidia-smi. No
// nvidia-smi means no GPUs, not an error. An nvidia-smi that is present but
// fails (driver not loaded, GPU fallen off the bus) is an error the caller
// logs, and the node offers no GPUs until the next discovery (SIGHUP).
//
// What nvidia-smi prints is bounded and checked before anything is believed:
// a broken driver or a wrapper script on PATH must not make the node claim
// GPUs it cannot hand to a container.
package gpu

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// GPU is one device as the node reports it and assigns it to a task.
type GPU struct {
	// Index is nvidia-smi's index, stable until the next reboot.
	Index int
	// UUID is the device's identity ("GPU-…"); it is what a container's
	// device request names, because indexes can change across reboots.
	UUID string
	// Model is the product name, e.g. "NVIDIA H100 80GB HBM3".
	Model string
	// MemoryMiB is the device's total memory.
	MemoryMiB int64
}

// Query is the nvidia-smi command line Discover runs.
var Query = []string{"--query-gpu=index,uuid,name,memory.total", "--format=csv,noheader"}

const (
	// MaxGPUs bounds what one node reports: the largest machines carry 16.
	MaxGPUs = 64
	// maxOutput bounds what is read from nvidia-smi.
	maxOutput = 64 << 10
	// maxModel bounds a product name.
	maxModel = 128
	// timeout bounds one run of nvidia-smi; a hung driver must not hang the
	// agent's start.
	timeout = 10 * time.Second
)

// uuidPattern is the form NVIDIA gives device UUIDs (MIG devices have their
// own "MIG-" identities and are not offered).
var uuidPattern = regexp.MustCompile(`^GPU-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// Discover runs nvidia-smi (found on PATH when path is empty) and returns the
// machine's GPUs. A machine without nvidia-smi has none: nil, nil.
func Discover(ctx context.Context, path string) ([]GPU, error) {
	if path == "" {
		p, err := exec.LookPath("nvidia-smi")
		if errors.Is(err, exec.ErrNotFound) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("look for nvidia-smi: %w", err)
		}
		path = p
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, Query...)
	var out, stderr limitedBuffer
	out.max, stderr.max = maxOutput, 4<<10
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = strings.TrimSpace(out.String())
		}
		return nil, fmt.Errorf("%s %s: %w: %s (the node offers no GPUs; fix the driver, then send the agent SIGHUP)",
			path, strings.Join(Query, " "), err, firstLine(msg))
	}
	if out.over {
		return nil, fmt.Errorf("nvidia-smi printed more than %d bytes; the node offers no GPUs", maxOutput)
	}
	return Parse(out.Bytes())
}

// Parse reads the output of nvidia-smi with Query: one line per GPU,
// "index, uuid, name, memory.total" with the memory in MiB ("81559 MiB").
// A line it cannot read fails the whole parse: a node that reports some of
// its GPUs wrong is worse than one that reports none and says why.
func Parse(out []byte) ([]GPU, error) {
	var gpus []GPU
	seenUUID, seenIndex := map[string]bool{}, map[int]bool{}
	for n, line := range strings.Split(strings.TrimRight(string(out), "\r\n"), "\n") {
		line = strings.TrimRight(line, "\r")
		if strings.TrimSpace(line) == "" {
			continue
		}
		if len(gpus) == MaxGPUs {
			return nil, fmt.Errorf("nvidia-smi lists more than %d GPUs", MaxGPUs)
		}
		g, err := parseLine(line)
		if err != nil {
			return nil, fmt.Errorf("nvidia-smi line %d (%q): %w", n+1, truncate(line, 200), err)
		}
		if seenUUID[g.UUID] || seenIndex[g.Index] {
			return nil, fmt.Errorf("nvidia-smi line %d: GPU %d (%s) is listed twice", n+1, g.Index, g.UUID)
		}
		seenUUID[g.UUID], seenIndex[g.Index] = true, true
		gpus = append(gpus, g)
	}
	return gpus, nil
}

func parseLine(line string) (GPU, error) {
	// The name may not contain a comma, but split from both ends anyway:
	// index and uuid first, memory last, the name whatever is between.
	first := strings.SplitN(line, ",", 3)
	if len(first) != 3 {
		return GPU{}, errors.New("want 4 comma-separated fields: index, uuid, name, memory.total")
	}
	cut := strings.LastIndex(first[2], ",")
	if cut < 0 {
		return GPU{}, errors.New("want 4 comma-separated fields: index, uuid, name, memory.total")
	}
	idx, uuid := strings.TrimSpace(first[0]), strings.TrimSpace(first[1])
	name, mem := strings.TrimSpace(first[2][:cut]), strings.TrimSpace(first[2][cut+1:])
	i, err := strconv.Atoi(idx)
	if err != nil || i < 0 || i >= 1024 {
		return GPU{}, fmt.Errorf("index %q is not a number from 0 to 1023", idx)
	}
	if !uuidPattern.MatchString(uuid) {
		return GPU{}, fmt.Errorf("uuid %q is not a GPU UUID (GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)", truncate(uuid, 64))
	}
	if name == "" || len(name) > maxModel || strings.ContainsFunc(name, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return GPU{}, fmt.Errorf("name must be 1 to %d printable bytes", maxModel)
	}
	mib, ok := strings.CutSuffix(mem, " MiB")
	if !ok {
		mib = mem // --format=csv,nounits prints the number alone
	}
	m, err := strconv.ParseInt(mib, 10, 64)
	if err != nil || m <= 0 || m > 16<<20 {
		return GPU{}, fmt.Errorf("memory.total %q is not a size in MiB from 1 to 16 TiB", truncate(mem, 32))
	}
	return GPU{Index: i, UUID: uuid, Model: name, MemoryMiB: m}, nil
}

// limitedBuffer keeps the first max bytes written to it and notes whether
// more came; the writer is never refused, so the child does not die of a
// broken pipe before it exits. It holds its bytes.Buffer in a field, not
// embedded: an embedded one's ReadFrom would let io.Copy (which exec uses)
// write past the bound.
type limitedBuffer struct {
	buf  bytes.Buffer
	max  int
	over bool
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	room := b.max - b.buf.Len()
	if room < len(p) {
		b.over = true
		if room > 0 {
			b.buf.Write(p[:room])
		}
		return len(p), nil
	}
	return b.buf.Write(p)
}

func (b *limitedBuffer) Bytes() []byte  { return b.buf.Bytes() }
func (b *limitedBuffer) String() string { return b.buf.String() }

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return truncate(s, 200)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
