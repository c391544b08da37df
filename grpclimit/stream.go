package grpclimit

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/limitsgo/limits/adaptive"
	"github.com/limitsgo/limits/admit"
)

// Stream is the stream server interceptor: install it with
// grpc.ChainStreamInterceptor(it.Stream), or with ServerOptions. It
// applies the layers to the stream as one call when it opens, calls
// handler only if every layer allows it, and returns a refusal's status
// error otherwise.
//
// A stream lives as long as it is used, so it holds its place in the gate
// only while it is set up: from its start until it is established, which
// is when its handler first sends (SendHeader or SendMsg) or asks for a
// message after the stream's first (a wait on the client, not work of the
// server), calls ReleaseCapacity, or returns, or when Limits.Timeout
// passes (a sign of overload, for an adaptive gate). Its place in the
// per-client count of streams (MaxStreamsPerClient) it keeps until the
// handler returns, however it ends: return, panic, or the client
// cancelling. With LimitMessages, each message after the first is charged
// to the rate policies.
func (it *Interceptor) Stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx := ss.Context()
	s := &stream{ServerStream: ss, q: hold{Context: ctx, it: it}}
	r := it.request(ctx, info.FullMethod, &s.q)
	r.Stream = true
	if err := it.e.Admit(ctx, &r, &s.q.t); err != nil {
		return it.refusal(ctx, ss, err)
	}
	if s.q.t.Exempt() {
		return handler(srv, ss)
	}
	s.req = r
	s.req.Fields = &s.q
	// A stream refused by a later layer says nothing of the service's
	// capacity; one established gives its place back with Success.
	result := adaptive.Ignored
	defer func() { s.q.t.Done(result) }()
	if deadline, ok := s.q.t.Deadline(); ok {
		// Not established in time from its admission: a sign of overload.
		t := time.AfterFunc(time.Until(deadline), func() { s.q.t.Leave(adaptive.Dropped) })
		defer t.Stop()
	}
	err := handler(srv, s)
	result = outcome(ctx, err)
	return err
}

// stream is a server stream as its handler sees it: it gives the stream's
// place in the gate back once the stream is established, and charges its
// messages if configured.
type stream struct {
	grpc.ServerStream
	q   hold          // what the stream holds; the handler's context
	req admit.Request // the stream's description, for its messages
	// received says the stream's first message has been received. Only
	// RecvMsg uses it, which gRPC never calls concurrently.
	received bool
}

// Context returns the stream's context, through which ReleaseCapacity
// finds the stream's place in the gate.
func (s *stream) Context() context.Context { return &s.q }

// SendHeader establishes the stream, and sends the header metadata.
func (s *stream) SendHeader(md metadata.MD) error {
	s.q.t.Leave(adaptive.Success)
	return s.ServerStream.SendHeader(md)
}

// SendMsg establishes the stream, and sends m.
func (s *stream) SendMsg(m any) error {
	s.q.t.Leave(adaptive.Success)
	return s.ServerStream.SendMsg(m)
}

// RecvMsg receives a message into m. A call after the stream's first
// message establishes the stream; a message after the first, with
// LimitMessages, is charged to the rate policies, and if refused, RecvMsg
// returns the refusal's status error.
func (s *stream) RecvMsg(m any) error {
	if s.received {
		s.q.t.Leave(adaptive.Success)
	}
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if !s.received {
		s.received = true
		return nil
	}
	it := s.q.it
	if !it.messages {
		return nil
	}
	if err := it.e.Charge(s.q.Context, &s.req); err != nil {
		return it.refusal(s.q.Context, s.ServerStream, err)
	}
	return nil
}
