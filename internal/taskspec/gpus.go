package taskspec

import (
	"strings"
	"unicode"

	"github.com/podiumhq/podium/internal/glob"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// The bounds of a task's GPU request (issue 18). A GPU is given whole to one
// task, so gpus counts devices, and no machine a team owns holds more than a
// few dozen: 64 is past any of them, so only a typo meets it, and a typo that
// placement would otherwise keep waiting forever ("no connected node has 800
// free GPUs"). The model is a pattern matched against the name nvidia-smi
// reports ("NVIDIA H100 80GB HBM3"), far shorter than 128 bytes; the memory
// bound (16 TiB in MiB) is past any GPU made and keeps the number meaningful.
const (
	MaxGPUs          = 64
	MaxGPUModelBytes = 128
	MaxGPUMemoryMB   = 16 << 20
)

// checkGPUs checks the task's own GPU request: a count within [0, MaxGPUs],
// a model pattern and a memory floor only alongside a count (alone they would
// ask nothing of a node and silently mean "no GPU"), the pattern a valid glob
// of at most MaxGPUModelBytes, the memory within [0, MaxGPUMemoryMB].
func checkGPUs(field string, r *podiumv1.Resources) error {
	n, model, mem := r.GetGpus(), r.GetGpuModel(), r.GetGpuMemoryMb()
	if n < 0 {
		return fieldErr(field+".gpus", "%d is negative: give 0 (no GPU) or how many whole GPUs the task needs, e.g. 1", n)
	}
	if n > MaxGPUs {
		return fieldErr(field+".gpus", "%d is more than %d GPUs: give how many whole GPUs the task needs, e.g. 1", n, MaxGPUs)
	}
	if model != "" {
		if err := CheckGPUModel(field+".gpu_model", model); err != nil {
			return err
		}
	}
	if mem < 0 {
		return fieldErr(field+".gpu_memory_mb", "%d is negative: give 0 (any GPU) or the least MiB each GPU must have, e.g. 81920", mem)
	}
	if mem > MaxGPUMemoryMB {
		return fieldErr(field+".gpu_memory_mb", "%d is more than %d MiB (16 TiB), more than any GPU has: give the least MiB each GPU must have, e.g. 81920",
			mem, MaxGPUMemoryMB)
	}
	if n == 0 && model != "" {
		return fieldErr(field+".gpu_model", "is set but gpus is 0: set gpus to how many GPUs the task needs, or leave gpu_model out")
	}
	if n == 0 && mem != 0 {
		return fieldErr(field+".gpu_memory_mb", "is set but gpus is 0: set gpus to how many GPUs the task needs, or leave gpu_memory_mb out")
	}
	return nil
}

// checkNoGPUs refuses a GPU request on a sidecar: GPUs are given to the
// task's own container, and a sidecar asking for them would be either
// ignored or counted for a container that never gets them.
func checkNoGPUs(field string, r *podiumv1.Resources) error {
	switch {
	case r.GetGpus() != 0:
		return fieldErr(field+".gpus", "is for the task's own container: a sidecar gets no GPU; ask for it in resources.gpus")
	case r.GetGpuModel() != "":
		return fieldErr(field+".gpu_model", "is for the task's own container: a sidecar gets no GPU; set it in resources.gpu_model")
	case r.GetGpuMemoryMb() != 0:
		return fieldErr(field+".gpu_memory_mb", "is for the task's own container: a sidecar gets no GPU; set it in resources.gpu_memory_mb")
	}
	return nil
}

// CheckGPUModel checks a GPU model pattern ("NVIDIA H100*"): *, ? and [...]
// as internal/glob reads them within one segment, at most MaxGPUModelBytes,
// no control character and no "/" (a GPU's name is one word for the glob, so
// a "/" could only make the pattern match nothing). The CLI checks its
// --gpu-model flag with it; field names what is wrong in the error.
func CheckGPUModel(field, model string) error {
	switch {
	case model == "":
		return fieldErr(field, "is empty: give a pattern for the GPU's name as nvidia-smi shows it, e.g. \"NVIDIA H100*\", or leave it out for any GPU")
	case len(model) > MaxGPUModelBytes:
		return fieldErr(field, "is %d bytes, more than %d: give a pattern for the GPU's name, e.g. \"NVIDIA H100*\"", len(model), MaxGPUModelBytes)
	case strings.IndexFunc(model, unicode.IsControl) >= 0:
		return fieldErr(field, "%s contains a control character, which no GPU's name holds", clip(model))
	case strings.Contains(model, "/"):
		return fieldErr(field, "%s contains \"/\", which no GPU's name holds: give a pattern such as \"NVIDIA H100*\"", clip(model))
	}
	if _, err := glob.Parse(model); err != nil {
		return fieldErr(field, "%s is not a valid pattern: write * for any run of characters, ? for one, [...] for one of a set, "+
			"\\[ or \\\\ for the character itself, e.g. \"NVIDIA H100*\"", clip(model))
	}
	return nil
}

// GPUModelMatches says whether a GPU's name matches a task's gpu_model
// pattern; an empty pattern matches every GPU, and a pattern that does not
// parse (a row stored before the rule) matches none, so such a task waits
// rather than getting a GPU it did not ask for.
func GPUModelMatches(model, name string) bool {
	return GPUModelMatcher(model)(name)
}

// GPUModelMatcher is GPUModelMatches with the pattern parsed once, for a
// caller matching one task's pattern against many GPUs. Placement (which
// nodes have such GPUs) and the agent (which of its GPUs to give) both use
// it, so the two cannot disagree about which GPUs count.
func GPUModelMatcher(model string) func(name string) bool {
	if model == "" {
		return func(string) bool { return true }
	}
	p, err := glob.Parse(model)
	if err != nil || strings.Contains(model, "/") {
		return func(string) bool { return false }
	}
	return p.Match
}
