package store_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/podiumhq/podium/coordinator/store"
	"github.com/podiumhq/podium/internal/ids"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// listed is one task as the filter test set it up: what each filter looks at.
type listed struct {
	id, state, user, node string
	labels                []string
	created               time.Time
}

// TestListTasksFilters sets up tasks that differ in every filtered column,
// some created at the same instant, and checks each filter, alone and
// together, returns exactly the tasks it names in the list's order; and that
// paging with After walks the whole list without a repeat or a gap.
func TestListTasksFilters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, db := openStore(t)
	sql := rawSQL(t, db)

	nodeX, nodeY := ids.New("node"), ids.New("node")
	now := time.Now().UTC().Truncate(time.Microsecond)
	model := []listed{
		{state: store.Succeeded, user: "alice", node: nodeX, labels: []string{"team=ml"}, created: now.Add(-5 * time.Hour)},
		{state: store.Failed, user: "bob", node: nodeY, created: now.Add(-4 * time.Hour)},
		// Four created at the same instant: the id orders them.
		{state: store.Running, user: "alice", node: nodeX, labels: []string{"team=ml", "gpu"}, created: now.Add(-time.Hour)},
		{state: store.Running, user: "bob", node: nodeY, labels: []string{"gpu"}, created: now.Add(-time.Hour)},
		{state: store.Succeeded, user: "alice", node: nodeX, created: now.Add(-time.Hour)},
		{state: store.Queued, user: "bob", created: now.Add(-time.Hour)},
	}
	var news []store.NewTask
	for i := range model {
		model[i].id = ids.New("task")
		news = append(news, store.NewTask{ID: model[i].id, RequestedBy: model[i].user,
			Spec: &podiumv1.TaskSpec{Image: "alpine", Command: []string{"true"}, Labels: model[i].labels}})
	}
	if _, err := st.InsertTasks(ctx, news); err != nil {
		t.Fatal(err)
	}
	for _, m := range model {
		var node *string
		if m.node != "" {
			node = &m.node
		}
		if _, err := sql.Exec(ctx, "update podium.tasks set state = $2, node_id = $3, created_at = $4 where id = $1",
			m.id, m.state, node, m.created); err != nil {
			t.Fatal(err)
		}
	}
	// The list's order: newest first, then the greater id.
	slices.SortFunc(model, func(a, b listed) int {
		if c := b.created.Compare(a.created); c != 0 {
			return c
		}
		return strings.Compare(b.id, a.id)
	})
	want := func(keep func(listed) bool) []string {
		var out []string
		for _, m := range model {
			if keep(m) {
				out = append(out, m.id)
			}
		}
		return out
	}
	list := func(f store.TaskFilter) []string {
		t.Helper()
		ts, err := st.ListTasks(ctx, f)
		if err != nil {
			t.Fatalf("%+v: %v", f, err)
		}
		var out []string
		for _, task := range ts {
			out = append(out, task.ID)
		}
		return out
	}

	cases := []struct {
		name string
		f    store.TaskFilter
		keep func(listed) bool
	}{
		{"no filter", store.TaskFilter{}, func(listed) bool { return true }},
		{"one state", store.TaskFilter{States: []string{store.Running}}, func(m listed) bool { return m.state == store.Running }},
		{"two states", store.TaskFilter{States: []string{store.Failed, store.Queued}},
			func(m listed) bool { return m.state == store.Failed || m.state == store.Queued }},
		{"user", store.TaskFilter{RequestedBy: "alice"}, func(m listed) bool { return m.user == "alice" }},
		{"label", store.TaskFilter{Label: "gpu"}, func(m listed) bool { return slices.Contains(m.labels, "gpu") }},
		{"label key=value", store.TaskFilter{Label: "team=ml"}, func(m listed) bool { return slices.Contains(m.labels, "team=ml") }},
		{"label nobody has", store.TaskFilter{Label: "team"}, func(listed) bool { return false }},
		{"node", store.TaskFilter{Node: nodeY}, func(m listed) bool { return m.node == nodeY }},
		{"since", store.TaskFilter{Since: now.Add(-4 * time.Hour)}, func(m listed) bool { return !m.created.Before(now.Add(-4 * time.Hour)) }},
		{"user, label, node and state together",
			store.TaskFilter{RequestedBy: "alice", Label: "team=ml", Node: nodeX, States: []string{store.Running, store.Succeeded}},
			func(m listed) bool {
				return m.user == "alice" && slices.Contains(m.labels, "team=ml") && m.node == nodeX
			}},
		{"limit", store.TaskFilter{Limit: 2}, func(m listed) bool { return m.id == model[0].id || m.id == model[1].id }},
		{"after a task tied with others", store.TaskFilter{After: model[1].id}, func(m listed) bool {
			return m.id != model[0].id && m.id != model[1].id
		}},
		{"after, with a user", store.TaskFilter{After: model[1].id, RequestedBy: "bob"}, func(m listed) bool {
			return m.id != model[0].id && m.id != model[1].id && m.user == "bob"
		}},
	}
	for _, c := range cases {
		if got, w := list(c.f), want(c.keep); !slices.Equal(got, w) {
			t.Errorf("%s: listed %v, want %v", c.name, got, w)
		}
	}

	// Paging two at a time walks the whole list once, ties included.
	var paged []string
	after := ""
	for {
		page := list(store.TaskFilter{Limit: 2, After: after})
		if len(page) == 0 {
			break
		}
		paged = append(paged, page...)
		after = page[len(page)-1]
	}
	if all := want(func(listed) bool { return true }); !slices.Equal(paged, all) {
		t.Errorf("paging by 2 listed %v, want %v", paged, all)
	}

	// A cursor naming no task is refused, not read as the end of the list.
	if _, err := st.ListTasks(ctx, store.TaskFilter{After: ids.New("task")}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("after an unknown task: %v, want ErrNotFound", err)
	}
}

