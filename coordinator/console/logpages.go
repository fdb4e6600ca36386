package console

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/coordinator/store"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/proto/podium/v1/podiumv1connect"
)

// loggedTask checks the viewer may read task {id}'s log and reads the task.
func (c *Console) loggedTask(w http.ResponseWriter, r *http.Request) (store.Task, bool) {
	if !c.need(w, r, podiumv1connect.TaskServiceEventsProcedure) {
		return store.Task{}, false
	}
	id, ok := c.taskID(w, r)
	if !ok {
		return store.Task{}, false
	}
	// Through the service, for its errors (an expired task says when).
	if _, err := c.tasks.Get(r.Context(), connect.NewRequest(&podiumv1.GetRequest{Id: id})); err != nil {
		c.serviceFail(w, r, err)
		return store.Task{}, false
	}
	t, err := c.store.GetTask(r.Context(), id)
	if err != nil {
		c.serviceFail(w, r, asConnect(err))
		return store.Task{}, false
	}
	return t, true
}

type logFragment struct {
	Lines []logLine
}

// logFragment answers lines from..from+limit-1 of a log as HTML, for the
// script's "earlier lines".
func (c *Console) logFragment(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	from, ok := c.logFrom(w, r)
	if !ok {
		return
	}
	if from == 0 {
		c.badParam(w, r, "from", "required: the first line to show (1 or more)")
		return
	}
	limit := PageLines
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > PageLines {
			c.badParam(w, r, "limit", fmt.Sprintf("%q is out of range: give 1 to %d", clip(s), PageLines))
			return
		}
		limit = n
	}
	t, ok := c.loggedTask(w, r)
	if !ok {
		return
	}
	lines, _, err := c.pageLines(r.Context(), t, from, limit)
	if err != nil {
		c.serviceFail(w, r, asConnect(err))
		return
	}
	c.renderTemplate(w, http.StatusOK, "task", "lines", logFragment{Lines: lines})
}

// rawLog sends the log as stored: both streams' bytes in their order, and
// podium's notes and state changes as "→ " lines, as podium logs prints
// them (to one file here).
func (c *Console) rawLog(w http.ResponseWriter, r *http.Request) {
	t, ok := c.loggedTask(w, r)
	if !ok {
		return
	}
	if t.LogExpiredAt != nil {
		c.fail(w, r, viewerFrom(r.Context()), http.StatusGone, "The log of "+t.ID+" expired by retention.")
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Content-Disposition", `attachment; filename="`+t.ID+`.log"`)
	bw := bufio.NewWriterSize(w, 64<<10)
	midLine := false
	var after int64
	_, err := c.archive.ReadLog(r.Context(), t, &after, func(_ int64, ev *podiumv1.TaskEvent) error {
		var err error
		if lg := ev.GetLog(); lg != nil {
			if d := lg.GetData(); len(d) > 0 {
				_, err = bw.Write(d)
				midLine = d[len(d)-1] != '\n'
			}
			return err
		}
		var sb strings.Builder
		sc := newLineScanner(func(l logLine) error { sb.Write(l.Text); sb.WriteByte('\n'); return nil })
		_ = sc.event(ev)
		if sb.Len() > 0 && midLine {
			_ = bw.WriteByte('\n')
			midLine = false
		}
		_, err = bw.WriteString(sb.String())
		return err
	})
	if err != nil {
		// Headers are gone: the download ends short, which the browser
		// shows as failed.
		c.log.Warn("console raw log broke off", "task", t.ID, "err", err)
		return
	}
	_ = bw.Flush()
}

// events follows a task's log as server-sent events: "line" events carry a
// rendered line (their id is the next line's number, so a browser that
// reconnects says where it was in Last-Event-ID), "state" events the task's
// state and exit code as it changes, and "end" says the task has ended and
// every line was sent. It starts at line ?line=N (default 1). One
// connection lasts at most MaxFollow; the browser then reconnects.
func (c *Console) events(w http.ResponseWriter, r *http.Request) {
	from := int64(1)
	for _, s := range []string{r.Header.Get("Last-Event-ID"), r.URL.Query().Get("line")} {
		if s == "" {
			continue
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 1 {
			c.badParam(w, r, "line", fmt.Sprintf("%q is not a line number (1 or more)", clip(s)))
			return
		}
		from = n
		break
	}
	t, ok := c.loggedTask(w, r)
	if !ok {
		return
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		c.fail(w, r, viewerFrom(r.Context()), http.StatusInternalServerError, "This connection cannot stream.")
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	ctx, cancel := context.WithTimeout(r.Context(), c.cfg.MaxFollow)
	defer cancel()
	go func() {
		select {
		case <-c.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	bell, unsubscribe := c.bus.Subscribe(store.ChannelTaskEvents, t.ID)
	defer unsubscribe()

	bw := bufio.NewWriterSize(w, 32<<10)
	send := func(event, id, data string) error {
		if id != "" {
			fmt.Fprintf(bw, "id: %s\n", id)
		}
		fmt.Fprintf(bw, "event: %s\n", event)
		for _, part := range strings.Split(data, "\n") {
			fmt.Fprintf(bw, "data: %s\n", part)
		}
		_, err := bw.WriteString("\n")
		return err
	}
	var line bytes.Buffer
	sc := newLineScanner(func(l logLine) error {
		if l.N < from {
			return nil
		}
		line.Reset()
		if err := c.pages["task"].ExecuteTemplate(&line, "line", l); err != nil {
			return err
		}
		return send("line", strconv.FormatInt(l.N+1, 10), strings.TrimSpace(line.String()))
	})
	var after int64
	lastState := ""
	for {
		nt, err := c.store.GetTask(ctx, t.ID)
		if err != nil {
			if ctx.Err() == nil {
				_ = send("failed", "", "cannot read the task: "+err.Error())
			}
			break
		}
		if nt.State != lastState {
			lastState = nt.State
			exit := ""
			if nt.ExitCode != nil {
				exit = strconv.Itoa(int(*nt.ExitCode))
			}
			_ = send("state", "", nt.State+" "+exit)
		}
		t, err = c.archive.ReadLog(ctx, nt, &after, func(_ int64, ev *podiumv1.TaskEvent) error { return sc.event(ev) })
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, context.Canceled) {
				_ = send("failed", "", "the log could not be read: "+connectMessage(err))
			}
			break
		}
		ended := t.LogExpiredAt != nil || (store.Terminal(t.State) && after >= t.LastSeq)
		if ended {
			_ = sc.flush()
			_ = send("end", "", t.State)
		}
		if bw.Flush() != nil {
			return
		}
		flusher.Flush()
		if ended {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-bell:
		case <-time.After(2 * time.Second):
		}
	}
	_ = bw.Flush()
	flusher.Flush()
}
