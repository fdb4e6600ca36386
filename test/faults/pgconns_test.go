package faults

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/pgtest"
	"github.com/podiumhq/podium/test/testenv/wait"
)

// hogName is the application_name of the test's own connections.
const hogName = "podium-test-hog"

// exhaustConnections takes every connection Postgres allows, as another
// client gone wild would, and ends the replica's own on the database, so that
// every connection it needs must be made anew and is refused. (A replica
// keeps the connections it has; it is the next ones that max_connections
// refuses.) It returns once the hog and clients of other databases hold
// every one of max_connections' slots and none is the database's: a slot
// freed by a backend still exiting after it was ended would otherwise go to
// the replica's next connection, as it did once when this counted the
// database's clients alone. The hog's connections close when the returned
// func is called or the test ends.
func exhaustConnections(t *testing.T, pg *pgtest.Cluster, db string) (release func()) {
	t.Helper()
	ctx := context.Background()
	var conns []*pgx.Conn
	release = func() {
		for _, c := range conns {
			_ = c.Close(ctx)
		}
		conns = nil
	}
	t.Cleanup(release)
	url := pg.URL(db) + "&application_name=" + hogName
	count := func(q string) int {
		var n int
		if err := conns[0].QueryRow(ctx, q, db, hogName).Scan(&n); err != nil {
			t.Fatalf("read pg_stat_activity: %v", err)
		}
		return n
	}
	// Each client backend that is not the hog's: on the database (or not
	// yet past its start, with no database named), and on others.
	const others = ` from pg_stat_activity where backend_type = 'client backend' and application_name <> $2 and`
	const ours = others + ` (datname = $1 or datname is null)`
	const elsewhere = others + ` datname <> $1`
	var slots int
	wait.For(t, nodeWithin, "the test's connections to fill max_connections with no replica connected", func() bool {
		for {
			c, err := pgx.Connect(ctx, url)
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == "53300" {
				break
			}
			if err != nil {
				t.Fatalf("open a connection to fill max_connections: %v", err)
			}
			conns = append(conns, c)
		}
		if len(conns) == 0 {
			t.Fatal("Postgres refused the test's first connection")
		}
		if slots == 0 {
			if err := conns[0].QueryRow(ctx, `select setting::int from pg_settings where name = 'max_connections'`).Scan(&slots); err != nil {
				t.Fatalf("read max_connections: %v", err)
			}
		}
		if count(`select count(*)::int`+ours) == 0 && len(conns)+count(`select count(*)::int`+elsewhere) == slots {
			return true
		}
		count(`select count(pg_terminate_backend(pid))::int` + ours)
		return false
	})
	t.Logf("the test holds %d connections, all that max_connections allows", len(conns))
	return release
}

// TestPostgresConnectionsExhausted has another client take every connection
// Postgres allows (max_connections=20) mid-task, with the replica's own
// connections ended, for a fixed 25 s; then it lets them go. While they are
// held the replica must say what is wrong, by name: /readyz answers 503
// naming max_connections, its log says it, and a `podium nodes` is refused
// with a message naming it. Its loops that retry (the doorbell listener, the
// webhook outbox) must back off rather than retry and warn every second:
// each writes fewer than 12 warnings in the 25 s (once a second would be 25).
// Once the connections are freed, the replica is ready again without action,
// the node is back online on it, and the task ends with its own code, its
// output printed and stored byte-exact against its own checksum.
func TestPostgresConnectionsExhausted(t *testing.T) {
	t.Parallel()
	const window = 25 * time.Second
	pg := pgtest.NewCluster(t, "max_connections=20")
	db := pgtest.NewDatabaseIn(t, pg)
	r := StartReplica(t, db.URL)
	a := EnrollAgent(t, r, r.URL())
	a.Start()
	r.WaitOnlineOn(t, a.Node)

	w := Workload{Lines: 60, Every: 500 * time.Millisecond, Code: 6}
	run := StartRun(t, []string{r.URL()}, w.Args(t)...)
	run.WaitStdout(t, w.Line(5))

	from := len(r.Log())
	release := exhaustConnections(t, pg, db.Name)
	// The exhaustion lasts a fixed time; the replica is asked through it.
	// This waits for nothing: it is the fault.
	var readyz string
	asked := false
	for end := time.Now().Add(window); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		if code, body := getReadyz(r); code == http.StatusServiceUnavailable {
			readyz = body
		}
		if !asked && strings.Contains(r.Log()[from:], "Postgres has not answered this replica") {
			asked = true
			cli := StartPodium(t, []string{r.URL()}, "nodes")
			if code := cli.Wait(t); code == 0 {
				t.Errorf("podium nodes succeeded while Postgres refused every connection:\n%s", cli.Stdout())
			} else if !strings.Contains(cli.Stderr(), "max_connections") {
				t.Errorf("podium nodes failed without naming max_connections:\n%s", cli.Stderr())
			} else {
				t.Logf("podium nodes said: %s", strings.TrimSpace(cli.Stderr()))
			}
		}
	}
	during := r.Log()[from:]
	release()

	if !strings.Contains(readyz, "max_connections") {
		t.Errorf("during the exhaustion /readyz answered %q, want a 503 naming max_connections", readyz)
	}
	if !asked {
		t.Errorf("the replica never logged that Postgres had not answered it for a while")
	}
	if !strings.Contains(during, "max_connections") {
		t.Errorf("the replica's log never named max_connections during the exhaustion:\n%s", during)
	}
	for _, loop := range []string{`msg="bus: listener`, `msg="webhooks: read the outbox`} {
		n := strings.Count(during, loop)
		t.Logf("%d warnings %s… in %s", n, loop, window)
		if n >= 12 {
			t.Errorf("%d warnings %s… in %s: the loop retries without backing off", n, loop, window)
		}
	}

	r.WaitReady()
	r.WaitNode(t, a.Node, podiumv1.NodeStatus_NODE_STATUS_ONLINE)
	w.Check(t, r, run)
	NothingLeft(t, a.Node)
}

// getReadyz is the replica's /readyz status and body; 0 if it did not answer.
func getReadyz(r *Replica) (int, string) {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(r.URL() + "/readyz")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
