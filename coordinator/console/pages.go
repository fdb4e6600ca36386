package console

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/podiumhq/podium/coordinator/access"
	"github.com/podiumhq/podium/coordinator/artifacts"
	"github.com/podiumhq/podium/coordinator/store"
	"github.com/podiumhq/podium/coordinator/tasks"
	"github.com/podiumhq/podium/internal/ids"
	"github.com/podiumhq/podium/internal/taskspec"
	"github.com/podiumhq/podium/internal/version"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/proto/podium/v1/podiumv1connect"
)

// states are the task states, in the order the filter offers them.
var states = []string{store.Queued, store.Scheduled, store.Provisioning, store.Running,
	store.Succeeded, store.Failed, store.Cancelled, store.Lost}

// badParam is the 400 page for a query parameter that is not valid.
func (c *Console) badParam(w http.ResponseWriter, r *http.Request, name, problem string) {
	c.fail(w, r, viewerFrom(r.Context()), http.StatusBadRequest, fmt.Sprintf("Query parameter %q: %s.", name, problem))
}

// clip shortens a refused value for a message.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// taskRow is one task in a list.
type taskRow struct {
	ID, Name, State, Why, Image, By, Node string
	Created                               time.Time
	Exit                                  string
}

func rowOf(t *podiumv1.Task) taskRow {
	row := taskRow{ID: t.GetId(), Name: t.GetSpec().GetName(), State: store.StateName(t.GetState()), Image: t.GetSpec().GetImage(),
		By: t.GetRequestedBy(), Node: t.GetNodeId(), Created: t.GetCreatedAt().AsTime()}
	if row.State == store.Queued {
		row.Why = t.GetReason()
	}
	if t.ExitCode != nil {
		row.Exit = strconv.Itoa(int(t.GetExitCode()))
	}
	return row
}

type tasksPage struct {
	State, User, Name, Label, Node string
	States                         []string
	Rows                           []taskRow
	// Next is the query of the next page, "" on the last.
	Next string
	// Live says the list refreshes itself (the first page only).
	Live bool
	// Query is the filters' query, which the live refresh fetches again.
	Query string
}

// listLimit is how many tasks a page of the list shows.
const listLimit = 100

// tasksPage lists tasks newest first, with the filters of podium tasks.
// With fragment=rows it answers only the table's rows, which the script
// fetches again every few seconds.
func (c *Console) tasksPage(w http.ResponseWriter, r *http.Request) {
	if !c.need(w, r, podiumv1connect.TaskServiceListProcedure) {
		return
	}
	q := r.URL.Query()
	for k := range q {
		if !slices.Contains([]string{"state", "user", "name", "label", "node", "after", "fragment"}, k) {
			c.badParam(w, r, k, "not a filter of this page (state, user, name, label, node, after)")
			return
		}
	}
	p := tasksPage{State: q.Get("state"), User: q.Get("user"), Name: q.Get("name"), Label: q.Get("label"), Node: q.Get("node"), States: states}
	req := &podiumv1.ListRequest{Limit: listLimit, RequestedBy: p.User, Name: p.Name, Label: p.Label, Node: p.Node, After: q.Get("after")}
	if p.State != "" {
		if !slices.Contains(states, p.State) {
			c.badParam(w, r, "state", fmt.Sprintf("%q is not a task state; want one of %s", clip(p.State), strings.Join(states, ", ")))
			return
		}
		req.States = []podiumv1.TaskState{store.StateProto(p.State)}
	}
	if p.User != "" {
		if err := access.CheckName(p.User); err != nil {
			c.badParam(w, r, "user", err.Error())
			return
		}
	}
	if p.Name != "" && !taskspec.ValidName(p.Name) {
		c.badParam(w, r, "name", fmt.Sprintf("%q is not a task name (letters, digits and . _ - : / +, at most %d bytes)", clip(p.Name), taskspec.MaxNameBytes))
		return
	}
	if p.Label != "" {
		if problem := taskspec.LabelProblem(p.Label); problem != "" {
			c.badParam(w, r, "label", problem)
			return
		}
	}
	if p.Node != "" && !ids.Valid("node", p.Node) {
		c.badParam(w, r, "node", fmt.Sprintf("%q is not a node id (node_ and 26 letters and digits, as the nodes page shows)", clip(p.Node)))
		return
	}
	if a := req.After; a != "" && !ids.Valid("task", a) {
		c.badParam(w, r, "after", fmt.Sprintf("%q is not a task id", clip(a)))
		return
	}
	if f := q.Get("fragment"); f != "" && f != "rows" {
		c.badParam(w, r, "fragment", "want rows, or leave it out")
		return
	}
	res, err := c.tasks.List(r.Context(), connect.NewRequest(req))
	if err != nil {
		c.serviceFail(w, r, err)
		return
	}
	for _, t := range res.Msg.GetTasks() {
		p.Rows = append(p.Rows, rowOf(t))
	}
	filters := url.Values{}
	for _, k := range []string{"state", "user", "name", "label", "node"} {
		if v := q.Get(k); v != "" {
			filters.Set(k, v)
		}
	}
	p.Query = filters.Encode()
	if len(p.Rows) == listLimit {
		next := url.Values{}
		for k, v := range filters {
			next[k] = v
		}
		next.Set("after", p.Rows[len(p.Rows)-1].ID)
		p.Next = next.Encode()
	}
	p.Live = req.After == ""
	if q.Get("fragment") == "rows" {
		c.renderTemplate(w, http.StatusOK, "tasks", "rows", p)
		return
	}
	c.render(w, r, viewerFrom(r.Context()), http.StatusOK, "tasks", "Tasks", p)
}

