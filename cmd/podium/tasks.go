package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podiumhq/podium/internal/ids"
	"github.com/podiumhq/podium/internal/statusline"
	"github.com/podiumhq/podium/internal/taskspec"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

var tasksCommand = &command{
	name:     "tasks",
	synopsis: "[--json] [--state STATE]... [--mine | --user NAME] [--name NAME] [--label L] [--node NODE] [--since WHEN] [--limit N] [--after ID]",
	summary:  "List tasks, newest first.",
	detail: `
--mine lists only the tasks you submitted, --user NAME those NAME submitted
(a user name or a Tailscale login, as the REQUESTED BY of "podium task get").
--name NAME those named NAME exactly (podium run --name, or name: in the
spec; names are not unique), --label L those whose spec has the label L exactly ("gpu", "team=ml"), --node
NODE those placed on NODE (their latest attempt), --since WHEN those created
since WHEN: a duration back from now ("2h", "3d") or a time (2026-12-01T09:00:00Z,
or a local date 2026-12-01). The filters combine: a task must match all of them.

The order is stable (created, then ID, newest first), so a long list is read
a page at a time: --limit N (1 to 1000, default 100) tasks, then --after the
last ID printed for the next page; a page shorter than N is the last.

Someone else's tasks are listed without their env values unless you are an
admin. Prints a table of ID, NAME, STATE, IMAGE, NODE, AGE and REASON, or with --json one
JSON array of the tasks (the --json form of every command: field names as in
the .proto files, e.g. "exit_code"; states as --state takes them, "failed";
numbers as numbers; times in RFC 3339).`,
	usageExit: exitUsage,
	run:       runTasks,
}

// maxListLimit is the coordinator's bound on one page of tasks
// (coordinator/tasks.MaxListLimit), checked here so a bad --limit sends
// nothing.
const maxListLimit = 1000

// maxUserBytes is the coordinator's bound on a user name or login
// (coordinator/access.MaxNameBytes).
const maxUserBytes = 128

func runTasks(ctx context.Context, c *cli, cmd *command, args []string) int {
	fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print a JSON array instead of a table")
	var stateFlags stringList
	fs.Var(&stateFlags, "state", "only tasks in this `STATE`: "+strings.Join(stateNames(), ", ")+" (repeatable, or comma-separated)")
	limit := fs.Int("limit", 100, fmt.Sprintf("list at most `N` tasks, 1 to %d", maxListLimit))
	mine := fs.Bool("mine", false, "only the tasks you submitted")
	user := fs.String("user", "", "only the tasks `NAME` submitted")
	name := fs.String("name", "", "only tasks named `NAME` (exactly)")
	label := fs.String("label", "", "only tasks whose spec has the label `L` (key or key=value)")
	node := fs.String("node", "", "only tasks placed on `NODE` (an ID from podium nodes)")
	since := fs.String("since", "", "only tasks created since `WHEN`: a duration back from now (2h, 3d) or a time (RFC 3339, or a local date)")
	after := fs.String("after", "", "the next page: only tasks after task `ID` in the list's order (the last ID of the previous page)")
	rest, done, code := c.parseFlags(cmd, fs, args)
	if done {
		return code
	}
	if len(rest) > 0 {
		return c.usageFailure(cmd, fs, fmt.Errorf("unexpected argument %q", rest[0]))
	}
	req, err := listRequest(stateFlags, *limit, *mine, *user, *label, *node, *since, *after, time.Now())
	if err == nil && *name != "" {
		if !taskspec.ValidName(*name) {
			err = fmt.Errorf("--name %q is not a task name: names use letters, digits and . _ - : / +, at most %d bytes", clip(*name), taskspec.MaxNameBytes)
		}
		req.Name = *name
	}
	if err != nil {
		return c.usageFailure(cmd, fs, err)
	}
	cl, code, ok := c.dial(cmd)
	if !ok {
		return code
	}
	resp, err := unary(ctx, cl, func(ctx context.Context, e *endpoint) (*connect.Response[podiumv1.ListResponse], error) {
		return e.tasks.List(ctx, connect.NewRequest(req))
	})
	if err != nil {
		return c.failed(cl, err, "")
	}
	tasks := resp.Msg.GetTasks()
	if *asJSON {
		return writeJSONList(c, tasks)
	}
	writeTaskTable(c.stdout, tasks, time.Now())
	return exitOK
}

