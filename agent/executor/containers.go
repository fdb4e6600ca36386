package executor

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"

	"github.com/podiumhq/podium/agent/artifacts"
	"github.com/podiumhq/podium/agent/egress"
	"github.com/podiumhq/podium/agent/inbox"
	"github.com/podiumhq/podium/agent/runner"
	"github.com/podiumhq/podium/internal/taskspec"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// labels are what every object of the attempt carries.
func (r *run) labels(extra ...string) map[string]string {
	l := map[string]string{
		LabelTask:    r.key.TaskID,
		LabelAttempt: strconv.Itoa(int(r.key.Attempt)),
		LabelNode:    r.e.nodeID,
	}
	for i := 0; i+1 < len(extra); i += 2 {
		l[extra[i]] = extra[i+1]
	}
	return l
}

// createNetwork creates the attempt's private bridge network. One that
// exists already can only be this attempt's own, left by an earlier agent
// process, and is used as it is.
//
// With an egress filter the network's Linux bridge gets the name the filter
// matches (Executor.BridgeName), and createNetwork returns it; a network
// found without it (made by an agent whose filter was off) is refused,
// since its containers would run unfiltered.
//
// Neither this nor createVolume gives up when the run is cancelled: the
// engine finishes a create whose caller went away, and a network created
// after teardown listed the attempt's objects would be left behind. Both
// take milliseconds; the cancel is seen right after.
//
// With a warm pool (Config.NetworkPool) the attempt takes a network from it
// instead, when one is ready, and records its name in the host directory
// before anything joins it (see netpool.go).
func (r *run) createNetwork() (bridge string, err error) {
	ctx, cancel := apiCtx(r.prepCtx, apiTimeout)
	defer cancel()
	if n, ok := r.e.pool.take(ctx); ok {
		if err := r.recordNetwork(n.name); err != nil {
			// Without the record a restarted agent could not tell the
			// network was this attempt's: it is not used.
			r.log.Warn("could not record the pool network the task took; creating a network of its own", "network", n.name, "err", err)
			if rerr := r.e.pool.remove(ctx, n); rerr != nil {
				r.log.Warn("could not remove the unused pool network; the next agent start removes it", "err", rerr)
			}
		} else {
			r.network = n.name
			r.log.Debug("took a network from the warm pool", "network", n.name)
			return n.bridge, nil
		}
	}
	opts := network.CreateOptions{Driver: "bridge", Labels: r.labels()}
	if r.e.egress != nil {
		bridge = r.e.BridgeName(r.key)
		opts.Options = map[string]string{egress.BridgeOption: bridge}
	}
	_, err = r.e.docker.NetworkCreate(ctx, NetworkName(r.key), opts)
	if err != nil && cerrdefs.IsConflict(err) {
		var info network.Inspect
		info, err = r.e.docker.NetworkInspect(ctx, NetworkName(r.key), network.InspectOptions{})
		if err == nil && bridge != "" && info.Options[egress.BridgeOption] != bridge {
			err = fmt.Errorf("network %s exists without the bridge name %s its egress rules match (an agent with "+
				"--egress-filter=false made it); remove it with `docker network rm %s`", NetworkName(r.key), bridge, NetworkName(r.key))
		}
	}
	return bridge, err
}

// openEgress installs the network's egress rules: the node's, and the
// ranges the spec's allow_egress opens (validate checked them).
func (r *run) openEgress(bridge string) error {
	allow, err := taskspec.AllowEgress("spec.allow_egress", r.spec.GetAllowEgress())
	if err != nil {
		return err
	}
	ctx, cancel := apiCtx(r.prepCtx, apiTimeout)
	defer cancel()
	return r.e.egress.Open(ctx, bridge, allow)
}

// reopenEgress installs again the egress rules of a running task an earlier
// agent process started. They normally outlive the agent, and installing
// them again changes nothing; this puts back rules something else removed
// meanwhile (a firewall reload), and applies the node's --allow-egress as it
// is now.
func (r *run) reopenEgress(ctx context.Context) {
	if r.e.egress == nil {
		return
	}
	ictx, cancel := apiCtx(ctx, apiTimeout)
	info, err := r.e.docker.NetworkInspect(ictx, r.networkName(), network.InspectOptions{})
	cancel()
	if err != nil {
		r.log.Warn("could not look at the task's network to check its egress rules", "err", err)
		return
	}
	br := info.Options[egress.BridgeOption]
	if !egress.IsBridge(br) {
		r.log.Warn("the task's network was made without egress rules (by an agent with --egress-filter=false or "+
			"of an older version); the task runs unfiltered until it ends", "network", r.networkName())
		return
	}
	if err := r.openEgress(br); err != nil {
		r.log.Error("could not install the egress rules of the task's network again", "err", err)
	}
}

