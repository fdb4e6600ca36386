package faults

import (
	"bytes"
	"context"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/podiumhq/podium/schema"
	"github.com/podiumhq/podium/test/testenv/binaries"
)

// previous is the previous release's binaries, built (or found in the
// cache) once for this test binary.
var previous struct {
	once   sync.Once
	commit string
	dir    string
	err    error
}

// PreviousRelease is the directory holding the binaries of the release
// recorded in packaging/previous-release, and its commit. The first call
// builds them unless ~/.cache/podium/releases holds them already (a minute
// or two on two cores, once per commit).
func PreviousRelease(t testing.TB) (dir, commit string) {
	t.Helper()
	previous.once.Do(func() {
		root, err := binaries.Root()
		if err != nil {
			previous.err = err
			return
		}
		if previous.commit, err = binaries.PreviousRelease(root); err != nil {
			previous.err = err
			return
		}
		previous.dir, previous.err = binaries.Release(root, previous.commit)
	})
	if previous.err != nil {
		t.Fatalf("the previous release's binaries: %v", previous.err)
	}
	return previous.dir, previous.commit
}

// Replace stops the replica gracefully and starts the podium-coordinator in
// bin ("" for this tree's) on the same address, flags and database.
func (r *Replica) Replace(bin string) {
	r.t.Helper()
	r.Stop()
	r.mu.Lock()
	r.Bin = bin
	r.mu.Unlock()
	r.Start()
}

// Replace stops the agent gracefully (its tasks keep running) and starts the
// podium-agent in bin ("" for this tree's) on the same data directory, so
// the same identity.
func (a *Agent) Replace(bin string) {
	a.t.Helper()
	a.Stop()
	a.mu.Lock()
	a.Bin = bin
	a.mu.Unlock()
	a.Start()
}

// Podium runs a podium command from bin ("" for this tree's) to its end and
// returns its stdout, stderr and exit code.
func Podium(t testing.TB, bin string, servers []string, args ...string) (stdout []byte, stderr string, code int) {
	t.Helper()
	r := StartPodiumFrom(t, bin, servers, args...)
	code = r.Wait(t)
	return r.Stdout(), r.Stderr(), code
}

// MustPodium is Podium that fails the test unless the command exits 0, and
// returns its stdout without surrounding space.
func MustPodium(t testing.TB, bin string, servers []string, args ...string) string {
	t.Helper()
	out, errs, code := Podium(t, bin, servers, args...)
	if code != 0 {
		t.Fatalf("podium %v (from %s) exited %d; stderr:\n%s", args, binOr(bin), code, errs)
	}
	return string(bytes.TrimSpace(out))
}

// appliedMigrations lists the versions in podium.schema_migrations.
func appliedMigrations(t testing.TB, databaseURL string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), readyWithin)
	defer cancel()
	c, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		t.Fatalf("connect to %s: %v", databaseURL, err)
	}
	defer c.Close(context.WithoutCancel(ctx))
	rows, err := c.Query(ctx, "select version from podium.schema_migrations order by version")
	if err != nil {
		t.Fatalf("read the applied migrations: %v", err)
	}
	applied, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("read the applied migrations: %v", err)
	}
	return applied
}

// missingMigrations are this tree's migrations the database has not applied.
func missingMigrations(t testing.TB, databaseURL string) []string {
	t.Helper()
	ms, err := schema.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	applied := appliedMigrations(t, databaseURL)
	var missing []string
	for _, m := range ms {
		if !slices.Contains(applied, m.Version) {
			missing = append(missing, m.Version)
		}
	}
	return missing
}

// emptyDatabase drops the podium schema pgtest made the database with (this
// tree's), so that the first replica to start creates it with its own
// migrations: a database as an older release left it.
func emptyDatabase(t testing.TB, databaseURL string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), readyWithin)
	defer cancel()
	c, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		t.Fatalf("connect to %s: %v", databaseURL, err)
	}
	defer c.Close(context.WithoutCancel(ctx))
	if _, err := c.Exec(ctx, "drop schema podium cascade"); err != nil {
		t.Fatalf("drop the podium schema: %v", err)
	}
}

// releaseMigrations are the versions of the migrations in schema/migrations
// at commit, read from git.
func releaseMigrations(t testing.TB, commit string) map[string]string {
	t.Helper()
	root, err := binaries.Root()
	if err != nil {
		t.Fatal(err)
	}
	list := gitOut(t, root, "ls-tree", "--name-only", commit+":schema/migrations")
	out := map[string]string{}
	for _, name := range strings.Fields(list) {
		if v, ok := strings.CutSuffix(name, ".sql"); ok {
			out[v] = gitOut(t, root, "show", commit+":schema/migrations/"+name)
		}
	}
	if len(out) == 0 {
		t.Fatalf("no migrations in schema/migrations at %s", commit)
	}
	return out
}

// gitOut is git's stdout in dir.
func gitOut(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git %v: %v: %s", args, err, stderr.String())
	}
	return string(out)
}
