package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"connectrpc.com/connect"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// maxMessageBytes is the coordinator's bound on one message
// (coordinator/tasks.MaxMessageBytes). It is checked here so that a message
// read from stdin is never read past it, and an oversized one is refused
// before anything is sent.
const maxMessageBytes = 64 << 10

var taskSendCommand = &command{
	name:     "task send",
	synopsis: "ID TEXT...",
	summary:  "Send a message to a running task's inbox.",
	detail: `
The words of TEXT are joined with spaces into one message. TEXT "-" alone
reads the message from stdin instead, up to 64 KiB, without its final newline
(so that "echo yes | podium task send ID -" sends what "podium task send ID
yes" does). Put "--" before a TEXT that starts with a dash. A message of only
spaces is refused as empty.

The task must be on a node (scheduled, provisioning or running): a queued or
ended task cannot take messages. send does not wait for the task to read the
message; it prints "→ message N sent" on stderr once the coordinator has
queued it, and the task's log (podium logs) notes it too.`,
	usageExit: exitUsage,
	run:       runTaskSend,
}

func runTaskSend(ctx context.Context, c *cli, cmd *command, args []string) int {
	fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	rest, done, code := c.parseFlags(cmd, fs, args)
	if done {
		return code
	}
	if len(rest) == 0 {
		return c.usageFailure(cmd, fs, errors.New("want a task ID and the message TEXT"))
	}
	if len(rest) == 1 {
		return c.usageFailure(cmd, fs, errors.New("want the message TEXT after the task ID (or - to read it from stdin)"))
	}
	id := rest[0]
	var text string
	if len(rest) == 2 && rest[1] == "-" {
		var err error
		if text, err = readMessage(c.stdin); err != nil {
			var ue *usageError
			if errors.As(err, &ue) {
				return c.usageFailure(cmd, fs, err)
			}
			fmt.Fprintf(c.stderr, "podium %s: %v\n", cmd.name, err)
			return exitPodium
		}
		if strings.TrimSpace(text) == "" {
			return c.usageFailure(cmd, fs, errors.New("stdin is empty (or blank): nothing to send"))
		}
		if !utf8.ValidString(text) {
			return c.usageFailure(cmd, fs, errors.New("stdin is not valid UTF-8 text: a message is text (encode binary data, e.g. with base64)"))
		}
	} else {
		text = strings.Join(rest[1:], " ")
		if strings.TrimSpace(text) == "" {
			return c.usageFailure(cmd, fs, errors.New("the message TEXT is empty: nothing to send"))
		}
		if len(text) > maxMessageBytes {
			return c.usageFailure(cmd, fs, fmt.Errorf("the message is %d bytes, more than the %d (64 KiB) a message may hold", len(text), maxMessageBytes))
		}
	}
	cl, code, ok := c.dial(cmd)
	if !ok {
		return code
	}
	resp, err := unary(ctx, cl, func(ctx context.Context, e *endpoint) (*connect.Response[podiumv1.SendResponse], error) {
		return e.tasks.Send(ctx, connect.NewRequest(&podiumv1.SendRequest{Id: id, Text: text}))
	})
	if err != nil {
		return c.failed(cl, err, fmt.Sprintf("no task %s", id))
	}
	fmt.Fprintf(c.stderr, "→ message %d sent\n", resp.Msg.GetMessageId())
	return exitOK
}

// readMessage reads a message from stdin, without its final newline. It reads
// at most a few bytes past the limit, so that "yes | podium task send ID -"
// fails instead of filling memory.
func readMessage(stdin io.Reader) (string, error) {
	// The limit, a final "\r\n", and one byte to tell that there is more.
	b, err := io.ReadAll(io.LimitReader(stdin, maxMessageBytes+3))
	if err != nil {
		return "", fmt.Errorf("read stdin: %w", err)
	}
	text := string(b)
	if len(b) <= maxMessageBytes+2 {
		if t, ok := strings.CutSuffix(text, "\r\n"); ok {
			text = t
		} else {
			text = strings.TrimSuffix(text, "\n")
		}
	}
	if len(text) > maxMessageBytes {
		return "", usageErrorf("stdin holds more than the %d bytes (64 KiB) a message may hold", maxMessageBytes)
	}
	return text, nil
}
