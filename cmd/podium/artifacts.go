package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/term"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

var artifactsCommand = &command{
	name:     "artifacts",
	synopsis: "[--json] ID",
	summary:  "List the files a task uploaded, with their sizes and SHA-256.",
	detail: `
Prints NAME, SIZE and SHA256 for each artifact the task's node uploaded (and
ATTEMPT when more than one run of the task left artifacts), or with --json one
JSON array (size in bytes, a number). A task with none prints
nothing on stdout and says so on stderr.

Get one with: podium artifact get ID NAME`,
	usageExit: exitUsage,
	run:       runArtifacts,
}

func runArtifacts(ctx context.Context, c *cli, cmd *command, args []string) int {
	fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print a JSON array instead of a table")
	id, cl, code, ok := c.taskCommand(cmd, fs, args)
	if !ok {
		return code
	}
	resp, err := unary(ctx, cl, func(ctx context.Context, e *endpoint) (*connect.Response[podiumv1.ListArtifactsResponse], error) {
		return e.tasks.ListArtifacts(ctx, connect.NewRequest(&podiumv1.ListArtifactsRequest{Id: id}))
	})
	if err != nil {
		return c.failed(cl, err, fmt.Sprintf("no task %s", id))
	}
	list := resp.Msg.GetArtifacts()
	if *asJSON {
		return writeJSONList(c, list)
	}
	if len(list) == 0 {
		// Say why when retention removed them (one more call, only then).
		if t, err := unary(ctx, cl, func(ctx context.Context, e *endpoint) (*connect.Response[podiumv1.GetResponse], error) {
			return e.tasks.Get(ctx, connect.NewRequest(&podiumv1.GetRequest{Id: id}))
		}); err == nil && t.Msg.GetTask().GetArtifactsExpiredAt() != nil {
			fmt.Fprintf(c.stderr, "→ the artifacts of task %s expired by retention on %s (the coordinator's --retain-artifacts)\n",
				id, expiryDay(t.Msg.GetTask().GetArtifactsExpiredAt()))
			return exitOK
		}
		fmt.Fprintf(c.stderr, "→ task %s has no artifacts\n", id)
		return exitOK
	}
	writeArtifactTable(c.stdout, list)
	return exitOK
}

