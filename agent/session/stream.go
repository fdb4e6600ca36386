package session

// One NodeService.Stream from dial to end: Hello and HelloAck, the writer
// (heartbeats, event batches) and the receiver.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/agent/attempt"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/proto/podium/v1/podiumv1connect"
)

// runStream is one stream from dial to end. acked reports whether the
// coordinator answered the Hello.
func (s *Session) runStream(ctx context.Context, target string) (acked bool, err error) {
	hc, err := s.httpClient(target)
	if err != nil {
		return false, err
	}
	client := podiumv1connect.NewNodeServiceClient(hc, target)
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stream := client.Stream(sctx)
	// Cancelling the stream's context alone does not end it: once the
	// response headers have arrived, net/http's HTTP/2 transport no longer
	// watches the request context, and a Receive blocks until the body is
	// closed. Closing both halves when the context ends is what lets a
	// timeout, a failed send or shutdown actually stop the receiver.
	stopClose := context.AfterFunc(sctx, func() {
		_ = stream.CloseRequest()
		_ = stream.CloseResponse()
	})
	defer func() {
		if stopClose() {
			_ = stream.CloseRequest()
			_ = stream.CloseResponse()
		}
	}()

	s.log.Debug("dialling coordinator", "coordinator", target)
	// This Hello leaves out whatever was fenced until now: no need to end
	// this stream for it.
	select {
	case <-s.restream:
	default:
	}
	hello := &podiumv1.Hello{
		NodeId:       s.cfg.NodeID,
		NodeKey:      s.cfg.NodeKey,
		AgentVersion: s.cfg.AgentVersion,
		Hostname:     s.cfg.Hostname,
		Capacity:     s.capacity(ctx),
		Running:      s.out.running(),
		Stopping:     s.out.stopping(),
		// Answered heartbeats are how this node knows it still reaches
		// the control plane (fence.go).
		HeartbeatAcks:           true,
		AllowPrivilegedSidecars: s.cfg.AllowPrivilegedSidecars,
	}
	if err := s.send(stream, cancel, &podiumv1.StreamRequest{Msg: &podiumv1.StreamRequest_Hello{Hello: hello}}); err != nil {
		return false, s.streamErr(sctx, stream, err)
	}

	t := time.AfterFunc(helloAckTimeout, func() {
		cancel(fmt.Errorf("no HelloAck within %s", helloAckTimeout))
	})
	msg, err := stream.Receive()
	t.Stop()
	if err != nil {
		return false, s.streamErr(sctx, stream, err)
	}
	ack := msg.GetHelloAck()
	if ack == nil {
		return false, fmt.Errorf("the coordinator answered Hello with %T instead of HelloAck; check that it runs a compatible version", msg.GetMsg())
	}
	s.reached()
	s.out.resetSent()
	s.applyHelloAck(ack, hello.GetRunning())
	s.out.releaseFenced()
	s.log.Info("connected to coordinator", "coordinator", target, "replica", ack.GetReplica(),
		"adopted", len(ack.GetAdopt()), "draining", ack.GetDraining())
	s.notifyState(State{Connected: true, Coordinator: target, Replica: ack.GetReplica()})

	// The receiver ends the stream when it fails, and the writer ends it
	// when it fails; either way both stop, and runStream waits for the
	// receiver so no goroutine outlives the stream that started it.
	recvDone := make(chan struct{})
	go func() {
		defer close(recvDone)
		cancel(s.receive(stream))
	}()
	cancel(s.write(sctx, stream, cancel))
	<-recvDone
	if ctx.Err() != nil {
		return true, ctx.Err()
	}
	return true, context.Cause(sctx)
}