// envVar is one variable of a spec's env, its value hidden or not.
type envVar struct{ Name, Value string }

type attemptRow struct {
	Attempt int32
	Usage   *podiumv1.Usage
}

type artifactRow struct {
	Name, SHA256, URL string
	Size              int64
	Attempt           int32
}

type taskPage struct {
	Task      *podiumv1.Task
	Row       taskRow
	Stored    store.Task
	Env       []envVar
	EnvHidden bool
	SpecJSON  string
	Attempts  []attemptRow
	Artifacts []artifactRow
	// ArtifactsNote says why there are none to show, when that is not
	// simply that the task uploaded none.
	ArtifactsNote string
	Lines         []logLine
	// From is the first line shown; Total how many the log has so far.
	From, Total int64
	// Earlier is the first line of the page before, 0 when none.
	Earlier int64
	// Later is the first line of the page after, 0 when this is the tail.
	Later int64
	// Live says the page follows the log (the tail of a task not ended).
	Live       bool
	LogExpired string
	CanCancel  bool
	CanMessage bool
	// CanRerun: the task has ended and the viewer may run it again (their
	// own, or any for an admin), as podium task rerun does.
	CanRerun bool
	Terminal bool
}

// taskID reads and checks the {id} of a task path.
func (c *Console) taskID(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := r.PathValue("id")
	if !ids.Valid("task", id) {
		c.fail(w, r, viewerFrom(r.Context()), http.StatusBadRequest, fmt.Sprintf("%q is not a task id (they look like task_01J…).", clip(id)))
		return "", false
	}
	return id, true
}

