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
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
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

// Main starts the cluster, runs the tests and stops the cluster, whatever the
// tests did. A machine without Postgres fails loudly with how to get it.
func Main(m *testing.M) { os.Exit(Run(m)) }

// Run is Main without the exit, for a TestMain that has more to clean up.
func Run(m *testing.M) int {
	stop, err := start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
		return 2
	}
	defer stop()
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
// schema. Benchmarks start one with StartCluster; tests use Main.
type Cluster struct {
	SocketDir string
	stop      func()
}

// URL is the connection string for a database of the cluster.
func (c *Cluster) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@/%s?host=%s&sslmode=disable", db, c.SocketDir)
}

// Stop shuts the cluster down and removes its files.
func (c *Cluster) Stop() { c.stop() }

// StartCluster starts a cluster; settings are extra "name=value" server settings.
func StartCluster(settings ...string) (*Cluster, error) {
	stop, err := start(settings...)
	if err != nil {
		return nil, err
	}
	return &Cluster{SocketDir: socketDir, stop: stop}, nil
}

func start(settings ...string) (stop func(), err error) {
	if _, err := os.Stat(filepath.Join(binDir(), "initdb")); err != nil {
		return nil, fmt.Errorf("no Postgres binaries in %s: install them with `apt-get install postgresql-15` (or set PODIUM_PG_BIN)", binDir())
	}
	dir, err := os.MkdirTemp("", "podium-pgtest-")
	if err != nil {
		return nil, err
	}
	cleanup := func() { _ = os.RemoveAll(dir) }
	if err := os.Chmod(dir, 0o755); err != nil {
		cleanup()
		return nil, err
	}
	if os.Geteuid() == 0 {
		uid, gid := lookupUnprivileged()
		if err := os.Chown(dir, int(uid), int(gid)); err != nil {
			cleanup()
			return nil, err
		}
	}
	data := filepath.Join(dir, "data")
	if out, err := asPostgres("initdb", "-D", data, "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8").CombinedOutput(); err != nil {
		cleanup()
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	args := []string{"-D", data, "-k", dir, "-c", "listen_addresses=",
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "max_connections=300", "-c", "shared_buffers=128MB"}
	for _, s := range settings {
		args = append(args, "-c", s)
	}
	srv := asPostgres("postgres", args...)
	logf, err := os.Create(filepath.Join(dir, "postgres.log"))
	if err != nil {
		cleanup()
		return nil, err
	}
	srv.Stdout, srv.Stderr = logf, logf
	// Its own process group, so a ^C to the test run does not kill it before
	// stop has a chance to shut it down cleanly.
	if srv.SysProcAttr == nil {
		srv.SysProcAttr = &syscall.SysProcAttr{}
	}
	srv.SysProcAttr.Setpgid = true
	if err := srv.Start(); err != nil {
		cleanup()
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	stop = func() {
		_ = srv.Process.Signal(syscall.SIGINT) // fast shutdown
		done := make(chan struct{})
		go func() { _ = srv.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = srv.Process.Kill()
			<-done
		}
		_ = logf.Close()
		cleanup()
	}
	socketDir = dir
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var conn *pgx.Conn
	for {
		conn, err = pgx.Connect(ctx, URL("postgres"))
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			log, _ := os.ReadFile(filepath.Join(dir, "postgres.log"))
			stop()
			return nil, fmt.Errorf("postgres did not come up: %v\n%s", err, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "create database "+template); err != nil {
		stop()
		return nil, err
	}
	tconn, err := pgx.Connect(ctx, URL(template))
	if err != nil {
		stop()
		return nil, err
	}
	if _, err := schema.Migrate(ctx, tconn); err != nil {
		tconn.Close(ctx)
		stop()
		return nil, err
	}
	tconn.Close(ctx)
	return stop, nil
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

// NewDatabase makes a database with Podium's schema already applied and drops
// it when the test ends.
func NewDatabase(t testing.TB) Database {
	t.Helper()
	if socketDir == "" {
		t.Fatal("pgtest: the cluster is not running; call pgtest.Main(m) from TestMain")
	}
	name := fmt.Sprintf("t%d_%s", dbCounter.Add(1), sanitize(t.Name()))
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, URL("postgres"))
	if err != nil {
		t.Fatalf("pgtest: connect: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, fmt.Sprintf("create database %q template %s", name, template)); err != nil {
		t.Fatalf("pgtest: create database: %v", err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(ctx, URL("postgres"))
		if err != nil {
			return
		}
		defer c.Close(ctx)
		_, _ = c.Exec(ctx, fmt.Sprintf("drop database if exists %q with (force)", name))
	})
	return Database{Name: name, URL: URL(name)}
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
