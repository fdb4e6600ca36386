// Package faults is Podium's fault-injection suite: each test drives the
// real binaries (podium-coordinator replicas as processes, podium-agent,
// podium-runner inside real containers, the podium CLI) on a Postgres
// cluster and a TCP link of its own, injects one fault mid-task (Postgres
// restarted or killed, a replica SIGKILLed, the link black-holed, ...) and
// checks what an operator would: the task ends with its own status, `podium
// run` exits with the task's code, the output printed and stored is
// byte-exact against the task's own checksum, nodes come back without
// action, and nothing labelled by Podium is left in Docker.
//
// The package holds tests only. Its harness (harness_test.go) is small on
// purpose; a new row is a test that uses it:
//
//	func TestSomeFault(t *testing.T) {
//		t.Parallel()
//		pg := pgtest.NewCluster(t)        // a Postgres of its own: Restart("fast"|"immediate"), Down, Up
//		db := pgtest.NewDatabaseIn(t, pg)
//		r := StartReplica(t, db.URL)      // podium-coordinator serve, as a process: Kill, Stop, Start, Restart
//		a := EnrollAgent(t, r, r.URL())   // podium-agent enroll (or through a netfault.Proxy's URL)
//		a.Start()                         // podium-agent run: Kill, Stop, Restart; Args and Env
//		r.WaitNode(t, a.Node, podiumv1.NodeStatus_NODE_STATUS_ONLINE)
//		w := Workload{Lines: 40, Every: 100 * time.Millisecond, Code: 3}
//		run := StartRun(t, []string{r.URL()}, w.Args(t)...) // podium --server ... run
//		run.WaitStdout(t, w.Line(5))
//		... inject the fault ...
//		w.Check(t, r, run) // exit code, output against the task's own checksum, stored output, task state
//		NothingLeft(t, a.Node)
//	}
//
// A link the test can cut is a netfault.Proxy between the agent and a
// replica started at a known address (FreeAddr, StartReplicaAt) with
// "--advertise", proxy.URL(), so that the replica list the agent keeps leads
// back through the proxy too (see the black-hole row).
//
// A row that runs another build gives its directory: StartReplicaFrom,
// EnrollAgentFrom (the agent keeps running from it), StartRunFrom and
// StartPodiumFrom; "" is this tree's. PreviousRelease(t) builds the release
// recorded in packaging/previous-release from git, once per commit into
// ~/.cache/podium/releases; Replica.Replace and Agent.Replace swap a running
// process for another build on the same address or data directory (see the
// rolling-upgrade row).
//
// Thresholds are shortened with the coordinator's own flags
// (--unreachable-after, --offline-after, ...) given to StartReplica, so that
// a row stays short. Waits poll a condition with a deadline (wait.For);
// nothing sleeps to wait. Logs of every process (and Postgres) are printed
// when a test fails.
package faults
