// Package identity keeps the node's identity: which coordinator it belongs
// to and the node id and key it was given at enrollment.
//
// The key is the node's only credential, returned once by the coordinator and
// never again (only its SHA-256 is stored there), so the file that holds it is
// written atomically and readable by the agent's user alone: a torn write or a
// world-readable key would each cost a re-enrollment.
package identity

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/agent/transport"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/proto/podium/v1/podiumv1connect"
)

// FileName is the identity file's name inside the agent's data directory.
const FileName = "identity.json"

// ErrNotEnrolled is returned by Load when the data directory holds no
// identity. The agent cannot do anything useful until it is enrolled.
var ErrNotEnrolled = errors.New("this node is not enrolled")

// ErrAlreadyEnrolled is returned by Enroll when the data directory already
// holds an identity and Force is not set. Enrolling again creates a new node
// at the coordinator and orphans the old one, so it must be deliberate.
var ErrAlreadyEnrolled = errors.New("this node is already enrolled")

// Identity is what identity.json holds.
type Identity struct {
	// CoordinatorURL is where the node enrolled, and where it connects.
	CoordinatorURL string `json:"coordinator_url"`
	NodeID         string `json:"node_id"`
	// NodeKey authenticates every call the node makes. Treat it as a password.
	NodeKey string `json:"node_key"`
	// Labels are the labels the coordinator gave the node at enrollment. The
	// coordinator's copy is the truth (an operator can change it later); this
	// one is for the operator reading the file.
	Labels []string `json:"labels,omitempty"`
	// Hostname is the name the node enrolled under (enroll --hostname, or
	// the machine's hostname then). The agent reports it in every Hello
	// unless run --hostname overrides it, so the name given at enrollment
	// sticks.
	Hostname string `json:"hostname,omitempty"`
}

// Path is where the identity file lives in dataDir.
func Path(dataDir string) string { return filepath.Join(dataDir, FileName) }

// Load reads the identity from dataDir. A missing file is ErrNotEnrolled,
// wrapped with the command that fixes it.
func Load(dataDir string) (*Identity, error) {
	path := Path(dataDir)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s does not exist; enroll the node first with "+
			"`podium-agent enroll --coordinator URL --token T` (an operator creates the token)", ErrNotEnrolled, path)
	}
	if err != nil {
		return nil, fmt.Errorf("read node identity: %w", err)
	}
	var id Identity
	if err := json.Unmarshal(b, &id); err != nil {
		return nil, fmt.Errorf("node identity %s is corrupt (%v); enroll the node again with "+
			"`podium-agent enroll --force --coordinator URL --token T`", path, err)
	}
	if id.NodeID == "" || id.NodeKey == "" || id.CoordinatorURL == "" {
		return nil, fmt.Errorf("node identity %s is incomplete (it needs coordinator_url, node_id and node_key); "+
			"enroll the node again with `podium-agent enroll --force --coordinator URL --token T`", path)
	}
	return &id, nil
}

// Save writes the identity to dataDir atomically: the bytes go to a temporary
// file in the same directory, which is synced and then renamed over the old
// one, so a crash leaves either the old identity or the new one, never half of
// either. The directory is created 0700 and the file is 0600.
func Save(dataDir string, id *Identity) error {
	b, err := json.MarshalIndent(id, "", "  ")
	if err != nil {
		return fmt.Errorf("encode node identity: %w", err)
	}
	if err := writeAtomic(dataDir, FileName, append(b, '\n')); err != nil {
		return fmt.Errorf("write node identity: %w", err)
	}
	return nil
}

