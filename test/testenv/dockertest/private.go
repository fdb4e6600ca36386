package dockertest

// A private Docker engine: a dockerd of the test's own, with its own data
// root, exec root (and so its own containerd), pid file and socket, that the
// test may stop, kill and start again without touching the machine's engine
// or the other tests using it.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
)

// dockerdPath finds the engine's binary: on $PATH (Docker's own packages put
// it in /usr/bin), else where Debian's docker.io installs it.
func dockerdPath() (string, error) {
	if p, err := exec.LookPath("dockerd"); err == nil {
		return p, nil
	}
	const debian = "/usr/sbin/dockerd"
	if _, err := os.Stat(debian); err != nil {
		return "", fmt.Errorf("no dockerd on $PATH nor at %s: install the engine (apt-get install docker.io, or scripts/ensure-docker.sh): %w", debian, err)
	}
	return debian, nil
}

// PrivateEngine is a dockerd the test started itself. Its networks are made
// without iptables rules, so it changes nothing the machine's engine relies
// on; containers on its user-defined bridge networks reach each other, which
// is all a task needs.
//
// Its default bridge is a Linux bridge the test makes for it (the engine
// needs one to build the test image). Two settings are never used, because
// an engine given them deletes docker0, the machine engine's bridge, by
// name: "bridge": "none" (as it starts), and default-address-pools without
// live-restore (as it starts again). Its networks take the engine's built-in
// pools, skipping subnets the machine already routes, as the machine's
// engine does.
type PrivateEngine struct {
	t      testing.TB
	dir    string
	bridge string // its default bridge's interface
	host   string // DOCKER_HOST value: unix://<dir>/docker.sock
	cfg    string // the daemon.json this engine reads

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
	logf *os.File
	c    *client.Client
}

// StartPrivateEngine starts a dockerd of the test's own, waits until it
// answers, and gives it the test image (Image), built there. Cleanup stops it
// and removes everything it had. The storage driver is the machine engine's,
// which is known to work on this machine's file systems.
func StartPrivateEngine(t testing.TB) *PrivateEngine {
	t.Helper()
	return StartPrivateEngineWith(t, PrivateConfig{})
}

// PrivateConfig is what may differ between private engines.
type PrivateConfig struct {
	// LiveRestore keeps containers running while the engine stops and
	// starts again ("live-restore": true in daemon.json).
	LiveRestore bool
	// InsecureRegistries are registries ("127.0.0.1:5000") the engine
	// pulls from over plain HTTP ("insecure-registries" in daemon.json),
	// as a test's own registry (package registrytest) serves; the engine
	// adds 127.0.0.0/8 to them by itself.
	InsecureRegistries []string
}

