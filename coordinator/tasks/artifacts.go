package tasks

import (
	"context"
	"errors"
	"fmt"
	"io"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podiumhq/podium/coordinator/artifacts"
	"github.com/podiumhq/podium/coordinator/store"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// downloadChunk is the size of one chunk of a download: big enough that
// per-message overhead is noise, small enough that a replica serving many
// downloads holds little.
const downloadChunk = 256 << 10

func (s *Service) artifactStore() (*artifacts.Service, error) {
	if s.artifacts == nil {
		return nil, connect.NewError(connect.CodeFailedPrecondition, artifacts.ErrNotConfigured)
	}
	return s.artifacts, nil
}

// ListArtifacts lists the files a task's attempts uploaded.
func (s *Service) ListArtifacts(ctx context.Context, req *connect.Request[podiumv1.ListArtifactsRequest]) (*connect.Response[podiumv1.ListArtifactsResponse], error) {
	if _, err := s.get(ctx, req.Msg.GetId()); err != nil {
		return nil, err
	}
	out := &podiumv1.ListArtifactsResponse{}
	if s.artifacts == nil {
		return connect.NewResponse(out), nil
	}
	as, err := s.artifacts.List(ctx, req.Msg.GetId())
	if err != nil {
		return nil, artifacts.ConnectError(err)
	}
	for _, a := range as {
		out.Artifacts = append(out.Artifacts, a.Proto())
	}
	return connect.NewResponse(out), nil
}

// artifactError is ConnectError, except that an artifact missing from a task
// whose artifacts retention removed says so and when, instead of "no such
// artifact", which reads like a wrong name.
func artifactError(t store.Task, err error) error {
	if errors.Is(err, artifacts.ErrNotFound) && t.ArtifactsExpiredAt != nil {
		return connect.NewError(connect.CodeNotFound, fmt.Errorf("the artifacts of %s expired by retention on %s (--retain-artifacts)",
			t.ID, Day(*t.ArtifactsExpiredAt)))
	}
	return artifacts.ConnectError(err)
}

// DownloadArtifact streams one artifact from the object store: first the
// artifact itself (size and digest, for progress and verification), then its
// bytes in chunks as they are read, so a replica holds one chunk per download
// whatever the artifact's size.
func (s *Service) DownloadArtifact(ctx context.Context, req *connect.Request[podiumv1.DownloadArtifactRequest], stream *connect.ServerStream[podiumv1.DownloadArtifactResponse]) error {
	t, err := s.get(ctx, req.Msg.GetId())
	if err != nil {
		return err
	}
	store, err := s.artifactStore()
	if err != nil {
		return err
	}
	a, body, err := store.Open(ctx, req.Msg.GetId(), req.Msg.GetName(), req.Msg.GetAttempt())
	if err != nil {
		return artifactError(t, err)
	}
	defer body.Close()
	if err := stream.Send(&podiumv1.DownloadArtifactResponse{Msg: &podiumv1.DownloadArtifactResponse_Artifact{Artifact: a.Proto()}}); err != nil {
		return err
	}
	buf := make([]byte, downloadChunk)
	var sent int64
	for {
		n, rerr := io.ReadFull(body, buf)
		if n > 0 {
			// Send marshals before it returns, so buf can be reused at once.
			if err := stream.Send(&podiumv1.DownloadArtifactResponse{Msg: &podiumv1.DownloadArtifactResponse_Chunk{Chunk: buf[:n]}}); err != nil {
				return err
			}
			sent += int64(n)
		}
		if errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF) {
			break
		}
		if rerr != nil {
			if ctx.Err() != nil {
				return nil
			}
			s.log.Warn("artifact download broke off", "task", a.TaskID, "name", a.Name, "sent", sent, "err", rerr)
			return artifacts.ConnectError(store.ReadFailed(rerr))
		}
	}
	if sent != a.Size {
		return connect.NewError(connect.CodeDataLoss, fmt.Errorf("artifact %q of task %s: the object store returned %d bytes, but %d were stored",
			a.Name, a.TaskID, sent, a.Size))
	}
	return nil
}

// ArtifactURL presigns a GET of one artifact and says how long it is valid.
func (s *Service) ArtifactURL(ctx context.Context, req *connect.Request[podiumv1.ArtifactURLRequest]) (*connect.Response[podiumv1.ArtifactURLResponse], error) {
	t, err := s.get(ctx, req.Msg.GetId())
	if err != nil {
		return nil, err
	}
	store, err := s.artifactStore()
	if err != nil {
		return nil, err
	}
	a, u, expires, err := store.URL(ctx, req.Msg.GetId(), req.Msg.GetName(), req.Msg.GetAttempt())
	if err != nil {
		return nil, artifactError(t, err)
	}
	return connect.NewResponse(&podiumv1.ArtifactURLResponse{
		Url: u.String(), ExpiresAt: timestamppb.New(expires),
		ValidSeconds: int64(store.Config().URLExpiry.Seconds()), Artifact: a.Proto(),
	}), nil
}
