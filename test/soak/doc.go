// Package soak is Podium's seeded chaos soak, in the manner of Jepsen: the
// whole fleet runs a mixed workload for SOAK_TIME while a nemesis injects
// faults at random moments, and a checker then holds the recorded history,
// and what Podium stored, to the invariants a user relies on. `make soak`
// runs it for 10 minutes; `make test` runs it for 3.
//
// # The fleet
//
// Three podium-coordinator replicas as processes; Postgres 15 with a
// synchronous streaming standby (pgtest.NewStandby), which every replica
// reaches through a netfault.Proxy of its own per cluster, in a multi-host
// URL with target_session_attrs=read-write; the S3 server (s3test) for
// artifacts; three podium-agent processes, each on a Docker engine of its
// own (dockertest.PrivateEngine) and with its data directory on a tmpfs of
// its own. Nodes reach each replica through one netfault.Proxy the replica
// advertises.
//
// Agents are processes, not containers on private networks: an agent in a
// container needs a Docker engine inside it (Docker-in-Docker, privileged,
// its own image store: the test image built three more times and three
// more dockerds' memory) beside the machine's, where the soak must share
// two cores with the other suites. A process with a private engine of its
// own has everything the faults need: its engine can be killed and
// restarted without touching anyone else's, its disk filled, and its links
// cut. What a container's own network would give, a partition of that one
// agent, the kernel gives instead: each agent runs as root with a group id
// of its own, its TCP connections are marked by that group (an iptables
// mangle rule), and a partition drops every packet of a marked connection
// both ways (partition_test.go). Proxies alone cannot cut one agent off:
// it learns the replicas' advertised addresses and would go round them.
//
// # The workload
//
// Tasks of many kinds at once, from a seeded random stream, at most eight
// followed at a time: `podium run` through the CLI (which must exit with
// the task's state), short and long tasks, output floods of megabytes,
// artifacts of random bytes, tasks that wait for two inbox messages, tasks
// cancelled at a random moment, tasks retried on their exit code,
// concurrency keys with limits 1 and 2, a schedule firing every minute,
// and tasks of three groups under fair share. Every task prints through
// tee and ends its output with "sha256 HEX", its own checksum of what it
// printed.
//
// # The nemesis
//
// One fault at a time, at a random moment, healed after a random while
// (SOAK_FAULTS selects kinds; every kind by default): replica-kill,
// replica-restart, leader-kill, agent-kill, agent-restart, agent-partition
// (the agent's own connections black-holed), agent-freeze (SIGSTOP, a hung
// agent: its containers run on, it cannot fence them), engine-restart (a
// private engine stopped with SIGTERM or SIGKILL, then started),
// pg-partition, node-partition and replica-partition (one replica cut off
// from Postgres, from its nodes, or both), pg-restart (the primary stopped
// fast or immediate, then started), pg-standby-down, pg-failover (once:
// the primary quits, the standby is promoted), s3-stop, disk-full (an
// agent's data disk filled for real) and drain.
//
// # The invariants
//
// Once the faults are healed and every task has had time to end, the run
// fails on any of:
//
//   - a task the coordinator accepted that is not in a terminal state, or
//     whose final attempt reached one more than once, or whose log's final
//     status differs from its state; `podium run` that did not exit with
//     its task's state;
//   - two attempts of one task running at the same instant, by the start
//     and die events of every engine (Docker's event stream, labelled by
//     Podium, resubscribed with since after an engine restart);
//   - more attempts than max_attempts (in the task and in the engines); a
//     task both lost and succeeded;
//   - an attempt's stored stdout that is not byte-exact against the task's
//     own checksum, or not what the task prints (a prefix, for an attempt
//     cut short); output repeated or skipped (chunk offsets); a node event
//     stored twice;
//   - an artifact whose bytes do not match its SHA-256, or the one its
//     task computed;
//   - more containers of a concurrency key running at once than its limit;
//     an attempt assigned to a node while it was drained;
//   - anything of a node left in its engine, an attempt left open on an
//     ended task, a node not back online, a process that died on its own.
//
// The run prints the faults injected, the tasks run, the violations and
// the seed; SOAK_SEED=N replays the same choices (what they meet still
// depends on timing).
package soak
