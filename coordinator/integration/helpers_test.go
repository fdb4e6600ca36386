package integration_test

import (
	"context"
	"strings"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/coordinator/coordtest"
	"github.com/podiumhq/podium/proto/podium/v1/podiumv1connect"
)

func contains(s, sub string) bool { return strings.Contains(s, sub) }

type hdr string

func (h hdr) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		req.Header().Set("Authorization", "Bearer "+string(h))
		return next(ctx, req)
	}
}
func (h hdr) WrapStreamingClient(n connect.StreamingClientFunc) connect.StreamingClientFunc { return n }
func (h hdr) WrapStreamingHandler(n connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return n
}

func podiumv1connectTasksWithToken(r *coordtest.Replica, token string) podiumv1connect.TaskServiceClient {
	return podiumv1connect.NewTaskServiceClient(coordtest.HTTPClient(), r.URL(), connect.WithInterceptors(hdr(token)))
}
