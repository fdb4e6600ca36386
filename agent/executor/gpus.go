package executor

// GPUs (Config.GPUs): which of the node's GPUs an attempt holds, the record
// of them in its host directory that a restarted agent reads back to keep
// them, and what its task container is given: a Docker device request for
// exactly those GPUs and NVIDIA_VISIBLE_DEVICES naming them.
//
// Everything GPU-specific of a run is in this file; the rest of the executor
// calls it at four points: Start (take and record), validate (refuse),
// createContainer (the device request) and main (release), and Resume
// (restore).

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/docker/docker/api/types/container"
	"golang.org/x/sys/unix"

	"github.com/podiumhq/podium/agent/gpu"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// gpusFile, in an attempt's host directory, records the UUIDs of the GPUs
// the attempt holds, written before its container is created: a restarted
// agent that resumes the attempt holds them again (restoreGPUs), so no other
// task is given a GPU the running one uses.
const gpusFile = "gpus.json"

// maxGPUsRecord bounds what is read back of gpusFile: 64 UUIDs and the JSON
// around them fit many times over.
const maxGPUsRecord = 16 << 10

// gpuRecord is gpusFile's content.
type gpuRecord struct {
	UUIDs []string `json:"uuids"`
}

// VisibleDevicesEnv is the variable the NVIDIA container runtime reads to
// decide which GPUs a container sees.
const VisibleDevicesEnv = "NVIDIA_VISIBLE_DEVICES"

// noGPU is NVIDIA_VISIBLE_DEVICES for a container of a GPU node that gets no
// GPU: the runtime then gives it none, even where the NVIDIA runtime is the
// engine's default and the image (nvidia/cuda and its descendants) says
// "all".
const noGPU = "void"

// gpuRequest is what a spec asks of the node's GPUs.
func gpuRequest(spec *podiumv1.TaskSpec) gpu.Request {
	res := spec.GetResources()
	return gpu.Request{N: int(res.GetGpus()), Model: res.GetGpuModel(), MemoryMiB: res.GetGpuMemoryMb()}
}

// GPURefusal says why the node cannot give an assignment the GPUs its spec
// asks for now, or "" when it can (or the spec asks none). The session asks
// before it accepts an assignment and sends one refused back to the
// coordinator, as it does one for want of a slot, so the task is placed
// again rather than failed.
func (e *Executor) GPURefusal(a *podiumv1.Assign) string {
	req := gpuRequest(a.GetSpec())
	if req.N <= 0 {
		return ""
	}
	if e.gpus == nil {
		return fmt.Sprintf("node has no GPUs; the task asks %s", req)
	}
	if err := e.gpus.Check(req); err != nil {
		return err.Error()
	}
	return ""
}

// gpuHolder is the name the allocator knows the attempt by.
func (r *run) gpuHolder() string { return r.key.String() }

// takeGPUs gives a new attempt the GPUs its spec asks for; a refusal (the
// session checked, so only a node that lost GPUs in between sees one) is
// kept for validate to fail the attempt with.
func (r *run) takeGPUs() {
	req := gpuRequest(r.spec)
	if req.N <= 0 {
		return
	}
	if r.e.gpus == nil {
		r.gpuErr = fmt.Errorf("the task asks %s and this node has none: run it where `podium nodes` shows GPUs", req)
		return
	}
	got, err := r.e.gpus.Take(r.gpuHolder(), req)
	if err != nil {
		r.gpuErr = fmt.Errorf("the task's GPUs could not be given: %v", err)
		return
	}
	uuids := make([]string, len(got))
	for i, g := range got {
		uuids[i] = g.UUID
	}
	r.log.Info("GPUs assigned to the task", "gpus", uuids)
}

// gpuStatus is the failed status of an attempt whose GPUs could not be given.
func (r *run) gpuStatus() *podiumv1.StatusChange {
	if r.gpuErr == nil {
		return nil
	}
	return failed("%v", r.gpuErr)
}

// heldGPUs are the UUIDs the attempt holds.
func (r *run) heldGPUs() []string {
	if r.e.gpus == nil {
		return nil
	}
	return r.e.gpus.Held(r.gpuHolder())
}

