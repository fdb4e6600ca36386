package main

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/bench/benchkit"
	"github.com/podiumhq/podium/bench/dispatch/load"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/proto/podium/v1/podiumv1connect"
)

// tracker records, per task, when a node received its Assign, when the
// coordinator acknowledged the node's PROVISIONING event (the assignment
// accepted and stored) and when it acknowledged SUCCEEDED. Only the first of
// each counts: a repeated Assign is not a second dispatch.
type tracker struct {
	mu        sync.Mutex
	assign    map[string]time.Time
	accept    map[string]time.Time
	finish    map[string]time.Time
	nAssigned atomic.Int64
	nFinished atomic.Int64
}

func newTracker() *tracker {
	return &tracker{assign: map[string]time.Time{}, accept: map[string]time.Time{}, finish: map[string]time.Time{}}
}

func (t *tracker) assigned(id string, at time.Time) {
	t.mu.Lock()
	if _, ok := t.assign[id]; !ok {
		t.assign[id] = at
		t.nAssigned.Add(1)
	}
	t.mu.Unlock()
}

func (t *tracker) accepted(id string, at time.Time) {
	t.mu.Lock()
	if _, ok := t.accept[id]; !ok {
		t.accept[id] = at
	}
	t.mu.Unlock()
}

func (t *tracker) finished(id string, at time.Time) {
	t.mu.Lock()
	if _, ok := t.finish[id]; !ok {
		t.finish[id] = at
		t.nFinished.Add(1)
	}
	t.mu.Unlock()
}

// submission is one Submit call: when it was called, when it returned, the
// task id it got.
type submission struct {
	id               string
	called, returned time.Time
	err              error
}

// taskClient is a TaskService client over HTTP/2 cleartext that sends
// token as the bearer token, as the podium CLI does.
func taskClient(url, token string) (podiumv1connect.TaskServiceClient, *http.Transport) {
	t, opt := h2c(token)
	return podiumv1connect.NewTaskServiceClient(&http.Client{Transport: t}, url, opt), t
}

// h2c is a transport speaking HTTP/2 cleartext and an interceptor that
// sends token.
func h2c(token string) (*http.Transport, connect.ClientOption) {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	t := &http.Transport{Protocols: &p}
	auth := connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			req.Header().Set("Authorization", "Bearer "+token)
			return next(ctx, req)
		}
	})
	return t, connect.WithInterceptors(auth)
}

// addUsers adds n members through the admin API (with the bench's admin
// token), as an admin would with podium user add, and returns their
// personal tokens: the contended burst's submitters.
func addUsers(ctx context.Context, url string, n int) ([]string, error) {
	t, opt := h2c(benchkit.APIToken)
	defer t.CloseIdleConnections()
	admin := podiumv1connect.NewAdminServiceClient(&http.Client{Transport: t}, url, opt)
	tokens := make([]string, n)
	for i := range tokens {
		res, err := admin.AddUser(ctx, connect.NewRequest(&podiumv1.AddUserRequest{Name: fmt.Sprintf("bench-user-%03d", i), Role: "member"}))
		if err != nil {
			return nil, fmt.Errorf("add the contended burst's user %d: %w", i, err)
		}
		tokens[i] = res.Msg.GetToken()
	}
	return tokens, nil
}

func submitOne(ctx context.Context, c podiumv1connect.TaskServiceClient) submission {
	s := submission{called: time.Now()}
	res, err := c.Submit(ctx, connect.NewRequest(&podiumv1.SubmitRequest{Spec: &podiumv1.TaskSpec{Image: "busybox"}}))
	s.returned = time.Now()
	if err != nil {
		s.err = err
		return s
	}
	s.id = res.Msg.GetTask().GetId()
	return s
}

// submitBurst submits m tasks as fast as conc submitters can, each waiting
// for its Submit to return before the next; the i-th task is submitted by
// cs[i mod len(cs)], so with several people their tasks interleave.
func submitBurst(ctx context.Context, cs []podiumv1connect.TaskServiceClient, m, conc int) []submission {
	out := load.Burst(ctx, m, conc, func(i int) submission { return submitOne(ctx, cs[i%len(cs)]) })
	return slices.DeleteFunc(out, func(s submission) bool { return s.called.IsZero() })
}

// submitSteady offers rate tasks per second for d, open loop (load.Steady).
func submitSteady(ctx context.Context, c podiumv1connect.TaskServiceClient, rate float64, d time.Duration, maxInflight int) (subs []submission, skipped int) {
	out, skipped := load.Steady(ctx, rate, d, maxInflight, func(int) submission { return submitOne(ctx, c) })
	return slices.DeleteFunc(out, func(s submission) bool { return s.called.IsZero() }), skipped
}

// percentile is the q-th percentile (0–100) of sorted durations, nearest rank.
func percentile(sorted []time.Duration, q float64) time.Duration { return load.Percentile(sorted, q) }