// logFrom reads the from parameter: 0 (the tail) when absent.
func (c *Console) logFrom(w http.ResponseWriter, r *http.Request) (int64, bool) {
	s := r.URL.Query().Get("from")
	if s == "" {
		return 0, true
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 1 {
		c.badParam(w, r, "from", fmt.Sprintf("%q is not a line number (1 or more)", clip(s)))
		return 0, false
	}
	return n, true
}

// taskPage shows one task: its state, spec, attempts, usage, artifacts and
// a page of its log, following it live while it runs.
func (c *Console) taskPage(w http.ResponseWriter, r *http.Request) {
	if !c.need(w, r, podiumv1connect.TaskServiceGetProcedure) {
		return
	}
	id, ok := c.taskID(w, r)
	if !ok {
		return
	}
	from, ok := c.logFrom(w, r)
	if !ok {
		return
	}
	for k := range r.URL.Query() {
		if k != "from" {
			c.badParam(w, r, k, "not a parameter of this page (from)")
			return
		}
	}
	ctx := r.Context()
	res, err := c.tasks.Get(ctx, connect.NewRequest(&podiumv1.GetRequest{Id: id}))
	if err != nil {
		c.serviceFail(w, r, err)
		return
	}
	t := res.Msg.GetTask()
	// The row has what the API's view leaves out (timings, attempts);
	// read after the view, so the log read below is at least this new.
	st, err := c.store.GetTask(ctx, id)
	if err != nil {
		c.serviceFail(w, r, connect.NewError(connect.CodeUnavailable, err))
		return
	}
	p := taskPage{Task: t, Row: rowOf(t), Stored: st, EnvHidden: t.GetEnvHidden(), Terminal: store.Terminal(st.State)}
	spec := proto.CloneOf(t.GetSpec())
	for k, val := range spec.GetEnv() {
		if p.EnvHidden {
			val = "•••"
			spec.Env[k] = val
		}
		p.Env = append(p.Env, envVar{k, val})
	}
	for _, sc := range spec.GetSidecars() {
		for k := range sc.GetEnv() {
			if p.EnvHidden {
				sc.Env[k] = "•••"
			}
		}
	}
	if t.GetNotifyHidden() {
		// The view blanked them: say so rather than show an empty URL.
		for _, n := range spec.GetNotify() {
			n.Url = "(hidden: only the task's owner and admins see notify URLs)"
		}
	}
	slices.SortFunc(p.Env, func(a, b envVar) int { return strings.Compare(a.Name, b.Name) })
	if b, err := (protojson.MarshalOptions{Multiline: true, Indent: "  "}).Marshal(spec); err == nil {
		p.SpecJSON = string(b)
	}
	// The latest attempt's usage came with the view; earlier ones are read
	// here, the most recent few.
	for a := st.Attempt; a >= 1 && a > st.Attempt-maxAttemptsShown; a-- {
		row := attemptRow{Attempt: a}
		if a == st.Attempt {
			row.Usage = t.GetUsage()
		} else if u, err := c.store.AttemptUsage(ctx, id, a); err == nil {
			row.Usage = u
		}
		p.Attempts = append(p.Attempts, row)
	}
	if c.artifacts != nil {
		as, err := c.tasks.ListArtifacts(ctx, connect.NewRequest(&podiumv1.ListArtifactsRequest{Id: id}))
		var list []*podiumv1.Artifact
		if err != nil {
			p.ArtifactsNote = "The artifacts cannot be listed now: " + connectMessage(err)
		} else {
			list = as.Msg.GetArtifacts()
		}
		for _, a := range list {
			p.Artifacts = append(p.Artifacts, artifactRow{Name: a.GetName(), SHA256: a.GetSha256(), Size: a.GetSize(), Attempt: a.GetAttempt(),
				URL: "/console/tasks/" + id + "/artifacts/" + pathEscape(a.GetName()) + "?attempt=" + strconv.Itoa(int(a.GetAttempt()))})
		}
	}
	if st.ArtifactsExpiredAt != nil {
		p.ArtifactsNote = "The artifacts expired by retention on " + tasks.Day(*st.ArtifactsExpiredAt) + "."
	}
	if st.LogExpiredAt != nil {
		p.LogExpired = tasks.Day(*st.LogExpiredAt)
	} else {
		lines, total, err := c.pageLines(ctx, st, from, PageLines)
		if err != nil {
			c.serviceFail(w, r, asConnect(err))
			return
		}
		p.Lines, p.Total = lines, total
		p.From = from
		if len(lines) > 0 {
			p.From = lines[0].N
		} else if from == 0 {
			p.From = total + 1
		}
		if p.From > 1 {
			p.Earlier = max(1, p.From-PageLines)
		}
		if from != 0 && from+PageLines <= total {
			p.Later = from + PageLines
		}
		p.Live = from == 0 && !p.Terminal
	}
	p.CanCancel = !p.Terminal && may(ctx, podiumv1connect.TaskServiceCancelProcedure) && access.Owns(ctx, st.RequestedBy)
	p.CanMessage = !p.Terminal && may(ctx, podiumv1connect.TaskServiceSendProcedure) && access.Owns(ctx, st.RequestedBy)
	p.CanRerun = p.Terminal && may(ctx, podiumv1connect.TaskServiceRerunProcedure) && access.Owns(ctx, st.RequestedBy)
	c.render(w, r, viewerFrom(ctx), http.StatusOK, "task", "Task "+id, p)
}

// maxAttemptsShown bounds the attempts a task page lists.
const maxAttemptsShown = 20

// pathEscape escapes an artifact's name for a path, keeping its slashes.
func pathEscape(name string) string {
	parts := strings.Split(name, "/")
	for i, s := range parts {
		parts[i] = url.PathEscape(s)
	}
	return strings.Join(parts, "/")
}

// asConnect gives an error from the store a Connect code for its page.
func asConnect(err error) error {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return err
	}
	return connect.NewError(connect.CodeUnavailable, err)
}

