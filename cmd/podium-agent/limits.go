package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/podiumhq/podium/agent/capacity"
	"github.com/podiumhq/podium/agent/executor"
	"github.com/podiumhq/podium/internal/taskspec"
)

// Built-in defaults of the task limit flags, in the flags' own syntax.
const (
	defaultCPU       = "auto" // one less than the machine's cores, at least 1
	defaultMemory    = "25%"  // of the machine's memory
	defaultPids      = "4096"
	defaultWorkspace = "10GiB"
)

// limitFlag is one task limit flag: its name, its environment variable (the
// form agent.env sets), and its built-in default.
type limitFlag struct {
	name, env, def, usage string
	value                 *string
}

// limitFlags are the flags that set the node's limits on each task
// (executor.Limits).
type limitFlags struct {
	defaultCPU, defaultMemory, defaultPids, defaultTimeout, defaultUser limitFlag
	maxCPU, maxMemory, maxPids, maxTimeout                              limitFlag
	workspace                                                           limitFlag
}

func (f *limitFlags) all() []*limitFlag {
	return []*limitFlag{&f.defaultCPU, &f.defaultMemory, &f.defaultPids, &f.defaultTimeout, &f.defaultUser,
		&f.maxCPU, &f.maxMemory, &f.maxPids, &f.maxTimeout, &f.workspace}
}

// taskLimitFlags registers the limit flags on fs. Each takes its default
// from its environment variable when that is set, so /etc/podium/agent.env
// can set them one per line.
func taskLimitFlags(fs *flag.FlagSet) *limitFlags {
	f := &limitFlags{
		defaultCPU: limitFlag{name: "default-cpu", env: "PODIUM_AGENT_DEFAULT_CPU", def: defaultCPU,
			usage: "CPU `CORES` for each task container whose spec sets none; auto: this machine's cores less one, at least 1; 0: no limit"},
		defaultMemory: limitFlag{name: "default-memory", env: "PODIUM_AGENT_DEFAULT_MEMORY", def: defaultMemory,
			usage: "memory (`SIZE`, e.g. 2GiB, or a share of this machine's, e.g. 25%) for each task container whose spec sets none; swap is not allowed on top; 0: no limit"},
		defaultPids: limitFlag{name: "default-pids", env: "PODIUM_AGENT_DEFAULT_PIDS", def: defaultPids,
			usage: "processes and threads (`N`) for each task container whose spec sets none; a task that reaches its limit is stopped (\"pids limit\"); 0: no limit"},
		defaultTimeout: limitFlag{name: "default-timeout", env: "PODIUM_AGENT_DEFAULT_TIMEOUT", def: "0",
			usage: "stop a task whose spec sets no timeout after `DURATION`, e.g. 24h; 0: never"},
		defaultUser: limitFlag{name: "default-user", env: "PODIUM_AGENT_DEFAULT_USER", def: "",
			usage: "run a task whose spec names no user as `USER`: a UID, UID:GID or a name its image knows, e.g. 65534 (nobody); empty: the image's own user"},
		maxCPU: limitFlag{name: "max-cpu", env: "PODIUM_AGENT_MAX_CPU", def: "0",
			usage: "the most CPU `CORES` one task may ask for, its sidecars' included; the scheduler places larger tasks elsewhere; 0: no maximum"},
		maxMemory: limitFlag{name: "max-memory", env: "PODIUM_AGENT_MAX_MEMORY", def: "0",
			usage: "the most memory (`SIZE` or a share, e.g. 50%) one task may ask for, its sidecars' included; 0: no maximum"},
		maxPids: limitFlag{name: "max-pids", env: "PODIUM_AGENT_MAX_PIDS", def: "0",
			usage: "the most processes and threads (`N`) one task may ask for, its sidecars' included; 0: no maximum"},
		maxTimeout: limitFlag{name: "max-timeout", env: "PODIUM_AGENT_MAX_TIMEOUT", def: "0",
			usage: "the longest timeout (`DURATION`) a task's spec may set; 0: no maximum"},
		workspace: limitFlag{name: "workspace-limit", env: "PODIUM_AGENT_WORKSPACE_LIMIT", def: defaultWorkspace,
			usage: "the most disk (`SIZE`) one task may fill: its workspace, artifacts, inbox and its container's own files; a task over it is stopped (\"workspace full\"); 0: no limit"},
	}
	for _, l := range f.all() {
		v := l.def
		if e, ok := os.LookupEnv(l.env); ok {
			v = e
		}
		l.value = fs.String(l.name, v, l.usage+" ("+l.env+")")
	}
	return f
}

// machine is what the limits' defaults are worked out from.
type machine struct {
	cores    int
	memoryMB int64
}

// measureMachine counts this machine's cores and memory (0: unmeasured).
func measureMachine() machine {
	c := capacity.Measure(context.Background(), "", nil)
	return machine{cores: int(c.GetCpuCores()), memoryMB: c.GetMemoryMb()}
}