// listRequest checks podium tasks' filters as the coordinator will, naming
// the flag at fault, so that a bad one sends nothing.
func listRequest(stateFlags []string, limit int, mine bool, user, label, node, since, after string, now time.Time) (*podiumv1.ListRequest, error) {
	states, err := parseStates(stateFlags)
	if err != nil {
		return nil, err
	}
	if limit < 1 || limit > maxListLimit {
		return nil, fmt.Errorf("--limit %d: give 1 to %d, and read further pages with --after", limit, maxListLimit)
	}
	if mine && user != "" {
		return nil, errors.New("--mine and --user ask for different people: give one")
	}
	if len(user) > maxUserBytes {
		return nil, fmt.Errorf("--user: %d bytes is more than %d: give a user name or a login", len(user), maxUserBytes)
	}
	if label != "" {
		if p := taskspec.LabelProblem(label); p != "" {
			return nil, fmt.Errorf("--label: %s", p)
		}
	}
	if node != "" && !ids.Valid("node", node) {
		return nil, fmt.Errorf("--node %q is not a node ID: give one as podium nodes shows it (node_…)", clip(node))
	}
	if after != "" && !ids.Valid("task", after) {
		return nil, fmt.Errorf("--after %q is not a task ID: give the last ID of the previous page (task_…)", clip(after))
	}
	req := &podiumv1.ListRequest{States: states, Limit: int32(limit), Mine: mine, RequestedBy: user,
		Label: label, Node: node, After: after}
	if since != "" {
		t, err := parseListSince(since, now)
		if err != nil {
			return nil, err
		}
		req.Since = timestamppb.New(t)
	}
	return req, nil
}

// parseListSince reads podium tasks' --since: a duration back from now
// ("2h", "3d", as retain takes them) or a time as podium audit takes it (RFC
// 3339, or a local date or date and time). A time in the future is refused:
// it would list nothing, and is a mistake of zone or sign.
func parseListSince(s string, now time.Time) (time.Time, error) {
	t, err := parseSince(s, now)
	if err != nil {
		d, derr := taskspec.ParseLongDuration(s)
		if derr != nil {
			return time.Time{}, fmt.Errorf("--since %q: give a duration back from now (2h, 3d) or a time (2026-12-01T09:00:00Z, or 2026-12-01)", clip(s))
		}
		t = now.Add(-d)
	}
	if t.After(now) {
		return time.Time{}, fmt.Errorf("--since %s is in the future: give a time in the past, or a duration back from now (2h)", t.Format(time.RFC3339))
	}
	return t, nil
}

// clip shortens a refused value for an error message.
func clip(s string) string {
	if r := []rune(s); len(r) > 64 {
		return string(r[:64]) + "…"
	}
	return s
}

func writeTaskTable(w io.Writer, tasks []*podiumv1.Task, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tSTATE\tIMAGE\tNODE\tAGE\tREASON")
	for _, t := range tasks {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
			t.GetId(), dash(t.GetSpec().GetName()), statusline.State(t.GetState()), dash(t.GetSpec().GetImage()), dash(t.GetNodeId()),
			age(t.GetCreatedAt(), now), dash(oneLine(t.GetReason(), 60)))
	}
	tw.Flush()
}

func stateNames() []string {
	var names []string
	for s := podiumv1.TaskState_TASK_STATE_QUEUED; s <= podiumv1.TaskState_TASK_STATE_LOST; s++ {
		names = append(names, statusline.State(s))
	}
	return names
}

// parseStates reads --state values, each one name or a comma-separated list.
func parseStates(values []string) ([]podiumv1.TaskState, error) {
	var states []podiumv1.TaskState
	for _, v := range values {
		for name := range strings.SplitSeq(v, ",") {
			name = strings.TrimSpace(name)
			n, ok := podiumv1.TaskState_value["TASK_STATE_"+strings.ToUpper(name)]
			if !ok || n == 0 {
				return nil, fmt.Errorf("--state %q: want one of %s", name, strings.Join(stateNames(), ", "))
			}
			if s := podiumv1.TaskState(n); !slices.Contains(states, s) {
				states = append(states, s)
			}
		}
	}
	return states, nil
}

var taskGetCommand = &command{
	name:      "task get",
	synopsis:  "[--json] ID",
	summary:   "Show one task.",
	detail:    `Environment values are not shown in the human form (they often hold secrets); --json shows the task in full (field names as in the .proto files, states as --state takes them, numbers as numbers): with its env values only to the person who submitted it and to admins (env_hidden is true when they were taken out). Notify URLs, often credentials themselves, are likewise shown only to them: others see "(hidden)" (notify_hidden in --json).`,
	usageExit: exitUsage,
	run:       runTaskGet,
}

