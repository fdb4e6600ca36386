package store_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/podiumhq/podium/coordinator/store"
	"github.com/podiumhq/podium/internal/ids"
)

// The outbox's rows come from the trigger in the changing transaction (a
// rolled-back change leaves none), and the claim's lease keeps a row from a
// second claimer until it passes or the first reports; a report from a
// claim that was taken over changes nothing.
func TestOutboxClaimAndLease(t *testing.T) {
	t.Parallel()
	st, db := openStore(t)
	sql := rawSQL(t, db)
	ctx := context.Background()
	hook, err := st.AddWebhook(ctx, store.Webhook{ID: ids.New("hook"), URL: "https://hooks.example.com/x",
		Events: []string{"task.finished"}, SecretName: "k", CreatedBy: "test"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sql.Exec(ctx, `insert into podium.tasks (id, spec) values ('task_a', '{"image":"busybox"}'), ('task_b', '{"image":"busybox"}')`); err != nil {
		t.Fatal(err)
	}
	// A change rolled back leaves no event.
	tx, err := sql.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "update podium.tasks set state = 'cancelled' where id = 'task_b'"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if rows, err := st.ListOutbox(ctx, 10); err != nil || len(rows) != 0 {
		t.Fatalf("outbox after a rolled-back cancel: %v %v", rows, err)
	}
	// A lost task is task.lost, which this webhook does not take.
	if _, err := sql.Exec(ctx, "update podium.tasks set state = 'lost' where id = 'task_b'"); err != nil {
		t.Fatal(err)
	}
	if _, err := sql.Exec(ctx, "update podium.tasks set state = 'cancelled' where id = 'task_a'"); err != nil {
		t.Fatal(err)
	}
	first, err := st.ClaimOutbox(ctx, 10, time.Hour)
	if err != nil || len(first) != 1 {
		t.Fatalf("claim: %v %v, want the one task.finished row", first, err)
	}
	r := first[0]
	var ev struct{ Schema, ID, Type string }
	if err := json.Unmarshal(r.Body, &ev); err != nil || ev.Schema != "podium.event.v1" || ev.ID != r.EventID || ev.Type != "task.finished" ||
		r.Attempts != 1 || r.WebhookID == nil || *r.WebhookID != hook.ID || r.URL != hook.URL {
		t.Fatalf("claimed %+v (%s)", r, r.Body)
	}
	if again, err := st.ClaimOutbox(ctx, 10, time.Hour); err != nil || len(again) != 0 {
		t.Fatalf("a second claim inside the lease: %v %v, want nothing", again, err)
	}
	// The first claimer fails and asks for a retry now; the retry is
	// claimed with a lease that runs out at once (its claimer died), and a
	// third claim takes it over.
	if err := st.RecordDelivery(ctx, store.HookDelivery{Row: r, Status: store.DeliveryFailed, Error: "500", Next: time.Now()}); err != nil {
		t.Fatal(err)
	}
	second, err := st.ClaimOutbox(ctx, 10, 0)
	if err != nil || len(second) != 1 || second[0].Attempts != 2 || second[0].EventID != r.EventID {
		t.Fatalf("claim after the failure: %+v %v", second, err)
	}
	third, err := st.ClaimOutbox(ctx, 10, time.Hour)
	if err != nil || len(third) != 1 || third[0].Attempts != 3 || string(third[0].Body) != string(r.Body) {
		t.Fatalf("claim after the lease ran out: %+v %v", third, err)
	}
	// The dead claimer's late report changes nothing.
	if err := st.RecordDelivery(ctx, store.HookDelivery{Row: second[0], Status: store.DeliveryDelivered}); err != nil {
		t.Fatal(err)
	}
	if rows, _ := st.ListOutbox(ctx, 10); len(rows) != 1 || rows[0].Attempts != 3 {
		t.Fatalf("outbox after a stale report: %+v", rows)
	}
	if err := st.RecordDelivery(ctx, store.HookDelivery{Row: third[0], Status: store.DeliveryDelivered}); err != nil {
		t.Fatal(err)
	}
	ws, err := st.ListWebhooks(ctx)
	if err != nil || len(ws) != 1 || ws[0].Pending != 0 || ws[0].LastStatus != store.DeliveryDelivered || ws[0].LastError != "" {
		t.Fatalf("webhooks after delivery: %+v %v", ws, err)
	}
	if rows, _ := st.ListOutbox(ctx, 10); len(rows) != 0 {
		t.Fatalf("outbox after delivery: %+v, want the row gone", rows)
	}
}
