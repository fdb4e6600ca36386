package pgtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Standby is a hot standby streaming from a primary Cluster, made with
// pg_basebackup -R, for a test that fails Postgres over: stop the primary,
// Promote the standby, and the standby is the new primary (its Cluster
// methods work as for any other).
type Standby struct {
	*Cluster
	// Name is its application_name on the primary (pg_stat_replication,
	// synchronous_standby_names).
	Name    string
	primary *Cluster
}

// NewStandby copies primary (a cluster from NewCluster) with `pg_basebackup
// -R` into a data directory of its own and starts it as a hot standby
// streaming from the primary over TCP, on its own socket directory and TCP
// port. With synchronous the primary then names it in
// synchronous_standby_names, so a commit on the primary returns only once the
// standby has it on disk (synchronous_commit=on, as NewCluster sets): what a
// client was told is committed survives a failover to it. Without,
// replication is asynchronous and a failover may lose the last commits. It
// returns once the standby streams (and, synchronous, once the primary counts
// it as its synchronous standby); it is stopped and removed when the test
// ends.
//
// The default pg_hba.conf of initdb -A trust already lets local and
// 127.0.0.1 connections replicate, and Postgres 15's defaults (wal_level
// replica, max_wal_senders 10) are what streaming needs.
func NewStandby(t testing.TB, primary *Cluster, synchronous bool) *Standby {
	t.Helper()
	if primary.Port == 0 {
		t.Fatal("pgtest: a standby needs a primary from NewCluster (one on TCP)")
	}
	port, err := freePort()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	dir, err := newClusterDir()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	name := fmt.Sprintf("standby_%d", port)
	data := filepath.Join(dir, "data")
	if out, err := asPostgres("pg_basebackup", "-D", data, "-h", "127.0.0.1", "-p", fmt.Sprint(primary.Port),
		"-U", "postgres", "-R", "-X", "stream", "-c", "fast", "--no-sync").CombinedOutput(); err != nil {
		_ = os.RemoveAll(dir)
		t.Fatalf("pgtest: pg_basebackup from %s: %v\n%s", primary.SocketDir, err, out)
	}
	// primary_conninfo as -R wrote it, with the application_name the
	// primary knows this standby by.
	conninfo := fmt.Sprintf("primary_conninfo=host=127.0.0.1 port=%d user=postgres application_name=%s", primary.Port, name)
	c, err := serve(dir, port, append(append([]string(nil), primary.settings...), conninfo, "hot_standby=on")...)
	if err != nil {
		t.Fatalf("pgtest: start the standby: %v", err)
	}
	s := &Standby{Cluster: c, Name: name, primary: primary}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("postgres log of standby %s:\n%s", c.SocketDir, c.Log())
		}
		c.Stop()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := s.waitReplication(ctx, "streaming", ""); err != nil {
		t.Fatalf("pgtest: standby %s: %v", name, err)
	}
	if synchronous {
		if err := primary.exec(ctx, fmt.Sprintf(`alter system set synchronous_standby_names = '"%s"'`, name), "select pg_reload_conf()"); err != nil {
			t.Fatalf("pgtest: make %s the synchronous standby: %v", name, err)
		}
		if err := s.waitReplication(ctx, "streaming", "sync"); err != nil {
			t.Fatalf("pgtest: standby %s: %v", name, err)
		}
	}
	return s
}

// waitReplication waits until the primary reports the standby in state (and
// with sync_state syncState, unless empty) in pg_stat_replication.
func (s *Standby) waitReplication(ctx context.Context, state, syncState string) error {
	var got string
	for {
		conn, err := pgx.Connect(ctx, s.primary.URL("postgres"))
		if err == nil {
			err = conn.QueryRow(ctx, `select state || '/' || sync_state from pg_stat_replication where application_name = $1`, s.Name).Scan(&got)
			_ = conn.Close(ctx)
			st, sync, _ := strings.Cut(got, "/")
			if err == nil && st == state && (syncState == "" || sync == syncState) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the primary does not report it %s %s (last: %q, %v)\n%s", state, syncState, got, err, s.Log())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Promote makes the standby a primary (`pg_ctl promote -w`): it stops
// replaying, ends recovery and accepts writes. It returns once it does.
func (s *Standby) Promote() error {
	out, err := asPostgres("pg_ctl", "promote", "-w", "-t", "60", "-D", filepath.Join(s.SocketDir, "data")).CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_ctl promote: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	var inRecovery bool
	if err := conn.QueryRow(ctx, "select pg_is_in_recovery()").Scan(&inRecovery); err != nil {
		return err
	}
	if inRecovery {
		return fmt.Errorf("the standby is still in recovery after pg_ctl promote\n%s", s.Log())
	}
	return nil
}

// exec runs statements on the cluster's "postgres" database.
func (c *Cluster) exec(ctx context.Context, stmts ...string) error {
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	for _, q := range stmts {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return nil
}

// MultiHostURL is the connection string for database db that lists the
// clusters' TCP addresses in order with target_session_attrs=read-write, as
// a coordinator in front of a primary and its standby is configured: the
// client tries each host in turn and keeps the first that accepts writes.
func MultiHostURL(db string, clusters ...*Cluster) string {
	hosts := make([]string, len(clusters))
	for i, c := range clusters {
		hosts[i] = fmt.Sprintf("127.0.0.1:%d", c.Port)
	}
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable&target_session_attrs=read-write", strings.Join(hosts, ","), db)
}

// WaitReplayed waits until the standby has replayed everything the primary
// has written so far: what was committed on the primary is on the standby.
func (s *Standby) WaitReplayed(t testing.TB, primary *Cluster) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var target string
	if err := queryOne(ctx, primary, "select pg_current_wal_lsn()::text", &target); err != nil {
		t.Fatalf("pgtest: the primary's WAL position: %v", err)
	}
	for {
		var caughtUp bool
		err := queryOne(ctx, s.Cluster, "select pg_last_wal_replay_lsn() >= '"+target+"'::pg_lsn", &caughtUp)
		if err == nil && caughtUp {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("pgtest: standby %s did not replay up to %s (%v)\n%s", s.Name, target, err, s.Log())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// queryOne scans one row of one column from the cluster's "postgres"
// database.
func queryOne(ctx context.Context, c *Cluster, q string, dst any) error {
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.QueryRow(ctx, q).Scan(dst)
}

// WaitCommitWaitingForStandby waits until a commit on the cluster (a
// primary with a synchronous standby that is down) is held waiting for the
// standby to confirm it: committed locally, not yet acknowledged to its
// client.
func (c *Cluster) WaitCommitWaitingForStandby(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		var n int
		err := queryOne(ctx, c, "select count(*) from pg_stat_activity where wait_event = 'SyncRep'", &n)
		if err == nil && n > 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("pgtest: no commit on %s waited for its synchronous standby (%v)", c.SocketDir, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