func runTaskGet(ctx context.Context, c *cli, cmd *command, args []string) int {
	fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print the task as JSON")
	id, cl, code, ok := c.taskCommand(cmd, fs, args)
	if !ok {
		return code
	}
	resp, err := unary(ctx, cl, func(ctx context.Context, e *endpoint) (*connect.Response[podiumv1.GetResponse], error) {
		return e.tasks.Get(ctx, connect.NewRequest(&podiumv1.GetRequest{Id: id}))
	})
	if err != nil {
		return c.failed(cl, err, fmt.Sprintf("no task %s", id))
	}
	if *asJSON {
		return c.writeJSON(resp.Msg.GetTask())
	}
	writeTask(c.stdout, resp.Msg.GetTask(), time.Now())
	return exitOK
}

// notifyText lists a task's notify targets: each URL and its events, or
// "(hidden)" where the API left the URL out (it is shown to the task's owner
// and to admins only, as it is often a credential itself).
func notifyText(ns []*podiumv1.Notify, hidden bool) string {
	parts := make([]string, 0, len(ns))
	for _, n := range ns {
		u := n.GetUrl()
		if u == "" && hidden {
			u = "(hidden)"
		}
		if ev := n.GetEvents(); len(ev) > 0 {
			u += " (" + strings.Join(ev, ", ") + ")"
		}
		parts = append(parts, u)
	}
	return strings.Join(parts, "; ")
}

// writeTask prints a task as "key: value" lines, leaving out what is unset.
func writeTask(w io.Writer, t *podiumv1.Task, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 8, 1, ' ', 0)
	line := func(key, value string) {
		if value != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", key, value)
		}
	}
	s := t.GetSpec()
	line("id", t.GetId())
	line("name", s.GetName())
	state := statusline.State(t.GetState())
	if t.GetUnschedulable() {
		// Queued, but not waiting for anything that comes by itself.
		state += ", unschedulable: no node could ever run it (see the reason)"
	}
	line("state", state)
	line("reason", t.GetReason())
	if t.ExitCode != nil {
		line("exit code", fmt.Sprint(*t.ExitCode))
	}
	if t.GetSignal() != 0 {
		line("signal", statusline.SignalName(t.GetSignal()))
	}
	line("node", t.GetNodeId())
	if a := t.GetAttempt(); a != 0 {
		if m := s.GetMaxAttempts(); m > 1 {
			line("attempt", fmt.Sprintf("%d of %d", a, m))
		} else {
			line("attempt", fmt.Sprint(a))
		}
	}
	if at := t.GetNextAttemptAt(); at != nil {
		line("next attempt", fmt.Sprintf("%s (in %s, after the retry's backoff)", at.AsTime().Local().Format(time.RFC3339),
			max(at.AsTime().Sub(now), 0).Round(time.Second)))
	}
	line("rerun of", t.GetRerunOf())
	line("schedule", t.GetScheduleId())
	line("image", s.GetImage())
	line("command", shellJoin(s.GetCommand()))
	if len(s.GetEnv()) > 0 {
		keys := make([]string, 0, len(s.GetEnv()))
		for k := range s.GetEnv() {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		line("env", strings.Join(keys, ", ")+" (values not shown)")
	}
	if refs := s.GetSecrets(); len(refs) > 0 {
		line("secrets", secretsText(refs))
	}
	line("notify", notifyText(s.GetNotify(), t.GetNotifyHidden()))
	line("working dir", s.GetWorkingDir())
	line("labels", strings.Join(s.GetLabels(), ", "))
	line("resources", resourcesText(s.GetResources()))
	line("timeout", secondsText(s.GetTimeoutSeconds()))
	line("queue timeout", queueTimeoutText(t, now))
	line("user", s.GetUser())
	if s.GetPriority() != 0 {
		line("priority", fmt.Sprint(s.GetPriority()))
	}
	if s.GetMaxAttempts() != 0 {
		line("max attempts", fmt.Sprint(s.GetMaxAttempts()))
	}
	if s.GetRetryOnNodeLoss() {
		line("retry on node loss", "yes")
	}
	line("retry", retryText(s.GetRetry()))
	if c := s.GetConcurrency(); c != nil {
		// The stored spec carries the defaults (taskspec fills them in).
		line("concurrency", fmt.Sprintf("key %s, limit %d, on conflict %s", c.GetKey(), c.GetLimit(), c.GetOnConflict()))
	}
	line("waits for", holdersText(t.GetConcurrencyHolders()))
	line("cancel grace", secondsText(s.GetCancelGraceSeconds()))
	line("container", containerOptionsText(s))
	line("privileged sidecars", strings.Join(privilegedSidecars(s), ", "))
	line("requested by", t.GetRequestedBy())
	line("created", timeText(t.GetCreatedAt(), now))
	line("started", timeText(t.GetStartedAt(), now))
	line("finished", timeText(t.GetFinishedAt(), now))
	line("usage", usageText(t.GetUsage()))
	line("log", logArchiveText(t.GetLogArchive()))
	if r := s.GetRetainSeconds(); r > 0 {
		line("retain", taskspec.FormatLong(time.Duration(r)*time.Second))
	}
	if at := t.GetLogExpiredAt(); at != nil {
		line("log", "expired by retention on "+expiryDay(at))
	}
	if at := t.GetArtifactsExpiredAt(); at != nil {
		line("artifacts", "expired by retention on "+expiryDay(at))
	}
	tw.Flush()
}

