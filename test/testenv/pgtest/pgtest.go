// Package pgtest gives tests a real Postgres: one throwaway cluster per test
// binary, started from the machine's own Postgres 15 binaries, and a fresh
// database for each test, copied from a template that already has Podium's
// schema. It is for tests only; production code never imports it.
//
// A package that uses it runs its tests through Main:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/podiumhq/podium/schema"
)

// BinDir is where the Postgres binaries are looked for; PODIUM_PG_BIN overrides it.
const BinDir = "/usr/lib/postgresql/15/bin"

const template = "podium_template"

var (
	socketDir string
	dbCounter atomic.Int64
)

// shared is the test binary's cluster that Main starts.
var shared *Cluster

// Main starts the cluster, runs the tests and stops the cluster, whatever the
// tests did. A machine without Postgres fails loudly with how to get it.
func Main(m *testing.M) { os.Exit(Run(m)) }

// Run is Main without the exit, for a TestMain that has more to clean up.
func Run(m *testing.M) int {
	c, err := StartCluster()
	if err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
		return 2
	}
	defer c.Stop()
	shared, socketDir = c, c.SocketDir
	return m.Run()
}

func binDir() string {
	if d := os.Getenv("PODIUM_PG_BIN"); d != "" {
		return d
	}
	return BinDir
}

// asPostgres runs a Postgres binary, dropping root for the "postgres" (or
// "nobody") account: initdb and postgres both refuse to run as root.
func asPostgres(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(binDir(), name), args...)
	if os.Geteuid() == 0 {
		uid, gid := lookupUnprivileged()
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid}}
	}
	return cmd
}

func lookupUnprivileged() (uint32, uint32) {
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		return uint32(uid), uint32(gid)
	}
	return 65534, 65534
}

// Cluster is a throwaway Postgres cluster listening on a unix socket in a
// temporary directory, with a database "podium_template" that has Podium's
// schema. Benchmarks start one with StartCluster; tests use Main for the
// shared one, and NewCluster for one of their own that they may restart,
// stop or kill.
type Cluster struct {
	// SocketDir holds the unix socket, and the data directory ("data").
	SocketDir string
	// Port is the TCP port on 127.0.0.1 of a cluster from NewCluster, and
	// the socket's number; 0 for StartCluster's, on the default 5432
	// socket and no TCP.
	Port int
	args []string
	// settings are the extra "name=value" settings it was started with,
	// which a standby of it starts with too (a hot standby needs at least
	// its primary's max_connections).
	settings []string
	logf     *os.File

	mu   sync.Mutex
	srv  *exec.Cmd
	done chan struct{} // closed when srv has exited
}

// URL is the connection string for a database of the cluster, over its
// unix socket.
func (c *Cluster) URL(db string) string {
	if c.Port != 0 {
		return fmt.Sprintf("postgres://postgres@/%s?host=%s&port=%d&sslmode=disable", db, c.SocketDir, c.Port)
	}
	return fmt.Sprintf("postgres://postgres@/%s?host=%s&sslmode=disable", db, c.SocketDir)
}

// TCPURL is the connection string for a database of a cluster from
// NewCluster over TCP, for what needs a host and port.
func (c *Cluster) TCPURL(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.Port, db)
}

// Stop shuts the cluster down (fast) and removes its files. It may be
// called more than once.
func (c *Cluster) Stop() {
	_ = c.Down("fast")
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.logf != nil {
		_ = c.logf.Close()
		c.logf = nil
		_ = os.RemoveAll(c.SocketDir)
	}
}

// Log is what the server has logged so far.
func (c *Cluster) Log() string {
	b, _ := os.ReadFile(filepath.Join(c.SocketDir, "postgres.log"))
	return string(b)
}