// limits reads the flags into the executor's limits. Each error names its
// flag and what it accepts.
func (f *limitFlags) limits(m machine) (executor.Limits, error) {
	var l executor.Limits
	var errs []error
	bad := func(fl *limitFlag, err error) {
		if err != nil {
			errs = append(errs, fmt.Errorf("--%s %q: %v", fl.name, *fl.value, err))
		}
	}
	var err error
	l.DefaultCPU, err = parseCPU(*f.defaultCPU.value, m)
	bad(&f.defaultCPU, err)
	l.MaxCPU, err = parseCPU(*f.maxCPU.value, m)
	bad(&f.maxCPU, err)
	l.DefaultMemoryMB, err = parseMemory(*f.defaultMemory.value, m)
	bad(&f.defaultMemory, err)
	l.MaxMemoryMB, err = parseMemory(*f.maxMemory.value, m)
	bad(&f.maxMemory, err)
	l.DefaultPids, err = parseCount(*f.defaultPids.value)
	bad(&f.defaultPids, err)
	l.MaxPids, err = parseCount(*f.maxPids.value)
	bad(&f.maxPids, err)
	l.DefaultTimeout, err = parseTimeout(*f.defaultTimeout.value)
	bad(&f.defaultTimeout, err)
	l.MaxTimeout, err = parseTimeout(*f.maxTimeout.value)
	bad(&f.maxTimeout, err)
	l.WorkspaceBytes, err = parseSize(*f.workspace.value)
	bad(&f.workspace, err)
	if u := *f.defaultUser.value; u != "" {
		if p := taskspec.UserProblem(u); p != "" {
			bad(&f.defaultUser, errors.New(p))
		}
		l.DefaultUser = u
	}
	if len(errs) > 0 {
		return l, errors.Join(errs...)
	}
	// A default above the maximum an operator set lowers to it rather than
	// refusing to start: "--max-memory 2GiB" on a large machine should not
	// also need --default-memory. Given explicitly, it is an error
	// (executor.New says so).
	if l.MaxCPU > 0 && l.DefaultCPU > l.MaxCPU && *f.defaultCPU.value == defaultCPU {
		l.DefaultCPU = l.MaxCPU
	}
	if l.MaxMemoryMB > 0 && l.DefaultMemoryMB > l.MaxMemoryMB && *f.defaultMemory.value == defaultMemory {
		l.DefaultMemoryMB = l.MaxMemoryMB
	}
	if l.MaxPids > 0 && l.DefaultPids > l.MaxPids && *f.defaultPids.value == defaultPids {
		l.DefaultPids = l.MaxPids
	}
	above := func(def, most *limitFlag, over bool) {
		if over {
			errs = append(errs, fmt.Errorf("--%s %s is above --%s %s: a task that sets none would get more than one may ask for",
				def.name, *def.value, most.name, *most.value))
		}
	}
	above(&f.defaultCPU, &f.maxCPU, l.MaxCPU > 0 && l.DefaultCPU > l.MaxCPU)
	above(&f.defaultMemory, &f.maxMemory, l.MaxMemoryMB > 0 && l.DefaultMemoryMB > l.MaxMemoryMB)
	above(&f.defaultPids, &f.maxPids, l.MaxPids > 0 && l.DefaultPids > l.MaxPids)
	above(&f.defaultTimeout, &f.maxTimeout, l.MaxTimeout > 0 && l.DefaultTimeout > l.MaxTimeout)
	return l, errors.Join(errs...)
}

func parseCPU(v string, m machine) (float64, error) {
	if v == "auto" {
		if m.cores <= 0 {
			return 0, nil // unmeasured: no limit rather than a guess
		}
		return float64(max(m.cores-1, 1)), nil
	}
	c, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(c) || math.IsInf(c, 0) || c < 0 {
		return 0, errors.New("want a number of cores such as 2 or 0.5, auto, or 0 for none")
	}
	return c, nil
}

// parseMemory reads a size or a share of the machine's memory, in MiB.
func parseMemory(v string, m machine) (int64, error) {
	if pct, ok := strings.CutSuffix(v, "%"); ok {
		p, err := strconv.ParseFloat(pct, 64)
		if err != nil || math.IsNaN(p) || p < 0 || p > 100 {
			return 0, errors.New("want a share of this machine's memory from 0% to 100%")
		}
		if m.memoryMB <= 0 {
			return 0, nil // unmeasured: no limit rather than a guess
		}
		return max(int64(float64(m.memoryMB)*p/100), executor.MinMemoryMB), nil
	}
	b, err := parseSize(v)
	if err != nil {
		return 0, err
	}
	mb := b >> 20
	if b > 0 && mb < executor.MinMemoryMB {
		return 0, fmt.Errorf("want at least %d MiB, the least the Docker engine accepts", executor.MinMemoryMB)
	}
	return mb, nil
}

var sizeUnits = map[string]int64{
	"": 1, "b": 1,
	"k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10,
	"m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20,
	"g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30,
	"t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40,
}

// parseSize reads a byte size such as 10GiB, 512m or 1.5g. Every unit is
// binary, as Docker's own flags read them: 1g is 1 GiB.
func parseSize(v string) (int64, error) {
	s := strings.TrimSpace(v)
	i := strings.IndexFunc(s, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if i < 0 {
		i = len(s)
	}
	num, unit := s[:i], strings.ToLower(strings.TrimSpace(s[i:]))
	mult, ok := sizeUnits[unit]
	n, err := strconv.ParseFloat(num, 64)
	if !ok || err != nil || n < 0 || n*float64(mult) >= math.MaxInt64 {
		return 0, errors.New("want a size such as 512MiB, 4GiB or 10g, or 0 for none")
	}
	return int64(n * float64(mult)), nil
}

func parseCount(v string) (int64, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, errors.New("want a whole number, or 0 for none")
	}
	return n, nil
}

func parseTimeout(v string) (time.Duration, error) {
	if v == "0" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 || d%time.Second != 0 {
		return 0, errors.New("want a whole number of seconds as a duration such as 90s, 10m or 24h, or 0 for none")
	}
	return d, nil
}