// recordGPUs writes the attempt's GPUs into its host directory (made by
// prepareDir) for a restarted agent; an attempt without GPUs writes nothing.
func (r *run) recordGPUs() error {
	held := r.heldGPUs()
	if len(held) == 0 {
		return nil
	}
	b, err := json.Marshal(gpuRecord{UUIDs: held})
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(r.dir, gpusFile), b, 0o600); err != nil {
		return fmt.Errorf("record the task's GPUs: %w", err)
	}
	return nil
}

// recordedGPUs reads the attempt's record back: a regular file, not through
// a link, bounded, every entry a GPU UUID. No record is no GPUs.
func (r *run) recordedGPUs() ([]string, error) {
	f, err := os.OpenFile(filepath.Join(r.dir, gpusFile), os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", gpusFile)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxGPUsRecord+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxGPUsRecord {
		return nil, fmt.Errorf("%s is larger than %d bytes", gpusFile, maxGPUsRecord)
	}
	var rec gpuRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, fmt.Errorf("%s: %w", gpusFile, err)
	}
	if len(rec.UUIDs) > gpu.MaxGPUs {
		return nil, fmt.Errorf("%s lists %d GPUs, more than %d", gpusFile, len(rec.UUIDs), gpu.MaxGPUs)
	}
	for _, u := range rec.UUIDs {
		if !gpu.IsUUID(u) {
			return nil, fmt.Errorf("%s lists %q, which is not a GPU UUID", gpusFile, u)
		}
	}
	return rec.UUIDs, nil
}

// restoreGPUs holds again the GPUs of an attempt an earlier agent process
// started, from its record, or, without one, from its container's device
// request (found; nil when the container is gone, and a gone container
// holds no GPU).
func (r *run) restoreGPUs(found *container.InspectResponse) {
	if r.e.gpus == nil {
		return
	}
	uuids, err := r.recordedGPUs()
	if err != nil {
		r.log.Warn("the task's record of its GPUs cannot be read; taking them from its container", "err", err)
	}
	if len(uuids) == 0 && found != nil && found.HostConfig != nil {
		for _, d := range found.HostConfig.DeviceRequests {
			if d.Driver == gpuDriver {
				uuids = append(uuids, d.DeviceIDs...)
			}
		}
	}
	if len(uuids) == 0 {
		return
	}
	if err := r.e.gpus.Restore(r.gpuHolder(), uuids); err != nil {
		r.log.Error("a resumed task's GPUs are held by another task on this node", "err", err)
		return
	}
	r.log.Info("the resumed task keeps its GPUs", "gpus", uuids)
}

// releaseGPUs frees the attempt's GPUs: its container has ended.
func (r *run) releaseGPUs() {
	if r.e.gpus != nil {
		r.e.gpus.Release(r.gpuHolder())
	}
}

// gpuDriver is the device driver of the NVIDIA container toolkit.
const gpuDriver = "nvidia"

// withGPUs gives a container of the attempt what it may see of the node's
// GPUs. The task's container gets a device request for exactly the GPUs the
// attempt holds (docker run --gpus '"device=UUID,…"') and
// NVIDIA_VISIBLE_DEVICES naming them; on a node with GPUs every other
// container (a sidecar, a task asking none) gets NVIDIA_VISIBLE_DEVICES=void,
// so neither its image nor its spec's env can ask the NVIDIA runtime for
// GPUs behind the allocator's back. Nodes without GPUs are left as they
// were.
func (r *run) withGPUs(cs *containerSpec) {
	if r.e.gpus == nil {
		return
	}
	var held []string
	if cs.name == ContainerName(r.key) {
		held = r.heldGPUs()
	}
	if len(held) == 0 && len(r.e.gpus.GPUs()) == 0 {
		return
	}
	visible := noGPU
	if len(held) > 0 {
		visible = strings.Join(held, ",")
		cs.host.DeviceRequests = append(cs.host.DeviceRequests, container.DeviceRequest{
			Driver:       gpuDriver,
			DeviceIDs:    slices.Clone(held),
			Capabilities: [][]string{{"gpu"}},
		})
	}
	env := slices.DeleteFunc(slices.Clone(cs.cfg.Env), func(kv string) bool {
		return strings.HasPrefix(kv, VisibleDevicesEnv+"=")
	})
	cs.cfg.Env = append(env, VisibleDevicesEnv+"="+visible)
}