// download serves an artifact through the coordinator, as podium artifacts
// get does, with its size and SHA-256 in the headers.
func (c *Console) download(w http.ResponseWriter, r *http.Request) {
	if !c.need(w, r, podiumv1connect.TaskServiceDownloadArtifactProcedure) {
		return
	}
	id, ok := c.taskID(w, r)
	if !ok {
		return
	}
	name := r.PathValue("name")
	var attempt int32
	if s := r.URL.Query().Get("attempt"); s != "" {
		n, err := strconv.ParseInt(s, 10, 32)
		if err != nil || n < 0 {
			c.badParam(w, r, "attempt", fmt.Sprintf("%q is not an attempt number", clip(s)))
			return
		}
		attempt = int32(n)
	}
	ctx := r.Context()
	if _, err := c.tasks.Get(ctx, connect.NewRequest(&podiumv1.GetRequest{Id: id})); err != nil {
		c.serviceFail(w, r, err)
		return
	}
	if c.artifacts == nil {
		c.serviceFail(w, r, connect.NewError(connect.CodeFailedPrecondition, artifacts.ErrNotConfigured))
		return
	}
	a, body, err := c.artifacts.Open(ctx, id, name, attempt)
	if err != nil {
		c.serviceFail(w, r, artifacts.ConnectError(err))
		return
	}
	defer body.Close()
	base := name[strings.LastIndexByte(name, '/')+1:]
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Disposition", "attachment; filename*=UTF-8''"+url.PathEscape(base))
	h.Set("Content-Length", strconv.FormatInt(a.Size, 10))
	h.Set("X-Podium-Sha256", a.SHA256)
	n, err := io.Copy(w, body)
	if err != nil && ctx.Err() == nil {
		c.log.Warn("console artifact download broke off", "task", id, "name", name, "sent", n, "err", err)
	}
}

// cancel cancels a task, as podium task cancel does, and goes back to it.
func (c *Console) cancel(w http.ResponseWriter, r *http.Request) {
	if !c.need(w, r, podiumv1connect.TaskServiceCancelProcedure) {
		return
	}
	id, ok := c.taskID(w, r)
	if !ok {
		return
	}
	err := c.audited(r.Context(), podiumv1connect.TaskServiceCancelProcedure, id, func(ctx context.Context) error {
		_, err := c.tasks.Cancel(ctx, connect.NewRequest(&podiumv1.CancelRequest{Id: id}))
		return err
	})
	if err != nil {
		c.serviceFail(w, r, err)
		return
	}
	http.Redirect(w, r, "/console/tasks/"+id, http.StatusSeeOther)
}

// rerun runs a finished task again as a new task, as podium task rerun does,
// and goes to the new task. The task service checks, as for the API, that a
// member reruns only their own tasks and that the spec and its secrets are
// still accepted.
func (c *Console) rerun(w http.ResponseWriter, r *http.Request) {
	if !c.need(w, r, podiumv1connect.TaskServiceRerunProcedure) {
		return
	}
	id, ok := c.taskID(w, r)
	if !ok {
		return
	}
	var created string
	err := c.audited(r.Context(), podiumv1connect.TaskServiceRerunProcedure, id, func(ctx context.Context) error {
		resp, err := c.tasks.Rerun(ctx, connect.NewRequest(&podiumv1.RerunRequest{Id: id}))
		if err == nil {
			created = resp.Msg.GetTask().GetId()
		}
		return err
	})
	if err != nil {
		c.serviceFail(w, r, err)
		return
	}
	http.Redirect(w, r, "/console/tasks/"+created, http.StatusSeeOther)
}