// createVolume creates the workspace volume; creating a named volume that
// exists returns it. Its files live in the attempt's host directory
// (volumeDir, made by prepareDir), bound by the local driver, rather than
// under the engine's own directory: there they are on the disk the agent
// measures and watches for a low watermark, the agent can measure what the
// task fills (Limits.WorkspaceBytes) without reaching into the engine's
// files, and they need nothing the agent does not already need (its data
// directory on the engine's machine).
func (r *run) createVolume() error {
	ctx, cancel := apiCtx(r.prepCtx, apiTimeout)
	defer cancel()
	_, err := r.e.docker.VolumeCreate(ctx, volume.CreateOptions{Name: VolumeName(r.key), Labels: r.labels(),
		Driver:     "local",
		DriverOpts: map[string]string{"type": "none", "o": "bind", "device": filepath.Join(r.dir, volumeDir)}})
	return err
}

// containerSpec is everything ContainerCreate takes.
type containerSpec struct {
	name string
	cfg  *container.Config
	host *container.HostConfig
	net  *network.NetworkingConfig
}

// runnerEntrypoint makes the runner PID 1, writing to the runner log mounted
// at runner.LogPath no more than the attempt's output limit, and no further
// ahead of the agent's reading than its backlog (the progress file at
// runner.ProgressPath), and, for the task, appends the runner's directory to
// its PATH so `podium-runner ask` needs no path and stops it once its output
// has found no room on the node's disk for the executor's DiskFullAfter. The
// command follows "--".
func (r *run) runnerEntrypoint(pathAppend bool) []string {
	ep := []string{runner.Path, "run", "--log", runner.LogPath,
		"--output-limit", strconv.FormatInt(r.outputLimit, 10),
		"--progress", runner.ProgressPath, "--backlog", strconv.FormatInt(r.e.backlog, 10)}
	if pathAppend {
		// The task's own runner only: it is the task that must not hang
		// on a full disk or run on past its fence, and what it reports
		// says why it ended. A sidecar ends with its task.
		ep = append(ep, "--path-append", runner.Dir, "--disk-full-after", r.e.diskFullAfter.String(),
			"--lease", runner.LeasePath)
	}
	return append(ep, "--")
}

