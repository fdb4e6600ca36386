package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"

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
		return c.usageFailure(cmd, fs, errors.New("want the webhook's ID (see podium webhook ls)"))
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