// queueTimeoutText says how long the task may wait queued and whose rule
// that is, and, while it waits, when it fails: "10m0s (queue_timeout); fails
// at 2026-… (in 9m12s) if still queued"; "" without one.
func queueTimeoutText(t *podiumv1.Task, now time.Time) string {
	secs := t.GetQueueTimeoutSeconds()
	if secs == 0 {
		return ""
	}
	text := secondsText(secs) + " (the coordinator's --queue-timeout)"
	if t.GetSpec().GetQueueTimeoutSeconds() != 0 {
		text = secondsText(secs) + " (queue_timeout)"
	}
	if at := t.GetQueueDeadline(); at != nil {
		text += fmt.Sprintf("; fails at %s (in %s) if still queued", at.AsTime().Local().Format(time.RFC3339),
			max(at.AsTime().Sub(now), 0).Round(time.Second))
	}
	return text
}

// holdersText says who holds the concurrency key a queued task waits for:
// "task_01J… (admin, running), …"; "" when nobody does.
func holdersText(hs []*podiumv1.ConcurrencyHolder) string {
	parts := make([]string, 0, len(hs))
	for _, h := range hs {
		parts = append(parts, fmt.Sprintf("%s (%s, %s)", h.GetTaskId(), cmp.Or(h.GetRequestedBy(), "-"), statusline.State(h.GetState())))
	}
	return strings.Join(parts, ", ")
}

// logArchiveText says where a task's archived log is: "archived 2026-… (12.3
// KiB zstd, sha256 …)"; "" when it is not archived. podium logs reads it the
// same either way.
func logArchiveText(a *podiumv1.LogArchive) string {
	if a == nil {
		return ""
	}
	when := "up to event " + fmt.Sprint(a.GetArchivedSeq()) + ", newer events not yet"
	if a.GetArchivedAt() != nil {
		when = a.GetArchivedAt().AsTime().Local().Format(time.RFC3339)
	}
	where := ""
	if a.GetInDatabase() {
		where = " in Postgres"
	}
	return fmt.Sprintf("archived%s %s (%s zstd, sha256 %s)", where, when, humanSize(a.GetSize()), a.GetSha256())
}

func resourcesText(r *podiumv1.Resources) string {
	var parts []string
	if r.GetCpu() != 0 {
		parts = append(parts, fmt.Sprintf("cpu %g", r.GetCpu()))
	}
	if r.GetMemoryMb() != 0 {
		parts = append(parts, fmt.Sprintf("memory %d MiB", r.GetMemoryMb()))
	}
	if r.GetPids() != 0 {
		parts = append(parts, fmt.Sprintf("pids %d", r.GetPids()))
	}
	if r.GetGpus() != 0 {
		g := fmt.Sprintf("gpus %d", r.GetGpus())
		if m := r.GetGpuModel(); m != "" {
			g += fmt.Sprintf(" matching %q", m)
		}
		if m := r.GetGpuMemoryMb(); m != 0 {
			g += fmt.Sprintf(" with at least %d MiB each", m)
		}
		parts = append(parts, g)
	}
	return strings.Join(parts, ", ")
}

func secondsText(s int64) string {
	if s == 0 {
		return ""
	}
	return (time.Duration(s) * time.Second).String()
}

