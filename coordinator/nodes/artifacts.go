package nodes

import (
	"context"
	"errors"

	"connectrpc.com/connect"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// UploadArtifact is part of the node protocol, but this coordinator has no
// object store configured for artifacts yet, so it refuses uploads clearly
// instead of accepting bytes it cannot keep. The agent keeps the files and
// retries.
func (s *Service) UploadArtifact(ctx context.Context, _ *connect.ClientStream[podiumv1.UploadArtifactRequest]) (*connect.Response[podiumv1.UploadArtifactResponse], error) {
	return nil, connect.NewError(connect.CodeUnimplemented,
		errors.New("this coordinator does not store artifacts yet: no object store is configured"))
}