// message sends text to a running task's inbox, as podium send does.
func (c *Console) message(w http.ResponseWriter, r *http.Request) {
	if !c.need(w, r, podiumv1connect.TaskServiceSendProcedure) {
		return
	}
	id, ok := c.taskID(w, r)
	if !ok {
		return
	}
	text := r.PostForm.Get("text")
	err := c.audited(r.Context(), podiumv1connect.TaskServiceSendProcedure, id, func(ctx context.Context) error {
		_, err := c.tasks.Send(ctx, connect.NewRequest(&podiumv1.SendRequest{Id: id, Text: text}))
		return err
	})
	if err != nil {
		c.serviceFail(w, r, err)
		return
	}
	http.Redirect(w, r, "/console/tasks/"+id, http.StatusSeeOther)
}

// nodeRow is one row of node_health as the nodes page shows it.
type nodeRow struct {
	store.NodeHealthRow
	HeartbeatAge string
}

type nodesPage struct {
	Nodes []nodeRow
	// Truncated says more nodes exist than the page shows.
	Truncated bool
}

// maxNodesShown bounds the nodes page.
const maxNodesShown = 2000

func nodeRows(hs []store.NodeHealthRow) []nodeRow {
	out := make([]nodeRow, 0, len(hs))
	for _, h := range hs {
		row := nodeRow{NodeHealthRow: h, HeartbeatAge: "never"}
		if h.SecondsSinceHeartbeat != nil {
			row.HeartbeatAge = ago(time.Duration(*h.SecondsSinceHeartbeat) * time.Second)
		}
		out = append(out, row)
	}
	return out
}

// nodesPage shows podium.node_health. Every role may read it (a member
// wants to know why their task waits); changing a node is the admin's, as
// on the API.
func (c *Console) nodesPage(w http.ResponseWriter, r *http.Request) {
	if !c.need(w, r, podiumv1connect.TaskServiceListProcedure) {
		return
	}
	if len(r.URL.Query()) > 0 {
		for k := range r.URL.Query() {
			c.badParam(w, r, k, "this page takes no parameters")
			return
		}
	}
	hs, err := c.store.NodeHealth(r.Context(), "", maxNodesShown+1)
	if err != nil {
		c.serviceFail(w, r, asConnect(err))
		return
	}
	p := nodesPage{}
	if len(hs) > maxNodesShown {
		hs, p.Truncated = hs[:maxNodesShown], true
	}
	p.Nodes = nodeRows(hs)
	c.render(w, r, viewerFrom(r.Context()), http.StatusOK, "nodes", "Nodes", p)
}

type nodePage struct {
	Node  nodeRow
	Tasks []taskRow
}

// nodeID reads and checks the {id} of a node path.
func (c *Console) nodeID(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := r.PathValue("id")
	if !ids.Valid("node", id) {
		c.fail(w, r, viewerFrom(r.Context()), http.StatusBadRequest, fmt.Sprintf("%q is not a node id (they look like node_01J…).", clip(id)))
		return "", false
	}
	return id, true
}

// nodePage shows one node and the tasks placed on it most recently.
func (c *Console) nodePage(w http.ResponseWriter, r *http.Request) {
	if !c.need(w, r, podiumv1connect.TaskServiceListProcedure) {
		return
	}
	id, ok := c.nodeID(w, r)
	if !ok {
		return
	}
	hs, err := c.store.NodeHealth(r.Context(), id, 1)
	if err != nil {
		c.serviceFail(w, r, asConnect(err))
		return
	}
	if len(hs) == 0 {
		c.fail(w, r, viewerFrom(r.Context()), http.StatusNotFound, "There is no node "+id+": see the nodes page.")
		return
	}
	res, err := c.tasks.List(r.Context(), connect.NewRequest(&podiumv1.ListRequest{Node: id, Limit: 50}))
	if err != nil {
		c.serviceFail(w, r, err)
		return
	}
	p := nodePage{Node: nodeRows(hs)[0]}
	for _, t := range res.Msg.GetTasks() {
		p.Tasks = append(p.Tasks, rowOf(t))
	}
	c.render(w, r, viewerFrom(r.Context()), http.StatusOK, "node", "Node "+id, p)
}