// streamErr picks the most useful error for a stream that ended: the
// coordinator's own error if it sent one, else why the stream was cancelled.
func (s *Session) streamErr(sctx context.Context, stream *connect.BidiStreamForClient[podiumv1.StreamRequest, podiumv1.StreamResponse], err error) error {
	if cause := context.Cause(sctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	if connect.CodeOf(err) == connect.CodeUnknown {
		// Send reports a closed stream as io.EOF; Receive has the real error.
		if _, rerr := stream.Receive(); rerr != nil {
			return rerr
		}
	}
	return err
}

// send sends one message, ending the stream if the coordinator stops taking
// them (see sendTimeout).
func (s *Session) send(stream *connect.BidiStreamForClient[podiumv1.StreamRequest, podiumv1.StreamResponse], cancel context.CancelCauseFunc, req *podiumv1.StreamRequest) error {
	t := time.AfterFunc(sendTimeout, func() {
		cancel(fmt.Errorf("the coordinator took no message for %s", sendTimeout))
	})
	defer t.Stop()
	return stream.Send(req)
}

// write is the stream's only sender: heartbeats and event batches. It
// returns why the stream should end: a failed send, or ctx ending.
func (s *Session) write(ctx context.Context, stream *connect.BidiStreamForClient[podiumv1.StreamRequest, podiumv1.StreamResponse], cancel context.CancelCauseFunc) error {
	sendHeartbeat := func() error {
		err := s.send(stream, cancel, &podiumv1.StreamRequest{Msg: &podiumv1.StreamRequest_Heartbeat{Heartbeat: s.heartbeat(ctx)}})
		if err != nil {
			return fmt.Errorf("send heartbeat: %w", err)
		}
		return nil
	}
	// A heartbeat right after HelloAck gives the coordinator free slots that
	// already account for the drain flag and slot override it just sent, so
	// the settings signal from that HelloAck is already served.
	select {
	case <-s.settingsC:
	default:
	}
	if err := sendHeartbeat(); err != nil {
		return err
	}
	if s.drained() {
		return ErrDrained
	}
	hb := time.NewTicker(s.heartbeatInterval())
	defer hb.Stop()
	stall := time.NewTicker(ackStallAfter / 3)
	defer stall.Stop()
	for {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-hb.C:
			if err := sendHeartbeat(); err != nil {
				return err
			}
			if s.drained() {
				return ErrDrained
			}
		case <-s.settingsC:
			hb.Reset(s.heartbeatInterval())
			if err := sendHeartbeat(); err != nil {
				return err
			}
			if s.drained() {
				return ErrDrained
			}
		case <-s.kick:
			if s.drained() {
				return ErrDrained
			}
		case <-s.restream:
			return errors.New("fenced: this node stopped attempts the control plane may still hold; a new stream settles them (its Hello leaves them out)")
		case <-stall.C:
			if s.out.rewindStalled(ackStallAfter) {
				s.log.Warn("the coordinator has not acknowledged events for a while; sending them again", "after", ackStallAfter)
			}
		case <-s.out.notify:
			if err := s.flush(ctx, stream, cancel); err != nil {
				return err
			}
		}
	}
}

// flush sends what the outbox has not sent on this stream, in batches, at
// most flushRounds of them: while tasks print, acks free room, the room is
// refilled from their runner logs and there is always more to send, so a
// flush that went on until the outbox was empty might never end, and the
// writer would send no heartbeat meanwhile. It wakes the writer again for
// the rest. Unless a full batch or a status change is already waiting it
// first lingers briefly, so a burst of output becomes one batch rather than
// one message each.
func (s *Session) flush(ctx context.Context, stream *connect.BidiStreamForClient[podiumv1.StreamRequest, podiumv1.StreamResponse], cancel context.CancelCauseFunc) error {
	if bytes, events := s.out.unsent(); bytes < flushBytes && events < flushEvents && !s.out.urgent() {
		t := time.NewTimer(flushLinger)
		select {
		case <-ctx.Done():
			t.Stop()
			return context.Cause(ctx)
		case <-t.C:
		}
	}
	for range flushRounds {
		batch := s.out.nextBatch(batchBytes, batchEvents)
		if len(batch) == 0 {
			return nil
		}
		req := &podiumv1.StreamRequest{Msg: &podiumv1.StreamRequest_Events{Events: &podiumv1.EventBatch{Events: batch}}}
		if err := s.send(stream, cancel, req); err != nil {
			return fmt.Errorf("send events: %w", err)
		}
	}
	s.out.wake()
	return nil
}

// receive handles what the coordinator sends until the stream ends, and
// returns why it ended.
func (s *Session) receive(stream *connect.BidiStreamForClient[podiumv1.StreamRequest, podiumv1.StreamResponse]) error {
	for {
		msg, err := stream.Receive()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return errors.New("the coordinator closed the stream")
			}
			return err
		}
		s.reached()
		switch m := msg.GetMsg().(type) {
		case *podiumv1.StreamResponse_Assign:
			s.handleAssign(m.Assign)
		case *podiumv1.StreamResponse_Cancel:
			s.handleCancel(m.Cancel)
		case *podiumv1.StreamResponse_Ack:
			s.out.ack(attempt.Of(m.Ack), m.Ack.GetAckedSeq())
			s.poke()
		case *podiumv1.StreamResponse_HelloAck:
			// A HelloAck on a stream that is already up is treated as the
			// live half of a drain, slot or label change; its adopt list was
			// settled when the stream opened.
			s.applySettings(m.HelloAck)
		case *podiumv1.StreamResponse_Config:
			c := m.Config
			s.applyConfig(c.GetDraining(), c.GetMaxTasksOverride(), c.GetLabels())
		case *podiumv1.StreamResponse_Inject:
			s.handleInject(m.Inject)
		case *podiumv1.StreamResponse_Replicas:
			s.setReplicas(m.Replicas.GetAddresses())
		case *podiumv1.StreamResponse_HeartbeatAck:
			// Proof the control plane hears this node (reached, above).
		default:
			s.log.Warn("ignoring a message this agent does not know; is the coordinator newer?", "type", fmt.Sprintf("%T", m))
		}
	}
}