func envList(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// EnvTaskID and EnvAttempt name the variables that tell a task which task
// and which attempt of it it is (1 for the first run, 2 for the first retry
// or requeue): a job retried under spec.retry can tell a retry from a first
// run (skip a step that already succeeded, name its output per attempt).
// They are set by the node, replacing a spec's own values for them.
const (
	EnvTaskID  = "PODIUM_TASK_ID"
	EnvAttempt = "PODIUM_ATTEMPT"
)

// taskEnv is the task's environment: its spec's, the values of the
// secrets it takes as variables, and which task and attempt it is. The
// secrets are part of the container's configuration, so anyone who may run
// `docker inspect` on the node sees them (docs/operations.md says so); a
// file secret is not.
func (r *run) taskEnv() []string {
	env := make(map[string]string, len(r.spec.GetEnv())+len(r.assign.GetSecrets())+2)
	for k, v := range r.spec.GetEnv() {
		env[k] = v
	}
	for _, s := range r.assign.GetSecrets() {
		if s.GetEnv() != "" {
			env[s.GetEnv()] = string(s.GetValue())
		}
	}
	env[EnvTaskID], env[EnvAttempt] = r.assign.GetTaskId(), strconv.Itoa(int(r.assign.GetAttempt()))
	return envList(env)
}

// fileSecrets are the secrets the task takes as files in /run/secrets.
func (r *run) fileSecrets() []runner.SecretFile {
	var files []runner.SecretFile
	for _, s := range r.assign.GetSecrets() {
		if s.GetFile() != "" {
			files = append(files, runner.SecretFile{File: s.GetFile(), Value: s.GetValue()})
		}
	}
	return files
}

// hardened is the host configuration every container of a task shares:
// nothing privileged (but a sidecar the node lets be, sidecarContainer), no
// way to gain privileges, no log kept by the engine
// (the runner log is the log), the runner mounted read-only, and the limits:
// res's, and the node's default for each res leaves unset.
func (r *run) hardened(res *podiumv1.Resources, capAdd []string, logPath string, mounts ...mount.Mount) *container.HostConfig {
	h := &container.HostConfig{
		NetworkMode: container.NetworkMode(r.networkName()),
		Privileged:  false,
		CapDrop:     []string{"ALL"},
		CapAdd:      capAdd,
		SecurityOpt: []string{"no-new-privileges"},
		LogConfig:   container.LogConfig{Type: "none"},
		Mounts: append([]mount.Mount{
			{Type: mount.TypeBind, Source: r.e.runnerPath, Target: runner.Path, ReadOnly: true},
			{Type: mount.TypeBind, Source: logPath, Target: runner.LogPath},
		}, mounts...),
	}
	cpu, mb, pids := r.e.limits.resources(res)
	if cpu > 0 {
		h.NanoCPUs = int64(cpu * 1e9)
	}
	if mb > 0 {
		// Swap equal to memory means no swap at all, so a task over its limit
		// is OOM-killed (and reported as such) instead of thrashing the node.
		h.Memory = mb << 20
		h.MemorySwap = mb << 20
	}
	if pids > 0 {
		h.PidsLimit = &pids
	}
	return h
}

// taskContainer is the task's own container: reachable as "task" on its
// network, its workspace at /workspace, its inbox and artifacts directory
// mounted, and only the
// capabilities its spec adds back.
func (r *run) taskContainer(argv []string) containerSpec {
	spec := r.spec
	var caps []string
	for _, c := range spec.GetCapabilities() {
		n, _ := taskspec.NormalizeCapability(c) // validate refused the rest
		caps = append(caps, n)
	}
	host := r.hardened(spec.GetResources(), caps, filepath.Join(r.dir, logFile),
		// Read-only: the agent's word on how far it has read, which the
		// task must not be able to forge.
		mount.Mount{Type: mount.TypeBind, Source: filepath.Join(r.dir, progressFile), Target: runner.ProgressPath, ReadOnly: true},
		// Read-only too: the task must not move its own fence.
		mount.Mount{Type: mount.TypeBind, Source: filepath.Join(r.dir, leaseFile), Target: runner.LeasePath, ReadOnly: true},
		mount.Mount{Type: mount.TypeBind, Source: filepath.Join(r.dir, inboxDir), Target: inbox.ContainerDir},
		mount.Mount{Type: mount.TypeVolume, Source: VolumeName(r.key), Target: WorkspaceDir},
		// Over the workspace volume, so the agent reads what the task leaves
		// there on the host, container or no container.
		mount.Mount{Type: mount.TypeBind, Source: filepath.Join(r.dir, artifactsDir), Target: artifacts.ContainerDir},
	)
	ep := r.runnerEntrypoint(true)
	stdin := false
	if len(r.fileSecrets()) > 0 {
		// The runner reads them from stdin, which the agent writes once
		// and closes as the container starts (deliverFileSecrets), into a
		// tmpfs: they are in neither the container's configuration nor on
		// the node's disk. The directory is sticky and open to all, as
		// /tmp is, so the runner, as whichever user the task runs as, can
		// write them; each file is the task user's, mode 0400.
		ep = append(ep[:len(ep)-1], "--secrets-stdin", runner.SecretsDir, "--")
		host.Tmpfs = map[string]string{runner.SecretsDir: "mode=1777,nosuid,nodev,noexec,size=16m"}
		stdin = true
	}
	applyOptions(host, spec)
	return containerSpec{
		name: ContainerName(r.key),
		cfg: &container.Config{
			OpenStdin:   stdin,
			StdinOnce:   stdin,
			AttachStdin: stdin,
			Image:       spec.GetImage(),
			Entrypoint:  ep,
			Cmd:         argv,
			Env:         r.taskEnv(),
			WorkingDir:  spec.GetWorkingDir(),
			User:        r.e.limits.user(spec),
			Labels:      r.labels(LabelRole, roleTask),
		},
		host: host,
		net: &network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{
			r.networkName(): {Aliases: []string{taskspec.TaskHostName}},
		}},
	}
}