// retryText words a retry policy for podium task get: "after exit code 1 or
// 137, or an out-of-memory kill; backoff 10s doubling to 5m0s".
func retryText(r *podiumv1.RetryPolicy) string {
	if r == nil {
		return ""
	}
	var when []string
	if codes := r.GetOnExitCodes(); len(codes) > 0 {
		words := make([]string, len(codes))
		for i, c := range codes {
			words[i] = fmt.Sprint(c)
		}
		when = append(when, "exit code "+strings.Join(words, " or "))
	}
	if r.GetOnOom() {
		when = append(when, "an out-of-memory kill")
	}
	if len(when) == 0 {
		when = append(when, "any non-zero exit code")
	}
	b, mb := taskspec.RetryBackoffs(r)
	return fmt.Sprintf("after %s; backoff %s doubling to %s", strings.Join(when, ", or "), b, mb)
}

var taskCancelCommand = &command{
	name:      "task cancel",
	synopsis:  "[--reason TEXT] ID",
	summary:   "Cancel a task: SIGTERM, then SIGKILL after its grace period.",
	usageExit: exitUsage,
	run:       runTaskCancel,
}

func runTaskCancel(ctx context.Context, c *cli, cmd *command, args []string) int {
	fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	reason := fs.String("reason", "", "`TEXT` saying why, shown in the task's log and state (default: cancelled from the podium CLI)")
	id, cl, code, ok := c.taskCommand(cmd, fs, args)
	if !ok {
		return code
	}
	if err := taskspec.CheckCancelReason("--reason", *reason); err != nil {
		return c.usageFailure(cmd, fs, err)
	}
	if *reason == "" {
		*reason = "cancelled from the podium CLI"
	}
	resp, err := unary(ctx, cl, func(ctx context.Context, e *endpoint) (*connect.Response[podiumv1.CancelResponse], error) {
		return e.tasks.Cancel(ctx, connect.NewRequest(&podiumv1.CancelRequest{Id: id, Reason: *reason}))
	})
	if err != nil {
		return c.failed(cl, err, fmt.Sprintf("no task %s", id))
	}
	t := resp.Msg.GetTask()
	switch st := t.GetState(); {
	case st == podiumv1.TaskState_TASK_STATE_CANCELLED:
		fmt.Fprintf(c.stdout, "task %s cancelled\n", id)
	case terminal(st):
		fmt.Fprintf(c.stdout, "task %s had already ended (%s); nothing to cancel\n", id, statusline.State(st))
	default:
		fmt.Fprintf(c.stdout, "task %s is being cancelled (follow it with: podium logs -f %s)\n", id, id)
	}
	return exitOK
}

var taskRerunCommand = &command{
	name:     "task rerun",
	synopsis: "ID",
	summary:  "Run a finished task again, as a new task.",
	detail: `
Submits a copy of a finished task (succeeded, failed, cancelled or lost): the
same spec, with the same secrets by name (their values as stored now), as a
new task of yours whose "rerun of" (podium task get) names the old one. Prints
the new task's id on stdout; follow it with podium logs -f ID. A task that has
not finished is refused: wait for it, or cancel it first. Members rerun their
own tasks; admins anyone's.`,
	usageExit: exitUsage,
	run:       runTaskRerun,
}

func runTaskRerun(ctx context.Context, c *cli, cmd *command, args []string) int {
	fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	id, cl, code, ok := c.taskCommand(cmd, fs, args)
	if !ok {
		return code
	}
	resp, err := unary(ctx, cl, func(ctx context.Context, e *endpoint) (*connect.Response[podiumv1.RerunResponse], error) {
		return e.tasks.Rerun(ctx, connect.NewRequest(&podiumv1.RerunRequest{Id: id}))
	})
	if err != nil {
		return c.failed(cl, err, fmt.Sprintf("no task %s", id))
	}
	nid := resp.Msg.GetTask().GetId()
	fmt.Fprintln(c.stdout, nid)
	fmt.Fprintf(c.stderr, "→ task %s submitted as a rerun of %s (follow it with: podium logs -f %s)\n", nid, id, nid)
	return exitOK
}

// writeJSON prints one message as a JSON object (scriptJSON's form).
func (c *cli) writeJSON(m proto.Message) int {
	b, err := scriptJSON(m)
	return c.emitJSON(b, err)
}