// drain drains a node, or undrains it, as podium node drain does.
func (c *Console) drain(draining bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !c.need(w, r, podiumv1connect.AdminServiceDrainNodeProcedure) {
			return
		}
		id, ok := c.nodeID(w, r)
		if !ok {
			return
		}
		err := c.audited(r.Context(), podiumv1connect.AdminServiceDrainNodeProcedure, id, func(ctx context.Context) error {
			_, err := c.admin.DrainNode(ctx, connect.NewRequest(&podiumv1.DrainNodeRequest{NodeId: id, Draining: draining}))
			return err
		})
		if err != nil {
			c.serviceFail(w, r, err)
			return
		}
		http.Redirect(w, r, backTo(r, "/console/nodes"), http.StatusSeeOther)
	}
}

// backTo is the page a node form came from (its back field), if it is one
// of the console's node pages, else def.
func backTo(r *http.Request, def string) string {
	b := r.PostForm.Get("back")
	if b == "/console/nodes" || (strings.HasPrefix(b, "/console/nodes/") && ids.Valid("node", strings.TrimPrefix(b, "/console/nodes/"))) {
		return b
	}
	return def
}

// labels adds and removes a node's labels (space- or comma-separated), as
// podium node label does.
func (c *Console) labels(w http.ResponseWriter, r *http.Request) {
	if !c.need(w, r, podiumv1connect.AdminServiceSetNodeLabelsProcedure) {
		return
	}
	id, ok := c.nodeID(w, r)
	if !ok {
		return
	}
	split := func(s string) []string {
		return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\t' || r == '\r' })
	}
	add, remove := split(r.PostForm.Get("add")), split(r.PostForm.Get("remove"))
	err := c.audited(r.Context(), podiumv1connect.AdminServiceSetNodeLabelsProcedure, id, func(ctx context.Context) error {
		_, err := c.admin.SetNodeLabels(ctx, connect.NewRequest(&podiumv1.SetNodeLabelsRequest{NodeId: id, Add: add, Remove: remove}))
		return err
	})
	if err != nil {
		c.serviceFail(w, r, err)
		return
	}
	http.Redirect(w, r, "/console/nodes/"+id, http.StatusSeeOther)
}

type queuePage struct {
	Reasons []store.QueueReason
	Total   int64
}

// maxReasonsShown bounds the queue page's groups.
const maxReasonsShown = 200

// queuePage groups what waits by why (the reason the scheduler last wrote
// on each queued task), most common first.
func (c *Console) queuePage(w http.ResponseWriter, r *http.Request) {
	if !c.need(w, r, podiumv1connect.TaskServiceListProcedure) {
		return
	}
	for k := range r.URL.Query() {
		c.badParam(w, r, k, "this page takes no parameters")
		return
	}
	rs, err := c.store.QueueReasons(r.Context(), maxReasonsShown)
	if err != nil {
		c.serviceFail(w, r, asConnect(err))
		return
	}
	p := queuePage{Reasons: rs}
	for i := range rs {
		p.Total += rs[i].Count
		if rs[i].Reason == "" {
			rs[i].Reason = "not looked at by the scheduler yet"
		}
	}
	c.render(w, r, viewerFrom(r.Context()), http.StatusOK, "queue", "Queue", p)
}

// systemPart is one of the replica's optional parts as the system page
// shows it.
type systemPart struct {
	Name, How string
	On        bool
}

type systemPage struct {
	Version string
	Parts   []systemPart
	CLI     bool
}