// applyOptions puts the spec's container options (taskspec's container.go)
// on the task container's host configuration. With read_only the root
// filesystem is read-only and /tmp a tmpfs, unless the spec mounts one there
// itself; every mount the agent makes stays writable as it was. Each tmpfs
// is nosuid and nodev, noexec unless the spec says exec, and always sized: a
// tmpfs without a size is bounded only by half the node's memory.
func applyOptions(host *container.HostConfig, spec *podiumv1.TaskSpec) {
	host.ReadonlyRootfs = spec.GetReadOnly()
	host.ShmSize = spec.GetShmSizeBytes()
	for _, u := range spec.GetUlimits() {
		host.Ulimits = append(host.Ulimits, &container.Ulimit{Name: u.GetName(), Soft: u.GetSoft(), Hard: u.GetHard()})
	}
	tmpfs := func(path string, size int64, exec bool) {
		if host.Tmpfs == nil {
			host.Tmpfs = map[string]string{}
		}
		if size <= 0 {
			size = taskspec.DefaultTmpfsBytes
		}
		opts := "mode=1777,nosuid,nodev,noexec"
		if exec {
			opts = "mode=1777,nosuid,nodev,exec"
		}
		host.Tmpfs[path] = opts + ",size=" + strconv.FormatInt(size, 10)
	}
	if spec.GetReadOnly() {
		// Programs assume a writable /tmp; the spec's own /tmp, if it
		// has one, replaces this below. exec, as /tmp on a host is:
		// tools unpack helpers there and run them.
		tmpfs("/tmp", taskspec.DefaultTmpfsBytes, true)
	}
	for _, m := range spec.GetTmpfs() {
		tmpfs(m.GetPath(), m.GetSizeBytes(), m.GetExec())
	}
}

// sidecarContainer is one sidecar: reachable by its name on the task's
// network. A sidecar gets the capabilities of an ordinary `docker run`
// (taskspec.AllowedCapabilities): the stock images people run as sidecars
// (databases, brokers) change user and chown their data directories as they
// start, and the task's own capability list is the task's, not theirs.
//
// A sidecar with share_workspace sees the task's workspace at /workspace,
// its artifacts directory included, exactly as the task does. One with
// privileged (which validate lets through only on a node started with
// --allow-privileged-sidecars) runs privileged: every capability and
// device, no seccomp or AppArmor profile, and without no-new-privileges,
// which its own children inherit and which would break setuid programs in
// the containers a Docker-in-Docker sidecar runs. The limits stay.
func (r *run) sidecarContainer(sc *podiumv1.Sidecar, argv []string) containerSpec {
	name := sc.GetName()
	var mounts []mount.Mount
	mounts = append(mounts, mount.Mount{Type: mount.TypeBind, Source: r.sidecarProgress(name), Target: runner.ProgressPath, ReadOnly: true})
	if sc.GetShareWorkspace() {
		mounts = append(mounts,
			mount.Mount{Type: mount.TypeVolume, Source: VolumeName(r.key), Target: WorkspaceDir},
			mount.Mount{Type: mount.TypeBind, Source: filepath.Join(r.dir, artifactsDir), Target: artifacts.ContainerDir})
	}
	host := r.hardened(sc.GetResources(), append([]string(nil), taskspec.AllowedCapabilities...), r.sidecarLog(name), mounts...)
	if sc.GetPrivileged() && r.e.allowPrivileged {
		host.Privileged = true
		host.CapDrop, host.CapAdd, host.SecurityOpt = nil, nil, nil
		// An engine with userns-remap refuses a privileged container
		// in the remapped namespace; a privileged one is root on the
		// host whichever namespace it is in.
		host.UsernsMode = "host"
	}
	return containerSpec{
		name: SidecarName(r.key, name),
		cfg: &container.Config{
			Image:      sc.GetImage(),
			Hostname:   name,
			Entrypoint: r.runnerEntrypoint(false),
			Cmd:        argv,
			Env:        envList(sc.GetEnv()),
			Labels:     r.labels(LabelRole, roleSidecar, LabelSidecar, name),
		},
		host: host,
		net: &network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{
			r.networkName(): {Aliases: []string{name}},
		}},
	}
}

// createContainer creates a container. One of the same name can only be a
// leftover of this very attempt (an earlier agent process stopped before it
// started), so it is removed and the create retried once.
func (r *run) createContainer(ctx context.Context, cs containerSpec) (string, error) {
	r.withGPUs(&cs)
	for try := 0; ; try++ {
		cctx, cancel := context.WithTimeout(r.prepCtx, apiTimeout)
		resp, err := r.e.docker.ContainerCreate(cctx, cs.cfg, cs.host, cs.net, nil, cs.name)
		cancel()
		if err == nil {
			for _, w := range resp.Warnings {
				r.log.Warn("engine warning while creating a container", "container", cs.name, "warning", w)
			}
			r.log.Debug("container created", "container", shortID(resp.ID), "name", cs.name)
			return resp.ID, nil
		}
		if cerrdefs.IsConflict(err) && try == 0 && ctx.Err() == nil {
			r.log.Warn("removing a stale container of the same attempt", "name", cs.name)
			rctx, cancel := apiCtx(ctx, apiTimeout)
			rerr := r.e.docker.ContainerRemove(rctx, cs.name, container.RemoveOptions{Force: true, RemoveVolumes: true})
			cancel()
			if rerr == nil || isNotFound(rerr) {
				continue
			}
		}
		return "", err
	}
}
