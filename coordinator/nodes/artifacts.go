package nodes

import (
	"context"
	"errors"
	"fmt"
	"io"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podiumhq/podium/coordinator/artifacts"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// UploadArtifact takes one file a task produced and puts it in the object
// store.
//
// The node is the only party that can reach the container, and the
// coordinator is the only party that can reach the object store, so the bytes
// cross the control plane. That is deliberate: a presigned PUT straight from
// the node would save a hop, but every worker would then need a route and a
// credential to the object store, which is what the rest of the networking is
// built to avoid.
//
// The first message carries the metadata with the same node id and key Hello
// presents — an upload is its own HTTP request and rides on no session, so any
// replica takes it, whichever one holds the node's stream. Every later message
// is a chunk, streamed straight through: nothing here buffers a whole file.
func (s *Service) UploadArtifact(ctx context.Context, stream *connect.ClientStream[podiumv1.UploadArtifactRequest]) (*connect.Response[podiumv1.UploadArtifactResponse], error) {
	if !stream.Receive() {
		if err := stream.Err(); err != nil {
			return nil, err
		}
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("empty upload: the first message must be the artifact's meta"))
	}
	meta := stream.Msg().GetMeta()
	if meta == nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("the first message of an upload must be the artifact's meta, not a chunk"))
	}
	node, err := s.authenticate(ctx, meta.GetNodeId(), meta.GetNodeKey())
	if err != nil {
		s.log.Warn("artifact upload refused", "node", meta.GetNodeId(), "peer", stream.Peer().Addr, "err", err)
		return nil, err
	}
	if s.artifacts == nil {
		return nil, connect.NewError(connect.CodeFailedPrecondition, artifacts.ErrNotConfigured)
	}
	up := artifacts.Upload{NodeID: node.ID, TaskID: meta.GetTaskId(), Attempt: meta.GetAttempt(), Name: meta.GetName()}
	res, err := s.artifacts.Receive(ctx, up, func() ([]byte, error) {
		if !stream.Receive() {
			if err := stream.Err(); err != nil {
				return nil, err
			}
			return nil, io.EOF
		}
		chunk, ok := stream.Msg().GetMsg().(*podiumv1.UploadArtifactRequest_Chunk)
		if !ok {
			return nil, fmt.Errorf("%w: a second meta arrived in the middle of the upload; send one file per call", artifacts.ErrProtocol)
		}
		return chunk.Chunk, nil
	})
	if err != nil {
		return nil, artifacts.ConnectError(err)
	}
	a := res.Artifact
	return connect.NewResponse(&podiumv1.UploadArtifactResponse{
		ArtifactId: a.ID, Size: a.Size, Sha256: a.SHA256, CreatedAt: timestamppb.New(a.CreatedAt), Replaced: res.Replaced,
	}), nil
}