func writeArtifactTable(w io.Writer, list []*podiumv1.Artifact) {
	attempts := map[int32]bool{}
	for _, a := range list {
		attempts[a.GetAttempt()] = true
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	if len(attempts) > 1 {
		fmt.Fprintln(tw, "ATTEMPT\tNAME\tSIZE\tSHA256")
		for _, a := range list {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", a.GetAttempt(), a.GetName(), humanSize(a.GetSize()), a.GetSha256())
		}
	} else {
		fmt.Fprintln(tw, "NAME\tSIZE\tSHA256")
		for _, a := range list {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", a.GetName(), humanSize(a.GetSize()), a.GetSha256())
		}
	}
	tw.Flush()
}

var artifactGetCommand = &command{
	name:     "artifact get",
	synopsis: "[-o FILE|-] [--attempt N] [--url] ID NAME",
	summary:  "Download one artifact of a task, verifying its SHA-256.",
	detail: `
Streams the artifact through the coordinator into FILE (default: the last
part of NAME, in the current directory; a directory puts it inside), or to
stdout with "-o -". The bytes are checked against the size and SHA-256 the
coordinator stored when the node uploaded them. A file is written under a
temporary name and only renamed into place once it is verified, so FILE never
holds a partial or corrupt download; on a mismatch nothing is left and get
exits 125 (with "-o -", what was written to stdout must be discarded).

When stderr is a terminal, a progress bar is shown there.

--url prints a presigned URL of the object store instead, and says how long
it is valid: anyone holding it can download the artifact until then, without
a Podium token, from wherever the object store is reachable.

--attempt picks the run of the task; the default is the newest run that
uploaded NAME.`,
	usageExit: exitUsage,
	run:       runArtifactGet,
}

func runArtifactGet(ctx context.Context, c *cli, cmd *command, args []string) int {
	fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	out := fs.String("o", "", "write to `FILE` (\"-\" for stdout); default: the last part of NAME")
	fs.StringVar(out, "output", "", "same as -o")
	attempt := fs.Int("attempt", 0, "the task's run `N` (default: the newest that has NAME)")
	asURL := fs.Bool("url", false, "print a presigned download URL instead of downloading")
	rest, done, code := c.parseFlags(cmd, fs, args)
	if done {
		return code
	}
	if len(rest) != 2 {
		return c.usageFailure(cmd, fs, errors.New("want a task ID and an artifact NAME (see podium artifacts ID)"))
	}
	if *attempt < 0 || *attempt > math.MaxInt32 {
		return c.usageFailure(cmd, fs, fmt.Errorf("--attempt %d: give a run number from 1 (or 0, the default, for the newest)", *attempt))
	}
	if *asURL && *out != "" {
		return c.usageFailure(cmd, fs, errors.New("--url prints a URL and downloads nothing: leave out -o"))
	}
	cl, code, ok := c.dial(cmd)
	if !ok {
		return code
	}
	id, name := rest[0], rest[1]
	if *asURL {
		return c.artifactURL(ctx, cl, id, name, int32(*attempt))
	}
	return c.downloadArtifact(ctx, cl, id, name, int32(*attempt), *out)
}

func (c *cli) artifactURL(ctx context.Context, cl *client, id, name string, attempt int32) int {
	resp, err := unary(ctx, cl, func(ctx context.Context, e *endpoint) (*connect.Response[podiumv1.ArtifactURLResponse], error) {
		return e.tasks.ArtifactURL(ctx, connect.NewRequest(&podiumv1.ArtifactURLRequest{Id: id, Name: name, Attempt: attempt}))
	})
	if err != nil {
		return c.failed(cl, err, "")
	}
	m := resp.Msg
	fmt.Fprintln(c.stdout, m.GetUrl())
	valid := time.Duration(m.GetValidSeconds()) * time.Second
	fmt.Fprintf(c.stderr, "→ valid for %s, until %s; anyone with the URL can download %s (%s, sha256 %s) until then\n",
		valid, m.GetExpiresAt().AsTime().Local().Format(time.RFC3339), m.GetArtifact().GetName(),
		humanSize(m.GetArtifact().GetSize()), m.GetArtifact().GetSha256())
	return exitOK
}

// downloadArtifact streams an artifact to out and verifies it. A file is
// written beside its destination under a temporary name and renamed into
// place only once its size and digest match, so an interrupted or corrupt
// download never leaves something that looks like the artifact.
func (c *cli) downloadArtifact(ctx context.Context, cl *client, id, name string, attempt int32, out string) int {
	// An interrupt must still remove the temporary file: catch it and end the
	// download through the context instead of dying mid-write.
	sigs := c.signals
	if sigs == nil {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
		defer signal.Stop(ch)
		sigs = ch
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	interrupted := make(chan struct{})
	go func() {
		select {
		case <-sigs:
			close(interrupted)
			cancel()
		case <-ctx.Done():
		}
	}()
	fail := func(err error) int {
		select {
		case <-interrupted:
			fmt.Fprintln(c.stderr, "podium: interrupted; nothing was saved")
			return exitCancel
		default:
		}
		return c.failed(cl, err, "")
	}

	st, err := cl.current().tasks.DownloadArtifact(ctx, connect.NewRequest(&podiumv1.DownloadArtifactRequest{Id: id, Name: name, Attempt: attempt}))
	if err != nil {
		return fail(err)
	}
	defer st.Close()
	if !st.Receive() {
		if err := st.Err(); err != nil {
			return fail(err)
		}
		return fail(errors.New("the coordinator ended the download without sending the artifact"))
	}
	a := st.Msg().GetArtifact()
	if a == nil {
		return fail(errors.New("the coordinator's download did not start with the artifact's size and digest: is it as new as this podium?"))
	}

	dest, w, commit, discard, err := c.openDestination(out, a.GetName())
	if err != nil {
		fmt.Fprintf(c.stderr, "podium: %v\n", err)
		return exitPodium
	}
	defer discard()
	var bar *progressBar
	if c.stderrIsTerminal() {
		bar = newProgressBar(c.stderr, a.GetName(), a.GetSize())
	}
	h := sha256.New()
	var got int64
	for st.Receive() {
		chunk := st.Msg().GetChunk()
		if _, err := w.Write(chunk); err != nil {
			bar.abandon()
			fmt.Fprintf(c.stderr, "podium: write %s: %v\n", dest, err)
			return exitPodium
		}
		h.Write(chunk)
		got += int64(len(chunk))
		bar.set(got)
	}
	if err := st.Err(); err != nil {
		bar.abandon()
		return fail(err)
	}
	bar.finish()
	if sum := hex.EncodeToString(h.Sum(nil)); got != a.GetSize() || sum != a.GetSha256() {
		what := "it was deleted"
		if dest == "-" {
			what = "discard what was written to stdout"
		}
		fmt.Fprintf(c.stderr, "podium: artifact %s of task %s is corrupt: received %d bytes with SHA-256 %s, but %d bytes with SHA-256 %s were stored; %s and nothing was saved\n",
			a.GetName(), id, got, sum, a.GetSize(), a.GetSha256(), what)
		return exitPodium
	}
	if err := commit(); err != nil {
		fmt.Fprintf(c.stderr, "podium: save %s: %v\n", dest, err)
		return exitPodium
	}
	if dest != "-" {
		fmt.Fprintf(c.stderr, "→ saved %s to %s (%s, sha256 verified)\n", a.GetName(), dest, humanSize(got))
	}
	return exitOK
}

// openDestination opens where a download goes: stdout for "-", else a
// temporary file beside dest. commit makes the download final (renames the
// file into place); discard removes anything not committed and is safe to
// call after commit.
func (c *cli) openDestination(out, name string) (dest string, w io.Writer, commit func() error, discard func(), err error) {
	if out == "-" {
		return "-", c.stdout, func() error { return nil }, func() {}, nil
	}
	dest = out
	if dest == "" {
		dest = path.Base(name)
	} else if fi, err := os.Stat(dest); err == nil && fi.IsDir() {
		dest = filepath.Join(dest, path.Base(name))
	}
	tmp, err := os.CreateTemp(filepath.Dir(dest), "."+filepath.Base(dest)+".podium-*")
	if err != nil {
		return "", nil, nil, nil, fmt.Errorf("cannot write %s: %w", dest, err)
	}
	committed := false
	commit = func() error {
		if err := tmp.Chmod(0o644); err != nil {
			return err
		}
		if err := tmp.Close(); err != nil {
			return err
		}
		if err := os.Rename(tmp.Name(), dest); err != nil {
			return err
		}
		committed = true
		return nil
	}
	discard = func() {
		if !committed {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}
	return dest, tmp, commit, discard, nil
}

// stderrIsTerminal decides whether a progress bar is drawn: only for a
// person watching, never into a log file or a pipe.
func (c *cli) stderrIsTerminal() bool {
	if c.isTerminal != nil {
		return c.isTerminal()
	}
	f, ok := c.stderr.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// progressBar draws "name  42% [=====>    ] 12.0 MiB / 28.0 MiB  5.1 MiB/s"
// on one line of a terminal, redrawn at most ten times a second. A nil bar
// draws nothing, so callers need not check.
type progressBar struct {
	w           io.Writer
	name        string
	total, done int64
	start, last time.Time
}

func newProgressBar(w io.Writer, name string, total int64) *progressBar {
	now := time.Now()
	return &progressBar{w: w, name: name, total: total, start: now}
}

func (p *progressBar) set(done int64) {
	if p == nil {
		return
	}
	p.done = done
	if now := time.Now(); now.Sub(p.last) >= 100*time.Millisecond {
		p.last = now
		p.draw()
	}
}

func (p *progressBar) draw() {
	frac := 1.0
	if p.total > 0 {
		frac = min(float64(p.done)/float64(p.total), 1)
	}
	const width = 30
	filled := int(frac * width)
	bar := strings.Repeat("=", filled)
	if filled < width {
		bar += ">" + strings.Repeat(" ", width-filled-1)
	}
	rate := ""
	if secs := time.Since(p.start).Seconds(); secs > 0.2 {
		rate = "  " + humanSize(int64(float64(p.done)/secs)) + "/s"
	}
	name := p.name
	if r := []rune(name); len(r) > 30 {
		name = "…" + string(r[len(r)-29:])
	}
	// \r returns to the line's start and \033[K clears what a longer previous
	// draw left behind.
	fmt.Fprintf(p.w, "\r%s %3.0f%% [%s] %s / %s%s\033[K", name, frac*100, bar, humanSize(p.done), humanSize(p.total), rate)
}

// finish draws the bar complete and ends its line.
func (p *progressBar) finish() {
	if p == nil {
		return
	}
	p.draw()
	fmt.Fprint(p.w, "\n")
}

// abandon ends the bar's line where it stands, so an error message that
// follows starts on a line of its own.
func (p *progressBar) abandon() {
	if p == nil {
		return
	}
	fmt.Fprint(p.w, "\n")
}

// humanSize is a byte count in the largest binary unit that keeps it at
// least 1: "512 B", "1.5 KiB", "23.0 MiB".
func humanSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
