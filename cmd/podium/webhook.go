package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

var webhookAddCommand = &command{
	name:     "webhook add",
	synopsis: "URL [--events task.finished,task.lost,node.offline] [--secret-name S] [--name N]",
	summary:  "POST events to URL, signed and retried for 24 h (admin).",
	detail: `
The coordinator POSTs a JSON event (schema podium.event.v1, see
docs/webhooks.md) to URL for each event named in --events (all three by
default): task.finished (a task succeeded, failed or was cancelled),
task.lost (its node was lost) and node.offline (the watchdog marked a node
offline). Each POST carries Podium-Signature: t=<unix seconds>,v1=<hex
HMAC-SHA256 of "<t>.<body>"> under the signing secret, and Podium-Event-Id,
the same on every retry. Failed deliveries are retried with backoff for 24 h.
--secret-name signs with a stored secret (podium secret set); without it the
coordinator generates one and prints it this once. At most 100 webhooks.`,
	usageExit: exitUsage,
	run:       runWebhookAdd,
}

func runWebhookAdd(ctx context.Context, c *cli, cmd *command, args []string) int {
	fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	events := fs.String("events", "", "comma-separated `EVENTS` to send (default all: task.finished,task.lost,node.offline)")
	secretName := fs.String("secret-name", "", "stored secret `S` whose value signs the events (default: a generated one)")
	name := fs.String("name", "", "a `N`ame for people (a-z, 0-9, '.', '_', '-', at most 63 bytes)")
	rest, done, code := c.parseFlags(cmd, fs, args)
	if done {
		return code
	}
	if len(rest) != 1 {
		return c.usageFailure(cmd, fs, errors.New("want the URL to POST events to"))
	}
	var evs []string
	for e := range strings.SplitSeq(*events, ",") {
		if e = strings.TrimSpace(e); e != "" {
			evs = append(evs, e)
		}
	}
	cl, code, ok := c.dial(cmd)
	if !ok {
		return code
	}
	resp, err := unary(ctx, cl, func(ctx context.Context, e *endpoint) (*connect.Response[podiumv1.WebhookServiceAddResponse], error) {
		return e.webhooks.Add(ctx, connect.NewRequest(&podiumv1.WebhookServiceAddRequest{
			Url: rest[0], Events: evs, SecretName: *secretName, Name: *name}))
	})
	if err != nil {
		return c.failed(cl, err, "")
	}
	w := resp.Msg.GetWebhook()
	fmt.Fprintf(c.stderr, "→ webhook %s added for %s\n", w.GetId(), strings.Join(w.GetEvents(), ", "))
	if s := resp.Msg.GetSecret(); s != "" {
		fmt.Fprintln(c.stderr, "  its signing secret, shown this once (the coordinator keeps it sealed, out of reach of tasks):")
		fmt.Fprintln(c.stdout, s)
	}
	return exitOK
}

var webhookLsCommand = &command{
	name:      "webhook ls",
	synopsis:  "[--json]",
	summary:   "List webhooks: events, pending deliveries, how the last one went (admin).",
	usageExit: exitUsage,
	run:       runWebhookLs,
}

func runWebhookLs(ctx context.Context, c *cli, cmd *command, args []string) int {
	return runAdminList(ctx, c, cmd, args, func(ctx context.Context, e *endpoint) ([]*podiumv1.Webhook, error) {
		resp, err := e.webhooks.List(ctx, connect.NewRequest(&podiumv1.WebhookServiceListRequest{}))
		if err != nil {
			return nil, err
		}
		return resp.Msg.GetWebhooks(), nil
	}, []string{"ID", "NAME", "URL", "EVENTS", "PENDING", "LAST", "ERROR"}, func(w *podiumv1.Webhook) []string {
		last := cmp.Or(w.GetLastStatus(), "-")
		if w.GetLastAttemptAt() != nil {
			last += " " + w.GetLastAttemptAt().AsTime().Local().Format("2006-01-02 15:04:05")
		}
		errText := strings.Join(strings.Fields(w.GetLastError()), " ")
		if len(errText) > 80 {
			errText = errText[:80] + "…"
		}
		return []string{w.GetId(), cmp.Or(w.GetName(), "-"), w.GetUrl(), strings.Join(w.GetEvents(), ","),
			strconv.FormatInt(w.GetPending(), 10), last, cmp.Or(errText, "-")}
	})
}

// errWebhookID is the usage error of a command that takes one webhook ID.
var errWebhookID = errors.New("want the webhook's ID (see podium webhook ls)")

var webhookTestCommand = &command{
	name:     "webhook test",
	synopsis: "ID [--wait DURATION]",
	summary:  "Send a webhook.test event to a webhook and say how its delivery went (admin).",
	detail: `
Queues a webhook.test event for the webhook, signed and delivered like any
other (docs/webhooks.md), and waits up to --wait (default 30s; 0: do not
wait) for the webhook's next delivery attempt: exits 0 when it was
delivered, 125 with the receiver's answer when it failed (the event is then
retried like any other: podium webhook ls).`,
	usageExit: exitUsage,
	run:       runWebhookTest,
}

var webhookRedeliverCommand = &command{
	name:      "webhook redeliver",
	synopsis:  "ID",
	summary:   "Retry now every event still waiting for a webhook, instead of after its backoff (admin).",
	detail:    "\nUse it once the receiver is fixed. Delivery is at least once: a receiver drops a repeat by its Podium-Event-Id.",
	usageExit: exitUsage,
	run:       runWebhookRedeliver,
}

