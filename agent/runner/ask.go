package runner

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/podiumhq/podium/agent/inbox"
)

// askPoll is how often ask looks for a message while it waits. A person typed
// the message; a tenth of a second is well below what they notice.
const askPoll = 100 * time.Millisecond

func ask(args []string, stdout, stderr io.Writer) int {
	dflt := os.Getenv(inbox.DirEnv)
	if dflt == "" {
		dflt = inbox.ContainerDir
	}
	fs := flag.NewFlagSet("ask", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("inbox", dflt, "the task's inbox directory (default $"+inbox.DirEnv+" or "+inbox.ContainerDir+")")
	timeout := fs.Duration("timeout", 0, "give up after this long, exiting 1 (0: wait as long as it takes)")
	if err := fs.Parse(args); err != nil {
		return ExitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "podium-runner ask: unexpected argument %q\n", fs.Arg(0))
		return ExitUsage
	}
	if st, err := os.Stat(*dir); err != nil || !st.IsDir() {
		fmt.Fprintf(stderr, "podium-runner ask: there is no inbox at %s: ask reads the messages of a Podium task "+
			"and runs inside one (elsewhere, pass --inbox DIR)\n", *dir)
		return ExitRunnerError
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if *timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *timeout)
		defer cancel()
	}
	err := inbox.Take(ctx, *dir, askPoll, func(_ int64, text []byte) error {
		// A message ends with a newline on output, so that two asks in a
		// row print two lines, and $(podium-runner ask) is the text itself.
		if len(text) == 0 || text[len(text)-1] != '\n' {
			text = append(text, '\n')
		}
		_, err := stdout.Write(text)
		return err
	})
	switch {
	case err == nil:
		return 0
	case errors.Is(err, context.DeadlineExceeded):
		fmt.Fprintf(stderr, "podium-runner ask: no message within %s\n", *timeout)
		return ExitNoMessage
	case errors.Is(err, context.Canceled):
		return 128 + int(syscall.SIGTERM)
	default:
		fmt.Fprintf(stderr, "podium-runner ask: %v\n", err)
		return ExitRunnerError
	}
}