// TestListTasksPlansUseIndexes loads a million tasks (one statement), analyzes
// the table and explains the list's statement for each filter: none may read
// podium.tasks sequentially, so a page costs the same at a million tasks as
// at ten.
func TestListTasksPlansUseIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, db := openStore(t)
	sql := rawSQL(t, db)

	// A realistic mix: mostly succeeded, 2% queued (no node), 2% running,
	// 200 nodes, 100 people, 20 teams and a label one task in a thousand has,
	// names on two tasks in three (one in a thousand "deploy"),
	// one task a second for eleven and a half days.
	if _, err := sql.Exec(ctx, `insert into podium.tasks (id, spec, state, node_id, requested_by, labels, name, created_at)
		select 'task_' || lpad(g::text, 26, '0'), '{}'::jsonb,
			case when g % 50 = 0 then 'queued' when g % 50 = 1 then 'running'
				when g % 50 in (2, 3, 4) then 'failed' else 'succeeded' end,
			case when g % 50 = 0 then null else 'node_' || lpad((g % 200)::text, 26, '0') end,
			'user' || (g % 100),
			case when g % 1000 = 7 then array['team=' || (g % 20), 'rare'] else array['team=' || (g % 20)] end,
			case when g % 3 = 0 then null when g % 1000 = 8 then 'deploy' else 'test-' || (g % 50) end,
			now() - (1000000 - g) * interval '1 second'
		from generate_series(1, 1000000) g`); err != nil {
		t.Fatalf("load a million tasks: %v", err)
	}
	if _, err := sql.Exec(ctx, "analyze podium.tasks"); err != nil {
		t.Fatal(err)
	}
	node := "node_" + strings.Repeat("0", 23) + "042"
	middle := "task_" + strings.Repeat("0", 20) + "500000"
	for _, c := range []struct {
		name string
		f    store.TaskFilter
	}{
		{"no filter", store.TaskFilter{}},
		{"a rare state", store.TaskFilter{States: []string{store.Queued}}},
		{"the common state", store.TaskFilter{States: []string{store.Succeeded}}},
		{"two states", store.TaskFilter{States: []string{store.Failed, store.Lost}}},
		{"user", store.TaskFilter{RequestedBy: "user42"}},
		{"a common label", store.TaskFilter{Label: "team=3"}},
		{"a rare label", store.TaskFilter{Label: "rare"}},
		{"node", store.TaskFilter{Node: node}},
		{"since an hour ago", store.TaskFilter{Since: time.Now().Add(-time.Hour)}},
		{"since a year ago", store.TaskFilter{Since: time.Now().AddDate(-1, 0, 0)}},
		{"after", store.TaskFilter{After: middle}},
		{"a page of 1000", store.TaskFilter{Limit: 1000}},
		{"user, state and since", store.TaskFilter{RequestedBy: "user7", States: []string{store.Failed}, Since: time.Now().Add(-24 * time.Hour)}},
		{"node and after", store.TaskFilter{Node: node, After: middle}},
		{"label and state", store.TaskFilter{Label: "rare", States: []string{store.Running}}},
		{"a common name", store.TaskFilter{Name: "test-7"}},
		{"a rare name", store.TaskFilter{Name: "deploy"}},
		{"name and user", store.TaskFilter{Name: "deploy", RequestedBy: "user8"}},
	} {
		q, args := store.ListTasksSQL(c.f)
		rows, err := sql.Query(ctx, "explain "+q, args...)
		if err != nil {
			t.Fatalf("%s: explain: %v", c.name, err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatalf("%s: explain: %v", c.name, err)
		}
		plan := strings.Join(lines, "\n")
		t.Logf("%s:\n%s", c.name, plan)
		if strings.Contains(plan, "Seq Scan") {
			t.Errorf("%s: the list reads podium.tasks sequentially:\n%s", c.name, plan)
		}
	}
}