func runWebhookTest(ctx context.Context, c *cli, cmd *command, args []string) int {
	fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	waitFor := fs.Duration("wait", 30*time.Second, "how long to wait for the delivery (0: do not wait)")
	rest, done, code := c.parseFlags(cmd, fs, args)
	if done {
		return code
	}
	if len(rest) != 1 {
		return c.usageFailure(cmd, fs, errWebhookID)
	}
	if *waitFor < 0 {
		return c.usageFailure(cmd, fs, errors.New("--wait takes a duration, 0 or more"))
	}
	cl, code, ok := c.dial(cmd)
	if !ok {
		return code
	}
	id := rest[0]
	latest := func() (*podiumv1.Webhook, error) {
		resp, err := unary(ctx, cl, func(ctx context.Context, e *endpoint) (*connect.Response[podiumv1.WebhookServiceListResponse], error) {
			return e.webhooks.List(ctx, connect.NewRequest(&podiumv1.WebhookServiceListRequest{}))
		})
		if err != nil {
			return nil, err
		}
		for _, w := range resp.Msg.GetWebhooks() {
			if w.GetId() == id {
				return w, nil
			}
		}
		return nil, nil
	}
	before, err := latest()
	if err != nil {
		return c.failed(cl, err, "")
	}
	resp, err := unary(ctx, cl, func(ctx context.Context, e *endpoint) (*connect.Response[podiumv1.WebhookServiceTestResponse], error) {
		return e.webhooks.Test(ctx, connect.NewRequest(&podiumv1.WebhookServiceTestRequest{Id: id}))
	})
	if err != nil {
		return c.failed(cl, err, "")
	}
	fmt.Fprintf(c.stderr, "→ test event %s queued for webhook %s\n", resp.Msg.GetEventId(), id)
	if *waitFor == 0 {
		return exitOK
	}
	// The webhook's next attempt after the event was queued is the test
	// event's, or one of an event queued before it (deliveries go oldest
	// first): either says whether the receiver answers.
	var since time.Time
	if before != nil && before.GetLastAttemptAt() != nil {
		since = before.GetLastAttemptAt().AsTime()
	}
	deadline := time.Now().Add(*waitFor)
	for {
		w, err := latest()
		if err != nil {
			return c.failed(cl, err, "")
		}
		if w != nil && w.GetLastAttemptAt() != nil && w.GetLastAttemptAt().AsTime().After(since) {
			if w.GetLastStatus() == "delivered" {
				fmt.Fprintf(c.stderr, "→ delivered to %s\n", w.GetUrl())
				return exitOK
			}
			fmt.Fprintf(c.stderr, "podium: the delivery to %s %s: %s (it is retried with backoff; podium webhook redeliver %s retries now)\n",
				w.GetUrl(), w.GetLastStatus(), w.GetLastError(), id)
			return exitPodium
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(c.stderr, "podium: no delivery attempt to webhook %s within %s; podium webhook ls shows how it goes\n", id, *waitFor)
			return exitPodium
		}
		select {
		case <-ctx.Done():
			return exitCancel
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func runWebhookRedeliver(ctx context.Context, c *cli, cmd *command, args []string) int {
	fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	rest, done, code := c.parseFlags(cmd, fs, args)
	if done {
		return code
	}
	if len(rest) != 1 {
		return c.usageFailure(cmd, fs, errWebhookID)
	}
	cl, code, ok := c.dial(cmd)
	if !ok {
		return code
	}
	resp, err := unary(ctx, cl, func(ctx context.Context, e *endpoint) (*connect.Response[podiumv1.WebhookServiceRedeliverResponse], error) {
		return e.webhooks.Redeliver(ctx, connect.NewRequest(&podiumv1.WebhookServiceRedeliverRequest{Id: rest[0]}))
	})
	if err != nil {
		return c.failed(cl, err, "")
	}
	fmt.Fprintf(c.stderr, "→ %d waiting events of webhook %s are retried now\n", resp.Msg.GetRetried(), rest[0])
	return exitOK
}

var webhookRmCommand = &command{
	name:      "webhook rm",
	synopsis:  "ID",
	summary:   "Remove a webhook and its pending deliveries (admin).",
	usageExit: exitUsage,
	run:       runWebhookRm,
}

func runWebhookRm(ctx context.Context, c *cli, cmd *command, args []string) int {
	fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	rest, done, code := c.parseFlags(cmd, fs, args)
	if done {
		return code
	}
	if len(rest) != 1 {
		return c.usageFailure(cmd, fs, errWebhookID)
	}
	cl, code, ok := c.dial(cmd)
	if !ok {
		return code
	}
	if _, err := unary(ctx, cl, func(ctx context.Context, e *endpoint) (*connect.Response[podiumv1.WebhookServiceRemoveResponse], error) {
		return e.webhooks.Remove(ctx, connect.NewRequest(&podiumv1.WebhookServiceRemoveRequest{Id: rest[0]}))
	}); err != nil {
		return c.failed(cl, err, "")
	}
	fmt.Fprintf(c.stderr, "→ webhook %s removed\n", rest[0])
	return exitOK
}
