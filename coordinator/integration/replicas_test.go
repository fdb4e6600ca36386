package integration_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5"

	"github.com/podiumhq/podium/coordinator/coordtest"
	enrollment "github.com/podiumhq/podium/coordinator/enroll"
	"github.com/podiumhq/podium/coordinator/nodes"
	"github.com/podiumhq/podium/coordinator/store"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/proto/podium/v1/podiumv1connect"
	"github.com/podiumhq/podium/test/testenv/pgtest"
)

func assignOf(t *testing.T, n *simNode) *podiumv1.Assign {
	t.Helper()
	for {
		m, err := n.stream.Receive()
		if err != nil {
			t.Fatalf("waiting for an assignment: %v", err)
		}
		if a := m.GetAssign(); a != nil {
			return a
		}
	}
}

func submit(t *testing.T, ctx context.Context, r *coordtest.Replica, spec *podiumv1.TaskSpec) string {
	t.Helper()
	res, err := r.Tasks().Submit(ctx, connect.NewRequest(&podiumv1.SubmitRequest{Spec: spec}))
	if err != nil {
		t.Fatal(err)
	}
	return res.Msg.Task.Id
}

// A node connected to replica B receives a task submitted through replica A:
// the command is a row, and B delivers it when the doorbell rings.
func TestTaskSubmittedOnOneReplicaReachesNodeOnAnother(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	a := coordtest.Start(t, db.URL, coordtest.Options{})
	b := coordtest.Start(t, db.URL, coordtest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id, key := enroll(t, a)
	node, ack := connectNode(t, ctx, b, id, key)
	if ack.Replica != b.ReplicaID() {
		t.Fatalf("HelloAck names replica %q, want %q", ack.Replica, b.ReplicaID())
	}
	if len(ack.Replicas) != 2 {
		t.Fatalf("HelloAck lists replicas %v, want both", ack.Replicas)
	}
	taskID := submit(t, ctx, a, &podiumv1.TaskSpec{Image: "busybox"})
	if got := assignOf(t, node); got.TaskId != taskID {
		t.Fatalf("node got %s, want %s", got.TaskId, taskID)
	}
}

// When replica B loses its lease connection it ends its sessions at once; the
// node reconnects to A and carries on, nothing is lost or stored twice, and B
// can no longer write for the node.
func TestReplicaLosingItsLeaseHandsNodesOver(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	a := coordtest.Start(t, db.URL, coordtest.Options{})
	b := coordtest.Start(t, db.URL, coordtest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	id, key := enroll(t, a)
	node, _ := connectNode(t, ctx, b, id, key)
	taskID := submit(t, ctx, a, &podiumv1.TaskSpec{Image: "busybox"})
	as := assignOf(t, node)
	node.send(t, status(taskID, as.Attempt, 1, podiumv1.TaskState_TASK_STATE_RUNNING, nil),
		logEv(taskID, as.Attempt, 2, 0, podiumv1.LogStream_LOG_STREAM_STDOUT, "one\n"))
	oldEpoch := sessionEpoch(t, ctx, db.URL, id)

	// Kill B's lease connection from the database side.
	l, err := b.Leases().Current(ctx)
	if err != nil {
		t.Fatal(err)
	}
	killBackend(t, ctx, db.URL, l.PID())
	// B's stream to the node ends.
	for {
		if _, err := node.stream.Receive(); err != nil {
			if ctx.Err() != nil {
				t.Fatalf("gave up waiting for B's stream to the node to end: %v", err)
			}
			break
		}
	}
	// The node reconnects to A and reports the task it still runs.
	st := a.NodeClient().Stream(ctx)
	if err := st.Send(&podiumv1.StreamRequest{Msg: &podiumv1.StreamRequest_Hello{Hello: &podiumv1.Hello{
		NodeId: id, NodeKey: key, Running: []*podiumv1.RunningTask{{TaskId: taskID, Attempt: as.Attempt, LastSeq: 3}}}}}); err != nil {
		t.Fatal(err)
	}
	m, err := st.Receive()
	if err != nil {
		t.Fatalf("waiting for A's HelloAck: %v", err)
	}
	adopt := m.GetHelloAck().GetAdopt()
	if len(adopt) != 1 || !adopt[0].Keep || adopt[0].AckedSeq != 2 {
		t.Fatalf("adopt = %v, want the task kept from seq 2", adopt)
	}
	node2 := &simNode{id: id, key: key, stream: st}
	zero := int32(0)
	// The node re-sends what was not acked (seq 2 may or may not have been) and finishes.
	node2.send(t, logEv(taskID, as.Attempt, 2, 0, podiumv1.LogStream_LOG_STREAM_STDOUT, "one\n"),
		logEv(taskID, as.Attempt, 3, 4, podiumv1.LogStream_LOG_STREAM_STDOUT, "two\n"),
		status(taskID, as.Attempt, 4, podiumv1.TaskState_TASK_STATE_SUCCEEDED, &zero))
	coordtest.Eventually(t, 10*time.Second, "the task to succeed", func() bool {
		res, err := a.Tasks().Get(ctx, connect.NewRequest(&podiumv1.GetRequest{Id: taskID}))
		return err == nil && res.Msg.Task.State == podiumv1.TaskState_TASK_STATE_SUCCEEDED
	})
	if out := stdoutOf(t, ctx, a, taskID); out != "one\ntwo\n" {
		t.Fatalf("stored stdout %q, want each line once", out)
	}
	// B, with the epoch it had, can write nothing for the node any more.
	_, err = b.Store().IngestEvents(ctx, id, oldEpoch, taskID, as.Attempt,
		[]*podiumv1.TaskEvent{logEv(taskID, as.Attempt, 5, 8, podiumv1.LogStream_LOG_STREAM_STDOUT, "stale\n")})
	if !errors.Is(err, store.ErrStaleEpoch) {
		t.Fatalf("a write with the lost epoch: got %v, want ErrStaleEpoch", err)
	}
	if out := stdoutOf(t, ctx, a, taskID); out != "one\ntwo\n" {
		t.Fatalf("stored stdout %q after the stale write", out)
	}
}

// A second stream for the same node replaces the first, whichever replica
// either lands on.
func TestNewStreamReplacesOldAcrossReplicas(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	a := coordtest.Start(t, db.URL, coordtest.Options{})
	b := coordtest.Start(t, db.URL, coordtest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id, key := enroll(t, a)
	first, _ := connectNode(t, ctx, a, id, key)
	_, ack := connectNode(t, ctx, b, id, key)
	if ack.Replica != b.ReplicaID() {
		t.Fatalf("second stream held by %s", ack.Replica)
	}
	// The first stream may still carry the replica list A pushes on B's
	// start; anything else, or no end before ctx's deadline, fails.
	for {
		m, err := first.stream.Receive()
		if err != nil {
			break
		}
		if m.GetReplicas() == nil {
			t.Fatalf("the first stream is still open after a newer one connected: it got %v", m)
		}
	}
	if ctx.Err() != nil {
		t.Fatal("the first stream was not closed after a newer one connected")
	}
	_, ack = connectNode(t, ctx, b, id, key) // and on the same replica
	if ack.Replica != b.ReplicaID() {
		t.Fatalf("third stream held by %s", ack.Replica)
	}
}

// A stream that does not open with a Hello is refused at once; one that says
// nothing is closed by the coordinator after the hello timeout (not by the
// client giving up: its own deadline is far later).
func TestNoHelloInTimeIsClosed(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	r := coordtest.Start(t, db.URL, coordtest.Options{Nodes: nodes.Config{HelloTimeout: time.Second}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st := r.NodeClient().Stream(ctx)
	// Open the stream with a heartbeat, which is not a Hello: refused at once.
	_ = st.Send(&podiumv1.StreamRequest{Msg: &podiumv1.StreamRequest_Heartbeat{Heartbeat: &podiumv1.Heartbeat{}}})
	if _, err := st.Receive(); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("a stream opening with a heartbeat: got %v, want InvalidArgument", err)
	}
	// Open a stream and say nothing: closed after the hello timeout.
	st2 := r.NodeClient().Stream(ctx)
	if err := st2.Send(nil); err != nil { // sends the headers only
		t.Fatal(err)
	}
	_, err := st2.Receive()
	if ctx.Err() != nil {
		t.Fatalf("the coordinator never closed a silent stream: %v", err)
	}
	if connect.CodeOf(err) != connect.CodeDeadlineExceeded {
		t.Fatalf("a silent stream: got %v, want DeadlineExceeded", err)
	}
}

// Two concurrent enrolls with one token: exactly one wins. Used, expired and
// unknown tokens are refused with distinct messages; no node key is stored.
func TestEnrollmentTokens(t *testing.T) {
	t.Parallel()
	r, db := coordtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tok, err := r.Admin().CreateEnrollmentToken(ctx, connect.NewRequest(&podiumv1.CreateEnrollmentTokenRequest{Labels: []string{"gpu"},
		AllowNodeLabels: true}))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	results := make([]error, 8)
	keys := make([]string, 8)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := r.NodeClient().Enroll(ctx, connect.NewRequest(&podiumv1.EnrollRequest{Token: tok.Msg.Token, Labels: []string{"ssd"}}))
			results[i] = err
			if err == nil {
				keys[i] = res.Msg.NodeKey
				if len(res.Msg.Labels) != 2 {
					t.Errorf("labels %v, want the union of the token's and the node's", res.Msg.Labels)
				}
			}
		}()
	}
	wg.Wait()
	wins := 0
	var key string
	for i, err := range results {
		if err == nil {
			wins++
			key = keys[i]
		} else if connect.CodeOf(err) != connect.CodeUnauthenticated || !contains(err.Error(), "already used") {
			t.Errorf("a losing enroll: %v, want Unauthenticated 'already used'", err)
		}
	}
	if wins != 1 {
		t.Fatalf("%d enrolls won with one token, want exactly 1", wins)
	}
	_, err = r.NodeClient().Enroll(ctx, connect.NewRequest(&podiumv1.EnrollRequest{Token: "podium_et_nope"}))
	if connect.CodeOf(err) != connect.CodeUnauthenticated || !contains(err.Error(), "not known") {
		t.Fatalf("unknown token: %v", err)
	}
	tok2, _ := r.Admin().CreateEnrollmentToken(ctx, connect.NewRequest(&podiumv1.CreateEnrollmentTokenRequest{TtlSeconds: 1}))
	conn, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "update podium.enrollment_tokens set expires_at = now() - interval '1 second' where used_at is null"); err != nil {
		t.Fatal(err)
	}
	_, err = r.NodeClient().Enroll(ctx, connect.NewRequest(&podiumv1.EnrollRequest{Token: tok2.Msg.Token}))
	if connect.CodeOf(err) != connect.CodeUnauthenticated || !contains(err.Error(), "expired") {
		t.Fatalf("expired token: %v", err)
	}
	var nodes int
	_ = conn.QueryRow(ctx, "select count(*) from podium.nodes").Scan(&nodes)
	if nodes != 1 {
		t.Fatalf("%d nodes exist, want 1", nodes)
	}
	// Neither the key nor the token appears anywhere in the database.
	for _, secret := range []string{key, tok.Msg.Token, tok2.Msg.Token} {
		var hits int
		err := conn.QueryRow(ctx, `select count(*) from (
			select to_jsonb(n)::text as row from podium.nodes n
			union all select to_jsonb(e)::text from podium.enrollment_tokens e) r
			where r.row like '%' || $1 || '%'`, secret).Scan(&hits)
		if err != nil {
			t.Fatal(err)
		}
		if hits != 0 {
			t.Fatalf("a secret was stored in clear")
		}
	}
}

func sessionEpoch(t *testing.T, ctx context.Context, url, nodeID string) int64 {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var e int64
	if err := conn.QueryRow(ctx, "select session_epoch from podium.nodes where id = $1", nodeID).Scan(&e); err != nil {
		t.Fatal(err)
	}
	return e
}

func killBackend(t *testing.T, ctx context.Context, url string, pid uint32) {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var ok bool
	if err := conn.QueryRow(ctx, "select pg_terminate_backend($1)", int(pid)).Scan(&ok); err != nil || !ok {
		t.Fatalf("terminate backend %d: %v %v", pid, ok, err)
	}
}

func stdoutOf(t *testing.T, ctx context.Context, r *coordtest.Replica, id string) string {
	t.Helper()
	ev, err := r.Tasks().Events(ctx, connect.NewRequest(&podiumv1.EventsRequest{Id: id}))
	if err != nil {
		t.Fatal(err)
	}
	var out string
	for ev.Receive() {
		if l := ev.Msg().GetEvent().GetLog(); l != nil && l.Stream == podiumv1.LogStream_LOG_STREAM_STDOUT {
			out += string(l.Data)
		}
	}
	return out
}

// Failed enrollments are limited per address: once an address has spent its
// failures, even a good token is refused from it, and the refusal does not
// spend the token; another address enrolls with that same token. (That an
// address's bucket refills is enroll.TestEnrollLimiterRefills.)
func TestEnrollFailuresAreRateLimited(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	r := coordtest.Start(t, db.URL, coordtest.Options{Enroll: enrollment.Config{Failures: 3, Refill: time.Hour}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 3 {
		_, err := r.NodeClient().Enroll(ctx, connect.NewRequest(&podiumv1.EnrollRequest{Token: "podium_et_guess"}))
		if connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Fatalf("attempt %d: %v, want Unauthenticated", i, err)
		}
	}
	tok, err := r.Admin().CreateEnrollmentToken(ctx, connect.NewRequest(&podiumv1.CreateEnrollmentTokenRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.NodeClient().Enroll(ctx, connect.NewRequest(&podiumv1.EnrollRequest{Token: tok.Msg.Token}))
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !contains(err.Error(), "too many") {
		t.Fatalf("after the limit: %v, want ResourceExhausted", err)
	}
	var n int
	conn, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	_ = conn.QueryRow(ctx, "select count(*) from podium.enrollment_tokens where used_at is not null").Scan(&n)
	if n != 0 {
		t.Fatalf("a refused enrollment spent the token")
	}
	// The same token from another address (all of 127/8 is this machine).
	other := podiumv1connect.NewNodeServiceClient(httpClientFrom("127.0.0.2"), r.URL())
	res, err := other.Enroll(ctx, connect.NewRequest(&podiumv1.EnrollRequest{Token: tok.Msg.Token}))
	if err != nil {
		t.Fatalf("enroll from another address after this one was limited: %v", err)
	}
	if res.Msg.NodeId == "" {
		t.Fatal("enrolled with no node id")
	}
}

// httpClientFrom is coordtest.HTTPClient with its connections made from a
// given local address.
func httpClientFrom(ip string) *http.Client {
	c := coordtest.HTTPClient()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	c.Transport.(*http.Transport).DialContext = d.DialContext
	return c
}

// replicasPushed waits until the coordinator pushes n a replica list that
// satisfies ok, and returns it. A replica may push the same list more than
// once (its doorbell always pushes), so lists before the one wanted are
// skipped; the stream's context bounds the wait.
func replicasPushed(t *testing.T, n *simNode, what string, ok func([]string) bool) []string {
	t.Helper()
	var last []string
	for {
		m, err := n.stream.Receive()
		if err != nil {
			t.Fatalf("waiting for a replica list with %s (last pushed: %v): %v", what, last, err)
		}
		if r := m.GetReplicas(); r != nil {
			last = r.GetAddresses()
			if ok(last) {
				return last
			}
		}
	}
}

func listsAddr(addrs []string, addr string) bool {
	for _, a := range addrs {
		if contains(a, addr) {
			return true
		}
	}
	return false
}

// A replica started after a node connected is pushed to the node at once by
// the replica holding it, and so is one that stops: the node's list follows
// the replicas without waiting for its next Hello.
func TestNodeIsToldWhenReplicasJoinAndLeave(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	a := coordtest.Start(t, db.URL, coordtest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	id, key := enroll(t, a)
	node, ack := connectNode(t, ctx, a, id, key)
	if len(ack.Replicas) != 1 || !listsAddr(ack.Replicas, a.Addr()) {
		t.Fatalf("HelloAck lists replicas %v, want only A (%s)", ack.Replicas, a.Addr())
	}

	b := coordtest.Start(t, db.URL, coordtest.Options{})
	replicasPushed(t, node, "A and B", func(got []string) bool {
		return len(got) == 2 && listsAddr(got, a.Addr()) && listsAddr(got, b.Addr())
	})

	b.Stop()
	replicasPushed(t, node, "only A", func(got []string) bool {
		return len(got) == 1 && listsAddr(got, a.Addr())
	})
}
