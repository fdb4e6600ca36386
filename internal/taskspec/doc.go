// Package taskspec reads, checks and describes the task spec: what a user asks
// Podium to run. It is shared by the CLI, which checks a spec before sending
// it so that a typo costs no round trip, and by the coordinator, which checks
// every spec it is given because not every client is the CLI. One set of rules
// in one place means the two can never disagree about what is valid.
//
// # The spec file
//
// A spec file is one YAML mapping. Every key is optional except image, and an
// unknown key is an error (naming the key, its line and the keys allowed
// there) rather than being ignored: a misspelt "memroy_mb" silently dropped
// would run the task without the limit the user believes it has. This holds
// at every level, inside resources, sidecars and readiness too. Duplicate
// keys, values of the wrong type, fractions where a whole number belongs, an
// empty list item (which YAML would otherwise drop without a word) and a
// second YAML document ("---") are errors as well. examples/ at the top of
// the repository holds complete spec files, each parsed and validated by this
// package's tests.
//
//	name: deploy-web                 # what lists show and --name filters on; not unique
//	image: alpine:3                  # required: the container image to run
//	command: [sh, -c, 'echo hi']     # replaces the image's entrypoint and cmd
//	env:                             # environment variables of the container
//	  GREETING: hello
//	working_dir: /workspace          # absolute path inside the container
//	labels: [linux, gpu=a100]        # a node must carry every one to be given the task
//	resources:                       # limits; 0 or absent means the node's default
//	  cpu: 0.5                       # cores, fractions allowed
//	  memory_mb: 512                 # MiB
//	  pids: 256                      # processes and threads
//	  gpus: 1                        # whole GPUs, each the task's alone; 0 or absent: none
//	  gpu_model: "NVIDIA H100*"      # glob on the GPU's name (nvidia-smi's); absent: any
//	  gpu_memory_mb: 81920           # least MiB each GPU must have; absent: any
//	timeout: 10m                     # from container start; 0 or absent: the node's default
//	queue_timeout: 30m               # fail if still queued this long (see below); 0 or absent: the coordinator's --queue-timeout
//	user: "1000:1000"                # UID, UID:GID or a name; absent: the node's default
//	priority: 10                     # any 32-bit integer, may be negative; higher runs first
//	max_attempts: 3                  # the most attempts in all, the first included; 0 means 1 (see Retries)
//	retry_on_node_loss: true         # requeue when the task's node is lost
//	retry:                           # run the task again when an attempt fails (see Retries)
//	  attempts: 3                    # the most attempts in all: the same number as max_attempts
//	  on_exit_codes: [1, 137]        # retried exit codes, 1 to 255; absent (and no on_oom): any non-zero code
//	  on_oom: true                   # retry an out-of-memory kill
//	  backoff: 10s                   # wait before the second attempt, 1s to 1h; absent: 10s
//	  max_backoff: 5m                # the wait doubles each attempt up to this, at most 1h; absent: 5m
//	cancel_grace: 30s                # SIGTERM to SIGKILL on cancel; 0 means 30 s
//	output_limit: 100MiB             # bytes of output kept per attempt (see below); 0 means the node's default
//	capabilities: [NET_BIND_SERVICE] # Linux capabilities added back (see below)
//	artifacts:                       # files uploaded when the task exits (see below)
//	  - dist/*.tar.gz                # globs relative to /workspace
//	  - "**/junit.xml"               # quote one that starts with *
//	  - .podium/artifacts/**         # the default, kept when widening
//	allow_egress: [192.0.2.10/32]    # ranges the node blocks that the task must reach (see below)
//	pull: if-not-present             # or always, never; absent: always for :latest or no tag, else if-not-present
//	retain: 7d                       # how long the task is kept after it ends (see below); absent: the coordinator's --retain-tasks
//	concurrency:                     # at most limit tasks of the key active at once, fleet-wide
//	  key: deploy-prod               # required: letters, digits and . _ - / : ; 128 bytes
//	  limit: 1                       # 1 to 1000; 0 or absent: 1
//	  on_conflict: queue             # or cancel_older, cancel_newer; absent: queue
//	group: ml-sweeps                 # who it shares slots as (fair share, see below); absent: its submitter
//	notify:                          # POST an event here when the task ends (see Notify), at most 4
//	  - url: https://ci.example.com/hook  # http or https, 2048 bytes, no user:password@
//	    events: [task.finished]      # and/or task.lost; absent: both
//	    secret: ci-hook-key          # a stored secret that signs the event; absent: unsigned
//	secrets:                         # stored secrets (podium secret set) the task receives (see below)
//	  - {name: db-password, env: PGPASSWORD}   # as a variable
//	  - {name: deploy-key, file: deploy.pem}   # as the file /run/secrets/deploy.pem
//	  - name: api-token              # neither: the variable API_TOKEN
//	sidecars:                        # helper containers beside the task (see below)
//	  - name: db                     # required: the host name the task reaches it by
//	    image: postgres:16           # required: the sidecar's container image
//	    pull: always                 # the sidecar image's pull policy, as the task's
//	    # command, like the task's, replaces the image's entrypoint and cmd
//	    command: [docker-entrypoint.sh, postgres, -c, fsync=off]
//	    env:                         # environment variables of the sidecar
//	      POSTGRES_PASSWORD: test
//	    resources:                   # as the task's; counted with the task's on its node
//	      cpu: 1
//	      memory_mb: 256
//	      pids: 100
//	    readiness:                   # optional; at most one of tcp_port, http_path, command
//	      tcp_port: 5432             # ready when the port accepts a connection
//	      # http_path: /healthz      # or: ready when GET http_path on http_port answers 2xx
//	      # http_port: 8080          #     (http_path and http_port go together)
//	      # command: [pg_isready]    # or: ready when this exits 0 inside the sidecar
//	      timeout: 60s               # how long to wait for it; 0 or absent means 60 s
//	    # privileged: true           # a privileged container, for Docker-in-Docker (see below)
//	    # share_workspace: true      # the task's /workspace mounted in the sidecar too
//	read_only: true                  # the root filesystem is read-only (see below)
//	shm_size: 1GiB                   # size of /dev/shm; absent: the engine's 64 MiB
//	ulimits:                         # resource limits of the task's processes (see below)
//	  nofile: 65536                  # soft and hard alike
//	  memlock: unlimited
//	  core: {soft: 0, hard: unlimited}
//	tmpfs:                           # memory-backed directories (see below)
//	  - path: /cache                 # required: absolute, not over /workspace
//	    size: 512MiB                 # absent: 64 MiB
//	    exec: true                   # programs may run from it; absent: noexec
//
// Durations (timeout, queue_timeout, cancel_grace, a readiness timeout) are Go duration
// strings such as "90s", "10m" or "1h30m", must be a whole number of
// seconds, and at most 8760h (a year, MaxDuration). A bare number is rejected rather than read as seconds: "timeout:
// 10" is as likely to mean ten minutes as ten seconds, and guessing wrong
// either kills a task early or lets a hung one run for hours. The API carries
// them as timeout_seconds, queue_timeout_seconds, cancel_grace_seconds and
// readiness.timeout_seconds.
//
// queue_timeout bounds how long the task waits queued for a node, counted
// each time it is queued: from its submit, from a requeue (its node lost,
// an assignment not accepted), or from the end of its retry's backoff. A
// task still queued when it passes fails, its reason saying how long it
// waited and why it was waiting ("waited 30m0s in the queue without a node
// (queue_timeout); the last reason: cannot run on any node: ..."), and
// podium run exits 125. Left out or 0, the coordinator's --queue-timeout
// applies as the task is submitted (none unless its operator set one).
// Whatever the timeout, a task that no enrolled node could ever run (its
// labels, a node's limits, its GPUs or its size) is marked unschedulable
// and its reason starts "cannot run on any node", unlike one that waits for
// room, a slot or a node to come back.
//
// retain replaces the coordinator's --retain-tasks for this task: once it has
// ended that long ago, the task, its log and its artifacts are removed, and
// reading it says when it expired. The coordinator's --retain-logs and
// --retain-artifacts still remove the log and artifacts earlier when they
// are shorter. It takes days ("7d") and years ("1y", 365 days) as well as Go
// durations ("36h"), from 1h to 10y (MinRetain, MaxRetain); the API carries
// it as retain_seconds.
//
// group names who the task counts as for fair share: among queued tasks of
// equal priority the scheduler shares free slots between groups, and between
// submitters for tasks without one, so a team's sweep submitted by several
// people counts once. It is letters, digits and . _ / -, at most 64 bytes
// (MaxGroupBytes).
//
// Environment keys may be any printable ASCII except "=" (Kubernetes' relaxed
// rule: Java and .NET settings use dots and dashes, and Docker passes such
// names through unchanged). Labels are "key" or "key=value", each part made of
// letters, digits and . _ / -.
//
// # Limits
//
// A team shares the coordinator and the nodes, and every spec is stored,
// listed and sent to a node whole, so each part of one has a bound. Past it
// the spec is refused with the field named, by the CLI before sending and
// by the coordinator whatever the client (the constants in limits.go):
//
//	the whole spec, encoded as protobuf    256 KiB (MaxSpecBytes)
//	env, per mapping                       256 variables, each name at most
//	                                       256 bytes, each value 32 KiB
//	labels                                 64, each at most 128 bytes
//	sidecars                               8
//	command (the task's, a sidecar's, a    64 KiB in all, its arguments'
//	readiness check's)                     bytes added up; no one argument
//	                                       over 131071 bytes (the kernel's
//	                                       MAX_ARG_STRLEN less the NUL)
//	timeout, queue_timeout, cancel_grace,  8760h, a year
//	readiness timeout
//	retain                                 1h to 10y
//	group                                  64 bytes
//	resources                              cpu 65536 cores, memory_mb 2^30
//	                                       (a PiB), pids 4194304 (the
//	                                       kernel's PID_MAX_LIMIT)
//	resources.gpus, gpu_model,             64 GPUs; a glob of 128 bytes
//	gpu_memory_mb                          without "/"; 16 TiB in MiB; the
//	                                       last two only with gpus, and
//	                                       none of them on a sidecar
//	working_dir                            4095 bytes (PATH_MAX)
//	name                                   128 bytes of letters, digits and
//	                                       . _ - : / +, from a letter or digit
//	a cancel's reason                      1 KiB (MaxCancelReasonBytes)
//	max_attempts, retry.attempts           100 (MaxAttempts)
//	retry.on_exit_codes                    64 codes, each 1 to 255
//	retry.backoff, retry.max_backoff       1s to 1h
//	shm_size, each tmpfs size              4 KiB to 1 TiB (MinMountBytes,
//	                                       MaxMountBytes)
//	tmpfs                                  16 mounts (MaxTmpfs)
//	concurrency.key, concurrency.limit     128 bytes of letters, digits and
//	                                       . _ - / : ; 1 to 1000
//	ulimits                                one per name, each within its
//	                                       name's bound (AllowedUlimits)
//
// Every string must be valid UTF-8, and the image must be a Docker image
// reference as "docker pull" takes it (lower-case repository, optional
// registry, tag and digest): "BusyBox:Latest", "--help" or a name with a
// ";" in it is refused rather than failing on the node. A spec carrying a
// field the coordinator does not know (from a newer client) is refused, not
// stored without it; so is an unknown key in a JSON request to the API.
//
// In a spec file, no mapping may have more than 256 keys (the most env can
// have); a larger one is refused before it is decoded, because yaml.v3
// checks each key of a mapping against every other, and a file of 100,000
// env keys took almost a minute. At most 20 problems are listed.
//
// Nodes hold the same bounds when they turn seconds into a time.Duration
// (Seconds clamps to MaxDuration), so a spec stored before the bound
// existed cannot wrap a timeout around to nothing.
//
// output_limit caps the output stored for one attempt: the task's stdout and
// stderr together with its sidecars' lines. Past it the rest of the attempt's
// output is dropped, one note in the log says so, and the task runs on. It is
// a number of bytes or a size with a unit, "100MiB" or "1GiB" (powers of
// 1024) or "500MB" (powers of 1000); the API carries it as
// output_limit_bytes. 0 or absent means the node's default (1 GiB unless its
// operator set another), and a task asking for more than a node's maximum is
// not placed on that node.
//
// # Sidecars
//
// A sidecar is a container started before the task on the task's own private
// network (a database, a service under test). The task reaches it by its name
// as a host name ("psql -h db"). A name is a DNS label: 1 to 63 lower-case
// letters, digits and '-', neither starting nor ending with '-'; names are
// unique within a spec, and "task" (TaskHostName) is reserved for the task's
// own container. A sidecar's resources count against its node together with
// the task's when the task is placed.
//
// The task is started once every sidecar is ready. Without readiness (or
// with an empty one) a sidecar is ready as soon as its container has started.
// With it, the sidecar is ready when its one check passes: tcp_port (1 to
// 65535) accepts a connection; an HTTP GET of http_path (which starts with
// '/') on http_port answers 2xx; or command, run inside the sidecar, exits 0.
// Giving two checks, http_path without http_port or the reverse, or a timeout
// without a check is an error. The timeout bounds the wait; 0 means 60 s.
//
// # Limits and user
//
// Every task runs under limits. A resource left out or 0 takes its node's
// default (podium-agent --default-cpu, --default-memory, --default-pids,
// --default-timeout), and a node never takes a task asking for more than its
// maximum (--max-cpu, --max-memory, --max-pids, --max-timeout): the
// scheduler keeps the task queued, saying which limit no node allows, until
// a node that allows it connects. A task's memory, CPU and pids are counted
// with its sidecars' against a node's maximum, as they are against its room.
//
// user is who the task's command runs as: a UID ("1000"), a UID:GID pair
// ("1000:1000") or a user name the image knows ("nobody"). Left out, the
// node's --default-user applies, or the image's own user if the node sets
// none. The task's workspace, artifacts directory and inbox are writable
// whatever the user. Sidecars run as their images say.
//
// # Container options
//
// read_only: true mounts the task container's root filesystem read-only, so
// the task cannot change its image's files (or leave anything behind in
// them). /workspace, Podium's own mounts and every tmpfs stay writable, and
// /tmp becomes a tmpfs of DefaultTmpfsBytes (64 MiB), unless tmpfs names /tmp
// itself with the size the task needs.
//
// shm_size is the size of /dev/shm, which PyTorch's data loaders and
// browsers fill: a size as output_limit takes it ("1GiB"), or bytes. The API
// carries it as shm_size_bytes; 0 or absent is the engine's 64 MiB.
//
// ulimits maps a limit's name to one value for both its soft and hard limit
// ("nofile: 65536"), to "unlimited", or to {soft: N, hard: N} (hard at
// least soft). The names are those of AllowedUlimits: core, cpu, data,
// fsize, locks, memlock, msgqueue, nofile, nproc, sigpending and stack; the
// ones that raise scheduling priority (rtprio, nice, rttime) are refused.
// A hard limit above the Docker engine's own is granted only by an engine
// that holds CAP_SYS_RESOURCE (an ordinary one does; one run inside a
// restricted container may not, and the task then fails to start, saying
// so). The API carries them as a list of {name, soft, hard}, -1 meaning
// unlimited. nproc counts the processes of the task's user on the whole
// node; resources.pids is the task's own bound.
//
// tmpfs lists memory-backed directories: path (absolute and clean; not /,
// not at, under or over /workspace, /podium, /run/podium or /run/secrets,
// which Podium mounts itself, nor under /proc, /sys or /dev; /dev/shm is
// shm_size's), size (as shm_size; absent: 64 MiB) and exec (absent: mounted
// noexec). Their pages, like /dev/shm's, count against the task's memory
// limit. At most MaxTmpfs, no path at or within another's.
//
// These options apply to the task's container only. A sidecar may ask for
// two things an ordinary container does not get: share_workspace mounts the
// task's workspace volume at /workspace in the sidecar as well, and
// privileged: true runs the sidecar privileged: every capability, every
// device, no seccomp or AppArmor profile, which is root on the node. It is
// for Docker-in-Docker (a docker:dind sidecar the task builds images
// against over its private network). Such a task is placed only on a node
// whose agent runs with --allow-privileged-sidecars, and waits, saying so,
// while none is connected; a node without the flag refuses it whatever the
// coordinator says. The task's own container is never privileged.
//
// # Capabilities
//
// The task's container runs with every Linux capability dropped.
// capabilities adds some back, and only from AllowedCapabilities, which is
// Docker's default set less SETFCAP:
//
//	AUDIT_WRITE  CHOWN  DAC_OVERRIDE  FOWNER  FSETID  KILL  MKNOD
//	NET_BIND_SERVICE  NET_RAW  SETGID  SETPCAP  SETUID  SYS_CHROOT
//
// A name may be written in any case, with or without "CAP_" ("cap_chown",
// "CHOWN"). Validate rewrites each to its canonical form (upper case, no
// prefix) and drops repeats, so the stored spec holds canonical names only.
// Anything else (SYS_ADMIN, NET_ADMIN, ALL, ...) is refused, naming the
// capability and the allowed list. The list applies to the task's container
// only.
//
// # Artifacts
//
// A task's artifacts are files it leaves in /workspace, uploaded by its node
// when its container exits. artifacts says which: a list of at most
// MaxArtifactGlobs patterns, each relative to /workspace and "/"-separated,
// in which *, ? and [...] match within one path segment (dot files
// included) and a segment that is exactly ** matches any number of segments
// (package internal/glob). Left out or empty, it is [DefaultArtifactGlob]:
// everything under /workspace/.podium/artifacts. A list narrows that
// (".podium/artifacts/*.xml") or widens it ("dist/*.tar.gz"); a list that
// widens it and still wants the directory's files names it too.
//
// A file under /workspace/.podium/artifacts is named by its path relative to
// that directory ("reports/junit.xml"), as it always was; any other file by
// its path relative to /workspace ("dist/app.tar.gz"). When both give the
// same name, the file from .podium/artifacts wins. Files published with
// `podium-runner artifact add` are uploaded whatever the patterns say:
// publishing a file is asking for it. Only regular files are uploaded;
// symbolic links and the like are skipped with a note in the task's log.
//
// A pattern's leading segments without wildcards ("dist" of
// "dist/*.tar.gz") are the directory the node reads to find its matches, so
// "**/*.xml" reads the whole workspace and "reports/**/*.xml" only
// reports/. A pattern whose directory does not exist matches nothing, which
// is no error. A pattern that is empty, absolute, has an empty, "." or ".."
// segment, has ** inside a segment or is not a valid glob (an unclosed "[")
// is refused. In YAML a value that starts with "*" must be quoted: *name is
// an alias there.
//
// # Egress
//
// A node refuses every task connections to link-local addresses
// (169.254.0.0/16, where clouds answer metadata requests with the machine's
// credentials, and fe80::/10), to its own addresses (the coordinator's port,
// Docker's bridge gateways, anything listening on the host) and to the
// tailnet (100.64.0.0/10, fd7a:115c:a1e0::/48). Everything else, the
// internet included, is reachable as with plain Docker. allow_egress lists
// ranges of those the task must reach anyway, at most MaxAllowEgress of
// them: a CIDR ("10.20.0.0/16", "fd00::/8") or one address ("192.0.2.10",
// meaning /32). A range with bits set past its length ("10.0.0.1/8") is
// refused, not rounded. The task is only placed on a node whose operator
// permits every range listed (podium-agent --permit-egress); the agent
// checks again and refuses the task if it does not.
//
// # Secrets
//
// secrets names stored secrets (`podium secret set NAME`), at most
// MaxSecrets of them: name is the secret's (DNS-style: lower-case letters,
// digits and '-', at most 63 bytes), env the variable the task reads it from
// ([A-Za-z_][A-Za-z0-9_]*, not also in env), file a plain file name under
// /run/secrets (letters, digits and . _ -, not starting with '.'). One with
// neither gets the variable DefaultSecretEnv(name): db-password becomes
// DB_PASSWORD. Only the names are stored with the task; the coordinator
// resolves the values into the node's assignment, and refuses a task naming
// a secret that does not exist.
//
// # Notify
//
// notify lists one-off webhooks for this task, at most MaxNotify: url is an
// http or https URL (no user:password@, at most MaxNotifyURLBytes), events
// the ones to send (task.finished, task.lost; both when left out), secret
// the stored secret whose value signs the event (unsigned without one). The
// coordinator refuses a spec naming a secret that is not stored, as for
// secrets, and at delivery refuses private, loopback and link-local
// addresses unless its operator allows them (docs/webhooks.md).
//
// # Retries
//
// Every run of a task is an attempt, numbered from 1 in the task's log and in
// `podium task get`, whatever started it. max_attempts is the most attempts
// a task gets in all, the first included, whatever starts the next one: its
// node lost under retry_on_node_loss, an assignment its node never took, or
// a failure under retry. retry.attempts is the same number, written where
// the retry rule is: give either, or both when they agree (a spec giving two
// different numbers is refused). Validate writes it into both, so the stored
// spec holds it twice and the two can never be read to mean different things.
// With retry: {attempts: 3} a task runs at most three times, and a node lost
// during the second attempt uses up the third.
//
// retry says which failed attempts are followed by another: on_exit_codes
// lists exit codes (1 to 255, each once, at most 64) and on_oom an
// out-of-memory kill; with neither, every non-zero exit code. An exit code
// matches whatever caused it (137 is also what an out-of-memory kill exits
// with). Never retried: a success, a cancel, a timeout, and a failure
// without an exit code (the image could not be pulled, the node's engine
// went away: the node's trouble, not the task's; retry_on_node_loss covers a
// lost node, and an attempt its node failed for a full disk, reason "node
// disk full", which comes back after a second rather than a backoff). The next attempt waits backoff (1s to 1h, absent 10s) after
// the failed one ended, twice that before the attempt after, and so on up to
// max_backoff (at most 1h, absent 5m or the backoff if longer), plus a
// jitter of up to a tenth more so that tasks failing together do not come
// back together. The task waits queued, its log saying "attempt 2 of 3
// after exit code 1, in 10 s", and a cancel then ends it at once. The API
// carries the backoffs as backoff_seconds and max_backoff_seconds. The task
// reads which attempt it is from $PODIUM_ATTEMPT ($PODIUM_TASK_ID is its
// id), which the node sets over any value env gives them.
//
// # Errors
//
// Validate returns a *FieldError naming the offending field by its API name
// ("spec.resources.memory_mb") so the coordinator can return it as
// connect.CodeInvalidArgument and any client can show it unchanged. Parse
// reports the line of the spec file instead, because that is where the user
// has to look.
package taskspec
