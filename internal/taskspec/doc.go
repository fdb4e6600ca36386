// Package taskspec reads, checks and describes the task spec: what a user asks
// Podium to run. It is shared by the CLI, which checks a spec before sending
// it so that a typo costs no round trip, and by the coordinator, which checks
// every spec it is given because not every client is the CLI. One set of rules
// in one place means the two can never disagree about what is valid.
//
// # The spec file
//
// A spec file is one YAML mapping. Every key is optional except image, and an
// unknown key is an error (naming the key and its line) rather than being
// ignored: a misspelt "memroy_mb" silently dropped would run the task without
// the limit the user believes it has.
//
//	image: alpine:3                  # required: the container image to run
//	command: [sh, -c, 'echo hi']     # replaces the image's entrypoint and cmd
//	env:                             # environment variables of the container
//	  GREETING: hello
//	working_dir: /workspace          # absolute path inside the container
//	labels: [linux, gpu=a100]        # a node must carry every one to be given the task
//	resources:                       # limits; 0 or absent means no limit
//	  cpu: 0.5                       # cores, fractions allowed
//	  memory_mb: 512
//	  pids: 256
//	timeout: 10m                     # from container start; 0 or absent means none
//	priority: 10                     # any 32-bit integer, may be negative
//	max_attempts: 3                  # how often the task may be requeued; 0 means 1
//	retry_on_node_loss: true         # requeue when the task's node is lost
//	cancel_grace: 30s                # SIGTERM to SIGKILL on cancel; 0 means 30 s
//
// Durations (timeout, cancel_grace) are Go duration strings such as "90s",
// "10m" or "1h30m", and must be a whole number of seconds. A bare number is
// rejected rather than read as seconds: "timeout: 10" is as likely to mean ten
// minutes as ten seconds, and guessing wrong either kills a task early or lets
// a hung one run for hours. The API carries them as timeout_seconds and
// cancel_grace_seconds.
//
// Environment keys may be any printable ASCII except "=" (Kubernetes' relaxed
// rule: Java and .NET settings use dots and dashes, and Docker passes such
// names through unchanged). Labels are "key" or "key=value", each part made of
// letters, digits and . _ / -.
//
// # Errors
//
// Validate returns a *FieldError naming the offending field by its API name
// ("spec.resources.memory_mb") so the coordinator can return it as
// connect.CodeInvalidArgument and any client can show it unchanged. Parse
// reports the line of the spec file instead, because that is where the user
// has to look.
package taskspec