// Down shuts the server down as `pg_ctl stop -m MODE` would, keeping its
// files: "smart" waits for clients to leave, "fast" disconnects them and
// checkpoints, "immediate" quits at once (crash recovery at the next start).
// It returns once the server has exited; a server already down is not an
// error.
func (c *Cluster) Down(mode string) error {
	sig := map[string]syscall.Signal{"smart": syscall.SIGTERM, "fast": syscall.SIGINT, "immediate": syscall.SIGQUIT}[mode]
	if sig == 0 {
		return fmt.Errorf("pgtest: shutdown mode %q: want smart, fast or immediate", mode)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.srv == nil {
		return nil
	}
	_ = c.srv.Process.Signal(sig)
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		_ = c.srv.Process.Kill()
		<-c.done
	}
	c.srv = nil
	return nil
}

// Up starts the server again on its files after Down and returns once it
// accepts connections.
func (c *Cluster) Up() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.srv != nil {
		return errors.New("pgtest: the cluster is already up")
	}
	srv := asPostgres("postgres", c.args...)
	srv.Stdout, srv.Stderr = c.logf, c.logf
	// Its own process group, so a ^C to the test run does not kill it before
	// Stop has a chance to shut it down cleanly.
	if srv.SysProcAttr == nil {
		srv.SysProcAttr = &syscall.SysProcAttr{}
	}
	srv.SysProcAttr.Setpgid = true
	if err := srv.Start(); err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = srv.Wait(); close(done) }()
	c.srv, c.done = srv, done
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		conn, err := pgx.Connect(ctx, c.URL("postgres"))
		if err == nil {
			return conn.Close(ctx)
		}
		select {
		case <-done:
			return fmt.Errorf("postgres exited at start: %v\n%s", err, c.Log())
		case <-ctx.Done():
			return fmt.Errorf("postgres did not come up: %v\n%s", err, c.Log())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Restart is Down(mode) then Up: `pg_ctl restart -m MODE`.
func (c *Cluster) Restart(mode string) error {
	if err := c.Down(mode); err != nil {
		return err
	}
	return c.Up()
}

// StartCluster starts a cluster; settings are extra "name=value" server settings.
func StartCluster(settings ...string) (*Cluster, error) {
	return start(0, settings...)
}

// NewCluster starts a cluster of the test's own, on its own socket
// directory and a free TCP port on 127.0.0.1, for a test that restarts,
// stops or kills Postgres; it is stopped and removed when the test ends.
// Its databases come from NewDatabaseIn.
func NewCluster(t testing.TB, settings ...string) *Cluster {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	// Smaller than the shared cluster: a test may run several at once. And
	// durable commits, as in production: with synchronous_commit off an
	// immediate shutdown (SIGQUIT) loses the commits of the last moments
	// that clients were told had succeeded, which no real deployment does
	// and no fault test should measure. (fsync and full_page_writes stay
	// off: they guard against the OS crashing, which these tests do not do.)
	c, err := start(port, append([]string{"shared_buffers=16MB", "max_connections=100", "synchronous_commit=on"}, settings...)...)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("postgres log of %s:\n%s", c.SocketDir, c.Log())
		}
		c.Stop()
	})
	return c
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func start(port int, settings ...string) (c *Cluster, err error) {
	if _, err := os.Stat(filepath.Join(binDir(), "initdb")); err != nil {
		return nil, fmt.Errorf("no Postgres binaries in %s: install them with `apt-get install postgresql-15` (or set PODIUM_PG_BIN)", binDir())
	}
	dir, err := newClusterDir()
	if err != nil {
		return nil, err
	}
	cleanup := func() { _ = os.RemoveAll(dir) }
	data := filepath.Join(dir, "data")
	if out, err := asPostgres("initdb", "-D", data, "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8").CombinedOutput(); err != nil {
		cleanup()
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	c, err = serve(dir, port, settings...)
	if err != nil {
		return nil, err
	}
	// Making the template database and migrating it is some hundred
	// statements; on a 2-core machine running the soak and the fault rows
	// beside it, that took over 30 s, and a test failed for its rig, not for
	// anything it checks. Two minutes is the bound on a stuck server.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	defer func() {
		if err != nil && ctx.Err() != nil {
			err = fmt.Errorf("the new cluster's template database was not ready within 2 minutes (a machine this busy slows every test): %w", err)
		}
	}()
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		c.Stop()
		return nil, err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "create database "+template); err != nil {
		c.Stop()
		return nil, err
	}
	tconn, err := pgx.Connect(ctx, c.URL(template))
	if err != nil {
		c.Stop()
		return nil, err
	}
	if _, err := schema.Migrate(ctx, tconn); err != nil {
		tconn.Close(ctx)
		c.Stop()
		return nil, err
	}
	tconn.Close(ctx)
	return c, nil
}

