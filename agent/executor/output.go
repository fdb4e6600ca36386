package executor

import (
	"context"
	"fmt"
	"io"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"
)

// OutputSource is where a task's stdout and stderr bytes come from.
//
// It is an interface because attaching to the container is only the first
// answer. Attach has one weakness that cannot be fixed from the outside: the
// bytes live only in the agent's memory, so an agent restart loses whatever it
// had not yet sent. The runner (DESIGN.md §4) will write framed, offset-stamped
// records to a file on the host, and a source that tails that file will replace
// this one without the executor changing.
type OutputSource interface {
	// Open connects to the output of a created container. It is called after
	// the container is created and before it is started, so that not one byte
	// written by the first instruction of the task can be missed.
	Open(ctx context.Context, containerID string) (Output, error)
}

// Output is one container's open output.
type Output interface {
	// Copy writes the container's stdout and stderr to the two writers, in the
	// order the container produced them within each stream, until the output
	// ends (the container exited and everything it wrote was delivered). It
	// returns nil at a clean end.
	Copy(stdout, stderr io.Writer) error
	// Close releases the source. It unblocks a Copy still in progress, which
	// is how a run abandons output it can no longer wait for.
	Close() error
}

// AttachSource reads output through the engine's attach endpoint.
//
// Attach is used rather than ContainerLogs on purpose: the logs endpoint goes
// through the log driver, and the json-file driver stores every line as a JSON
// string, which replaces invalid UTF-8 with U+FFFD. Attach hands over the raw
// multiplexed stream, so binary output arrives byte for byte.
type AttachSource struct {
	Docker *client.Client
}

// Open attaches to the container's stdout and stderr.
func (s AttachSource) Open(ctx context.Context, containerID string) (Output, error) {
	resp, err := s.Docker.ContainerAttach(ctx, containerID, container.AttachOptions{
		Stream: true,
		Stdout: true,
		Stderr: true,
	})
	if err != nil {
		return nil, fmt.Errorf("attach to container output: %w", err)
	}
	return &attachOutput{resp: resp}, nil
}

type attachOutput struct {
	resp types.HijackedResponse
}

func (o *attachOutput) Copy(stdout, stderr io.Writer) error {
	// The container runs without a TTY, so the engine multiplexes both streams
	// into one connection with an 8-byte header per frame; stdcopy splits them.
	_, err := stdcopy.StdCopy(stdout, stderr, o.resp.Reader)
	return err
}

func (o *attachOutput) Close() error {
	o.resp.Close()
	return nil
}