// writeAtomic writes b to dataDir/name through a synced temporary file in
// the same directory renamed over the old one, then syncs the directory. The
// directory is created 0700 and the file is 0600.
func writeAtomic(dataDir, name string, b []byte) error {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return fmt.Errorf("create data directory %s: %w", dataDir, err)
	}
	tmp, err := os.CreateTemp(dataDir, "."+name+".*")
	if err != nil {
		return err
	}
	tmpName := tmp.Name()
	defer os.Remove(tmpName) // a no-op once the rename succeeded
	// CreateTemp already makes the file 0600; Chmod says so explicitly and
	// survives a future change of that default.
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmpName, filepath.Join(dataDir, name)); err != nil {
		return err
	}
	// Make the rename itself durable.
	if d, err := os.Open(dataDir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// EnrollParams is what Enroll needs.
type EnrollParams struct {
	// DataDir is where the identity is saved.
	DataDir string
	// CoordinatorURL is the coordinator's base URL (http:// inside a
	// tailnet, https:// otherwise).
	CoordinatorURL string
	// Token is the single-use enrollment token an operator created.
	Token string
	// Labels the node asks for, added to the token's own.
	Labels []string
	// Hostname is how the node names itself.
	Hostname string
	// AgentVersion is reported to the coordinator.
	AgentVersion string
	// Force replaces an existing identity. Without it Enroll refuses with
	// ErrAlreadyEnrolled.
	Force bool
}

// enrollTimeout bounds the enrollment call. It is a single small request; a
// coordinator that does not answer in this long is not going to.
const enrollTimeout = 30 * time.Second

// Enroll exchanges an enrollment token for a node identity and saves it. The
// node key in the answer exists nowhere else, so if saving fails the error
// says so: the token is spent and the node must be enrolled again.
func Enroll(ctx context.Context, p EnrollParams) (*Identity, error) {
	if strings.TrimSpace(p.Token) == "" {
		return nil, errors.New("no enrollment token: ask an operator for one and pass it with --token")
	}
	base, err := transport.NormalizeURL(p.CoordinatorURL)
	if err != nil {
		return nil, err
	}
	if !p.Force {
		if old, err := Load(p.DataDir); err == nil {
			return nil, fmt.Errorf("%w as node %s of %s; to replace that identity (the old node stays behind at the "+
				"coordinator) run enroll again with --force", ErrAlreadyEnrolled, old.NodeID, old.CoordinatorURL)
		}
	}
	// Fail on an unwritable data directory before spending the token.
	if err := checkWritable(p.DataDir); err != nil {
		return nil, err
	}

	httpClient, err := transport.NewClient(base)
	if err != nil {
		return nil, err
	}
	client := podiumv1connect.NewNodeServiceClient(httpClient, base)
	ctx, cancel := context.WithTimeout(ctx, enrollTimeout)
	defer cancel()
	resp, err := client.Enroll(ctx, connect.NewRequest(&podiumv1.EnrollRequest{
		Token:        p.Token,
		Hostname:     p.Hostname,
		Labels:       p.Labels,
		AgentVersion: p.AgentVersion,
	}))
	if err != nil {
		return nil, explainEnrollError(base, err)
	}
	id := &Identity{
		CoordinatorURL: base,
		NodeID:         resp.Msg.GetNodeId(),
		NodeKey:        resp.Msg.GetNodeKey(),
		Labels:         resp.Msg.GetLabels(),
		Hostname:       p.Hostname,
	}
	if id.NodeID == "" || id.NodeKey == "" {
		return nil, fmt.Errorf("coordinator %s answered the enrollment without a node id or key; "+
			"check that it runs a compatible version", base)
	}
	if err := Save(p.DataDir, id); err != nil {
		return nil, fmt.Errorf("enrolled as node %s but could not save the identity (%w); the token is spent: "+
			"fix the data directory, then enroll again with a new token", id.NodeID, err)
	}
	return id, nil
}

func explainEnrollError(base string, err error) error {
	switch connect.CodeOf(err) {
	case connect.CodeUnauthenticated:
		return fmt.Errorf("the coordinator refused the enrollment token (%v): tokens are single-use and expire; "+
			"ask an operator for a new one", err)
	case connect.CodePermissionDenied:
		// The token is good but the coordinator will not enroll this
		// machine as asked (labels the token does not grant, an untagged
		// tailnet device): its message says why and what to do.
		var ce *connect.Error
		if errors.As(err, &ce) {
			return fmt.Errorf("the coordinator refused the enrollment: %s", ce.Message())
		}
		return fmt.Errorf("the coordinator refused the enrollment: %w", err)
	case connect.CodeUnavailable, connect.CodeDeadlineExceeded:
		return fmt.Errorf("could not reach the coordinator at %s (%v): check the URL and that this machine can "+
			"reach it", base, err)
	}
	return fmt.Errorf("enrollment at %s failed: %w", base, err)
}

// checkWritable makes sure dataDir exists with mode 0700 and can take a file.
func checkWritable(dataDir string) error {
	if dataDir == "" {
		return errors.New("no data directory given")
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return fmt.Errorf("create data directory %s: %w (run as the agent's user, or pick another --data-dir)", dataDir, err)
	}
	f, err := os.CreateTemp(dataDir, ".probe-*")
	if err != nil {
		return fmt.Errorf("data directory %s is not writable: %w (run as the agent's user, or pick another --data-dir)", dataDir, err)
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}