// newClusterDir makes a cluster's directory (its socket, log and "data"),
// owned by the account Postgres runs as.
func newClusterDir() (string, error) {
	dir, err := os.MkdirTemp("", "podium-pgtest-")
	if err != nil {
		return "", err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		_ = os.RemoveAll(dir)
		return "", err
	}
	if os.Geteuid() == 0 {
		uid, gid := lookupUnprivileged()
		if err := os.Chown(dir, int(uid), int(gid)); err != nil {
			_ = os.RemoveAll(dir)
			return "", err
		}
	}
	return dir, nil
}

// serve starts a server on the data directory dir/data (made by initdb or
// pg_basebackup), its socket in dir, on TCP port (0: no TCP), with extra
// "name=value" settings. On failure dir is removed.
func serve(dir string, port int, settings ...string) (*Cluster, error) {
	data := filepath.Join(dir, "data")
	listen := "listen_addresses="
	if port != 0 {
		listen = "listen_addresses=127.0.0.1"
	}
	args := []string{"-D", data, "-k", dir, "-c", listen,
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "max_connections=300", "-c", "shared_buffers=128MB"}
	if port != 0 {
		args = append(args, "-c", fmt.Sprintf("port=%d", port))
	}
	for _, s := range settings {
		args = append(args, "-c", s)
	}
	logf, err := os.Create(filepath.Join(dir, "postgres.log"))
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	c := &Cluster{SocketDir: dir, Port: port, args: args, settings: settings, logf: logf}
	if err := c.Up(); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// URL is the connection string for a database of the test cluster.
func URL(db string) string {
	return fmt.Sprintf("postgres://postgres@/%s?host=%s&sslmode=disable", db, socketDir)
}

// Database is one test's own database.
type Database struct {
	Name string
	URL  string
}

// NewDatabase makes a database on the shared cluster with Podium's schema
// already applied and drops it when the test ends.
func NewDatabase(t testing.TB) Database {
	t.Helper()
	if shared == nil {
		t.Fatal("pgtest: the cluster is not running; call pgtest.Main(m) from TestMain")
	}
	return NewDatabaseIn(t, shared)
}

// NewDatabaseIn makes a database on cluster c with Podium's schema already
// applied and drops it when the test ends (if c is still up).
func NewDatabaseIn(t testing.TB, c *Cluster) Database {
	t.Helper()
	name := fmt.Sprintf("t%d_%s", dbCounter.Add(1), sanitize(t.Name()))
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		t.Fatalf("pgtest: connect: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, fmt.Sprintf("create database %q template %s", name, template)); err != nil {
		t.Fatalf("pgtest: create database: %v", err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(ctx, c.URL("postgres"))
		if err != nil {
			return
		}
		defer c.Close(ctx)
		_, _ = c.Exec(ctx, fmt.Sprintf("drop database if exists %q with (force)", name))
	})
	return Database{Name: name, URL: c.URL(name)}
}

// NewPool returns a pool on a fresh database, closed when the test ends.
func NewPool(t testing.TB) (*pgxpool.Pool, Database) {
	t.Helper()
	db := NewDatabase(t)
	pool, err := pgxpool.New(context.Background(), db.URL)
	if err != nil {
		t.Fatalf("pgtest: pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool, db
}

func sanitize(s string) string {
	s = strings.ToLower(s)
	var b strings.Builder
	for _, r := range s {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	out := b.String()
	if len(out) > 40 {
		out = out[:40]
	}
	return out
}