// optionalParts reads the replica's list of optional parts, as /readyz
// writes it, into rows.
func optionalParts(list string) []systemPart {
	var parts []systemPart
	for _, line := range strings.Split(list, "\n") {
		name, state, ok := strings.Cut(strings.TrimSpace(line), ": ")
		if !ok || !strings.HasPrefix(line, "  ") {
			continue
		}
		p := systemPart{Name: name, On: state == "on"}
		if !p.On {
			p.How = strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(state, "off"), " ("), ")")
		}
		parts = append(parts, p)
	}
	return parts
}

// systemPage is the admins' page about the replica itself: its version and
// which optional parts (secrets, the object store, the apt repository, the
// CLI's downloads, the tailnet, TLS) are on, with the setting that turns on
// each that is not, so that an admin need not read /readyz to learn why
// secrets or artifacts are refused.
func (c *Console) systemPage(w http.ResponseWriter, r *http.Request) {
	v := viewerFrom(r.Context())
	if !v.IsAdmin() {
		c.fail(w, r, v, http.StatusForbidden, "the system page is for admins: ask an admin what this coordinator runs")
		return
	}
	for k := range r.URL.Query() {
		c.badParam(w, r, k, "this page takes no parameters")
		return
	}
	c.render(w, r, v, http.StatusOK, "system", "System",
		systemPage{Version: version.Version, Parts: optionalParts(c.cfg.Optional), CLI: c.cfg.CLIDownloads})
}

type schedulesPage struct {
	All       bool
	Schedules []*podiumv1.Schedule
}

// schedulesPage lists the schedules the viewer may see, as podium schedule
// ls does: a member's own, every one for an admin (the schedule service
// decides).
func (c *Console) schedulesPage(w http.ResponseWriter, r *http.Request) {
	if !c.need(w, r, podiumv1connect.ScheduleServiceListProcedure) || !c.noParams(w, r) {
		return
	}
	resp, err := c.schedules.List(r.Context(), connect.NewRequest(&podiumv1.ScheduleServiceListRequest{}))
	if err != nil {
		c.serviceFail(w, r, err)
		return
	}
	v := viewerFrom(r.Context())
	c.render(w, r, v, http.StatusOK, "schedules", "Schedules", schedulesPage{All: v.IsAdmin(), Schedules: resp.Msg.GetSchedules()})
}

type secretsPage struct {
	All     bool
	Secrets []*podiumv1.Secret
}

// secretsPage lists the secrets the viewer may use, as podium secret ls
// does: a member sees those granted to them, without the grants; an admin
// every one with who may use it (the admin service decides). Never a value.
func (c *Console) secretsPage(w http.ResponseWriter, r *http.Request) {
	if !c.need(w, r, podiumv1connect.AdminServiceListSecretsProcedure) || !c.noParams(w, r) {
		return
	}
	resp, err := c.admin.ListSecrets(r.Context(), connect.NewRequest(&podiumv1.ListSecretsRequest{}))
	if err != nil {
		c.serviceFail(w, r, err)
		return
	}
	v := viewerFrom(r.Context())
	c.render(w, r, v, http.StatusOK, "secrets", "Secrets", secretsPage{All: v.IsAdmin(), Secrets: resp.Msg.GetSecrets()})
}

type webhooksPage struct {
	Webhooks []*podiumv1.Webhook
}

// webhooksPage lists the webhooks and how their deliveries go, as podium
// webhook ls does: admins only, as the webhooks receive every task's end.
func (c *Console) webhooksPage(w http.ResponseWriter, r *http.Request) {
	if !c.need(w, r, podiumv1connect.WebhookServiceListProcedure) || !c.noParams(w, r) {
		return
	}
	resp, err := c.webhooks.List(r.Context(), connect.NewRequest(&podiumv1.WebhookServiceListRequest{}))
	if err != nil {
		c.serviceFail(w, r, err)
		return
	}
	c.render(w, r, viewerFrom(r.Context()), http.StatusOK, "webhooks", "Webhooks", webhooksPage{Webhooks: resp.Msg.GetWebhooks()})
}

// noParams refuses a page request with any query parameter, saying so.
func (c *Console) noParams(w http.ResponseWriter, r *http.Request) bool {
	for k := range r.URL.Query() {
		c.badParam(w, r, k, "this page takes no parameters")
		return false
	}
	return true
}