// writeJSONList prints messages as one JSON array ("[]" when there are none,
// never null, so that jq filters need no special case).
func writeJSONList[T proto.Message](c *cli, items []T) int {
	var raw bytes.Buffer
	raw.WriteByte('[')
	for i, m := range items {
		if i > 0 {
			raw.WriteByte(',')
		}
		b, err := scriptJSON(m)
		if err != nil {
			return c.emitJSON(nil, err)
		}
		raw.Write(b)
	}
	raw.WriteByte(']')
	return c.emitJSON(raw.Bytes(), nil)
}

func (c *cli) emitJSON(raw []byte, err error) int {
	var out bytes.Buffer
	if err == nil {
		// protojson's spacing is deliberately unstable; Indent fixes it.
		err = json.Indent(&out, raw, "", "  ")
	}
	if err != nil {
		fmt.Fprintf(c.stderr, "podium: encode JSON: %v\n", err)
		return exitPodium
	}
	out.WriteByte('\n')
	if _, err := c.stdout.Write(out.Bytes()); err != nil {
		fmt.Fprintf(c.stderr, "podium: write: %v\n", err)
		return exitPodium
	}
	return exitOK
}

// age is how long ago ts was, in the one unit that matters: 45s, 3m, 2h, 5d.
func age(ts *timestamppb.Timestamp, now time.Time) string {
	if ts == nil {
		return "-"
	}
	d := max(now.Sub(ts.AsTime()), 0)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d/time.Hour))
	}
	return fmt.Sprintf("%dd", int(d/(24*time.Hour)))
}

func timeText(ts *timestamppb.Timestamp, now time.Time) string {
	if ts == nil {
		return ""
	}
	return fmt.Sprintf("%s (%s ago)", ts.AsTime().Local().Format(time.RFC3339), age(ts, now))
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// oneLine keeps a table row on one line and within n runes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// shellJoin shows a command the way a shell would take it back.
func shellJoin(args []string) string {
	quoted := make([]string, len(args))
	for i, a := range args {
		if a != "" && strings.IndexFunc(a, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,+@%", r))
		}) < 0 {
			quoted[i] = a
		} else {
			quoted[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(quoted, " ")
}

// secretsText names a task's secrets and where it receives each, e.g.
// "db-password as $PGPASSWORD, deploy-key in /run/secrets/deploy.pem". The
// API has no values to show.
func secretsText(refs []*podiumv1.SecretRef) string {
	parts := make([]string, 0, len(refs))
	for _, r := range refs {
		var where []string
		if r.GetEnv() != "" {
			where = append(where, "as $"+r.GetEnv())
		}
		if r.GetFile() != "" {
			where = append(where, "in /run/secrets/"+r.GetFile())
		}
		parts = append(parts, r.GetName()+" "+strings.Join(where, " and "))
	}
	return strings.Join(parts, ", ")
}

// containerOptionsText is the spec's container options in a line
// ("read-only root, shm 1 GiB, ulimits nofile=65536, core=0:unlimited, tmpfs
// /cache 512 MiB exec"), "" when it sets none.
func containerOptionsText(s *podiumv1.TaskSpec) string {
	var parts []string
	if s.GetReadOnly() {
		parts = append(parts, "read-only root")
	}
	if n := s.GetShmSizeBytes(); n > 0 {
		parts = append(parts, "shm "+taskspec.FormatSize(n))
	}
	if uls := s.GetUlimits(); len(uls) > 0 {
		var us []string
		for _, u := range uls {
			v := ulimitText(u.GetSoft())
			if u.GetHard() != u.GetSoft() {
				v += ":" + ulimitText(u.GetHard())
			}
			us = append(us, u.GetName()+"="+v)
		}
		parts = append(parts, "ulimits "+strings.Join(us, ", "))
	}
	for _, m := range s.GetTmpfs() {
		size := m.GetSizeBytes()
		if size <= 0 {
			size = taskspec.DefaultTmpfsBytes
		}
		p := "tmpfs " + m.GetPath() + " " + taskspec.FormatSize(size)
		if m.GetExec() {
			p += " exec"
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, ", ")
}

func ulimitText(n int64) string {
	if n == taskspec.Unlimited {
		return "unlimited"
	}
	return fmt.Sprint(n)
}

// privilegedSidecars names the spec's sidecars that run privileged: what
// keeps the task off nodes without --allow-privileged-sidecars.
func privilegedSidecars(s *podiumv1.TaskSpec) []string {
	var names []string
	for _, sc := range s.GetSidecars() {
		if sc.GetPrivileged() {
			names = append(names, sc.GetName())
		}
	}
	return names
}