// StartPrivateEngineWith is StartPrivateEngine with cfg.
func StartPrivateEngineWith(t testing.TB, pc PrivateConfig) *PrivateEngine {
	t.Helper()
	if _, err := dockerdPath(); err != nil {
		t.Fatalf("dockertest: %v", err)
	}
	sys := Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	info, err := sys.Info(ctx)
	cancel()
	if err != nil {
		t.Fatalf("dockertest: ask the machine's engine for its storage driver: %v", err)
	}
	// A short path: the engine's and its containerd's unix sockets live
	// under it, and a socket path may not be longer than 107 bytes.
	dir, err := os.MkdirTemp("", "podium-dockerd-")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"data", "exec"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	bridge, err := makeBridge(filepath.Base(dir))
	if err != nil {
		_ = os.RemoveAll(dir)
		t.Fatalf("dockertest: a default bridge for the private engine: %v", err)
	}
	cfg := map[string]any{
		"storage-driver": info.Driver,
		"bridge":         bridge,
		"iptables":       false,
		"ip-forward":     false,
		"ip-masq":        false,
		"log-driver":     "json-file",
		"live-restore":   pc.LiveRestore,
	}
	if len(pc.InsecureRegistries) > 0 {
		cfg["insecure-registries"] = pc.InsecureRegistries
	}
	b, _ := json.Marshal(cfg)
	e := &PrivateEngine{t: t, dir: dir, bridge: bridge, host: "unix://" + filepath.Join(dir, "docker.sock"), cfg: filepath.Join(dir, "daemon.json")}
	if err := os.WriteFile(e.cfg, b, 0o600); err != nil {
		t.Fatal(err)
	}
	e.logf, err = os.Create(filepath.Join(dir, "dockerd.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.cleanup)
	e.Start()
	c, err := client.NewClientWithOpts(client.WithHost(e.host), client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatalf("dockertest: a client for the private engine: %v", err)
	}
	e.c = c
	bctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := build(bctx, e.host, Image); err != nil {
		t.Fatalf("dockertest: build the test image in the private engine: %v\nengine log:\n%s", err, e.Log())
	}
	return e
}

// Host is the engine's address as DOCKER_HOST takes it.
func (e *PrivateEngine) Host() string { return e.host }

// Client is a client of the engine. It reconnects by itself after Restart.
func (e *PrivateEngine) Client() *client.Client { return e.c }

// Log is what the engine has logged so far, for a failing test to show.
func (e *PrivateEngine) Log() string {
	b, _ := os.ReadFile(filepath.Join(e.dir, "dockerd.log"))
	return string(b)
}

// Start starts the engine (again) and waits until it answers.
//
// Debian 12's dockerd (20.10) cannot start again after it was SIGKILLed
// while it was creating a network: it stored the network without its
// address pool and panics restoring it ("index out of range" in libnetwork's
// reservePools, moby/moby#45057, fixed in later engines). What an operator
// does then is remove the engine's network store and start it again, which
// loses every network it had (containers keep running, detached from them).
// Start does the same, once, and says so in the test's log: the fault being
// injected is the engine's restart, and an engine that lost its networks is
// one more thing the agent must survive, not a reason to stop the test.
func (e *PrivateEngine) Start() {
	e.t.Helper()
	from := e.logSize()
	err := e.start()
	if err != nil && strings.Contains(e.Log()[from:], "reservePools") {
		store := filepath.Join(e.dir, "data", "network", "files", "local-kv.db")
		e.t.Logf("dockertest: the private engine panicked restoring its networks after a SIGKILL (moby/moby#45057, "+
			"dockerd 20.10); removing its network store %s, as an operator would, and starting it again", store)
		if rerr := os.Remove(store); rerr != nil {
			e.t.Fatalf("dockertest: %v; and removing the network store failed: %v", err, rerr)
		}
		err = e.start()
	}
	if err != nil {
		e.t.Fatalf("dockertest: %v", err)
	}
}

// logSize is how much the engine has logged so far.
func (e *PrivateEngine) logSize() int {
	st, err := os.Stat(filepath.Join(e.dir, "dockerd.log"))
	if err != nil {
		return 0
	}
	return int(st.Size())
}

func (e *PrivateEngine) start() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cmd != nil {
		return errors.New("the private engine is running already")
	}
	dockerd, err := dockerdPath()
	if err != nil {
		return err
	}
	cmd := exec.Command(dockerd, "--config-file", e.cfg,
		"--data-root", filepath.Join(e.dir, "data"), "--exec-root", filepath.Join(e.dir, "exec"),
		"--pidfile", filepath.Join(e.dir, "docker.pid"), "-H", e.host)
	cmd.Stdout, cmd.Stderr = e.logf, e.logf
	// Its own process group, so that a terminal's ^C reaches the test, not
	// the engine, and the test decides how the engine goes.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", dockerd, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	e.cmd, e.done = cmd, done
	c, err := client.NewClientWithOpts(client.WithHost(e.host), client.WithAPIVersionNegotiation())
	if err != nil {
		return err
	}
	defer c.Close()
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := c.Ping(ctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-done:
			e.cmd = nil
			return fmt.Errorf("the private engine exited as it started: %v\nengine log:\n%s", err, e.Log())
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("gave up after a minute waiting for the private engine to answer: %v\nengine log:\n%s", err, e.Log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop sends the engine sig and waits until it has exited. SIGTERM is what
// `systemctl stop docker` sends: the engine stops its containers (their stop
// signal, then SIGKILL after their stop timeout) and exits. SIGKILL leaves
// the containers to their shims, and the next Start stops them.
func (e *PrivateEngine) Stop(sig syscall.Signal) {
	e.t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cmd == nil {
		return
	}
	if err := e.cmd.Process.Signal(sig); err != nil {
		e.t.Fatalf("dockertest: signal the private engine: %v", err)
	}
	select {
	case <-e.done:
	case <-time.After(2 * time.Minute):
		_ = e.cmd.Process.Kill()
		<-e.done
		e.t.Errorf("dockertest: the private engine did not exit within 2 minutes of %v; killed it", sig)
	}
	e.cmd = nil
	e.awaitContainerd()
}

// awaitContainerd waits until the containerd the engine started has gone
// too. An engine killed with SIGKILL takes it down after it (it dies with
// its parent), and an engine started while it is still dying would adopt it
// from its pid file and give up waiting for it to answer. A dead containerd
// nobody has reaped yet counts as gone, and its pid file is removed so that
// the next engine starts one of its own, as it would after the machine's
// init reaped it.
func (e *PrivateEngine) awaitContainerd() {
	e.t.Helper()
	pidFile := filepath.Join(e.dir, "exec", "containerd", "containerd.pid")
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return
	}
	pid := strings.TrimSpace(string(b))
	deadline := time.Now().Add(time.Minute)
	for {
		stat, err := os.ReadFile("/proc/" + pid + "/stat")
		if err != nil {
			return
		}
		// The state follows the command's closing parenthesis.
		if i := strings.LastIndexByte(string(stat), ')'); i > 0 && strings.HasPrefix(string(stat[i+1:]), " Z") {
			_ = os.Remove(pidFile)
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("dockertest: the private engine's containerd (pid %s) still runs a minute after the engine exited", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Restart stops the engine with sig and starts it again, as `systemctl
// restart docker` does with SIGTERM.
func (e *PrivateEngine) Restart(sig syscall.Signal) {
	e.t.Helper()
	e.Stop(sig)
	e.Start()
}

// cleanup removes every container the engine has, stops it, and removes its
// directories. The engine bind-mounts its data root onto itself (and its
// storage driver mounts below it), which outlive it: they are unmounted
// before the directory goes.
//
// An engine the test left stopped is started once more first: containers it
// left to their shims (killed with SIGKILL) are stopped only by an engine
// that starts again. Whatever of it still runs after that (shims, its
// containerd, fuse-overlayfs) is killed by pid.
func (e *PrivateEngine) cleanup() {
	running := e.cmd != nil
	if !running && e.c != nil {
		if err := e.start(); err != nil {
			e.t.Logf("dockertest: could not start the private engine again to remove its containers: %v", err)
		} else {
			running = true
		}
	}
	if running && e.c != nil {
		// Networks too: their bridges are interfaces of the machine,
		// which outlive the engine.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cs, _ := e.c.ContainerList(ctx, container.ListOptions{All: true})
		for _, c := range cs {
			_ = e.c.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
		}
		nets, _ := e.c.NetworkList(ctx, network.ListOptions{})
		for _, n := range nets {
			if n.Driver == "bridge" && n.Name != "bridge" {
				_ = e.c.NetworkRemove(ctx, n.ID)
			}
		}
		cancel()
	}
	if e.c != nil {
		_ = e.c.Close()
	}
	e.Stop(syscall.SIGTERM)
	_ = e.logf.Close()
	killMentioning(e.dir + "/")
	if out, err := exec.Command("ip", "link", "del", e.bridge).CombinedOutput(); err != nil {
		e.t.Errorf("dockertest: remove the private engine's bridge %s: %v: %s", e.bridge, err, out)
	}
	if err := unmountBelow(e.dir); err != nil {
		e.t.Errorf("dockertest: %v", err)
	}
	if err := os.RemoveAll(e.dir); err != nil {
		e.t.Errorf("dockertest: remove the private engine's directory: %v", err)
	}
}

// killMentioning SIGKILLs every process whose command line mentions s.
func killMentioning(s string) {
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if err == nil && strings.Contains(string(b), s) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// makeBridge makes an up Linux bridge with a /24 of 10.214.0.0/16 no route
// of the machine covers yet, for a private engine's default bridge. Its name
// is made of the unique suffix of the engine's directory.
func makeBridge(unique string) (string, error) {
	name := "pdk" + unique[len(unique)-min(len(unique), 9):]
	routes, err := exec.Command("ip", "-4", "route", "show").Output()
	if err != nil {
		return "", fmt.Errorf("ip route: %w", err)
	}
	if out, err := exec.Command("ip", "link", "add", name, "type", "bridge").CombinedOutput(); err != nil {
		return "", fmt.Errorf("ip link add %s type bridge: %v: %s", name, err, out)
	}
	for n := 1; n < 255; n++ {
		subnet := fmt.Sprintf("10.214.%d.", n)
		if strings.Contains(string(routes), subnet) {
			continue
		}
		out, err := exec.Command("ip", "addr", "add", subnet+"1/24", "dev", name).CombinedOutput()
		if err != nil {
			_ = exec.Command("ip", "link", "del", name).Run()
			return "", fmt.Errorf("ip addr add %s1/24 dev %s: %v: %s", subnet, name, err, out)
		}
		if out, err := exec.Command("ip", "link", "set", name, "up").CombinedOutput(); err != nil {
			_ = exec.Command("ip", "link", "del", name).Run()
			return "", fmt.Errorf("ip link set %s up: %v: %s", name, err, out)
		}
		return name, nil
	}
	_ = exec.Command("ip", "link", "del", name).Run()
	return "", errors.New("every /24 of 10.214.0.0/16 is routed already")
}

// unmountBelow lazily unmounts every mount at or below dir, deepest first.
func unmountBelow(dir string) error {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	var mounts []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			mounts = append(mounts, f[4])
		}
	}
	var errs []error
	for i := len(mounts) - 1; i >= 0; i-- {
		if err := syscall.Unmount(mounts[i], syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", mounts[i], err))
		}
	}
	return errors.Join(errs...)
}
