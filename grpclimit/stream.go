package grpclimit

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/limitsgo/limits/adaptive"
	"github.com/limitsgo/limits/internal/front"
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
// server), calls ReleaseCapacity, or returns, or when Config.Timeout
// passes. Its place in the per-client count of streams
// (MaxStreamsPerClient) it keeps until the handler returns, however it
// ends: return, panic, or the client cancelling. With LimitMessages, each
// message after the first is charged to the client's buckets.
func (it *Interceptor) Stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	rt := it.route(info.FullMethod)
	if it.exempt(info.FullMethod) {
		it.count(rt, "exempt")
		return handler(srv, ss)
	}
	ctx := ss.Context()
	s := &stream{ServerStream: ss, it: it, q: hold{Context: ctx}}
	// A stream refused by a later layer says nothing of the service's
	// capacity; one established gives its place back with Success.
	result := adaptive.Ignored
	defer func() { s.q.release(result) }()
	if it.capacity != nil && !it.enter(ctx, info.FullMethod, &s.q.held) {
		return it.refuse(ctx, ss, info.FullMethod, "", it.busy[ReasonServerBusy])
	}
	if it.capacity != nil && it.timeout > 0 {
		// Not established in time from its admission: a sign of overload.
		t := time.AfterFunc(it.timeout, func() { s.q.held.Leave(adaptive.Dropped) })
		defer t.Stop()
	}
	s.rt = rt
	if len(it.rates) > 0 || it.streams != nil || rt != nil && len(rt.layers) > 0 {
		s.addr = it.clientKey(ctx)
	}
	s.call = call{ctx, info.FullMethod}
	var buf [3]front.Charge
	charges, ref := it.admitCall(ctx, s.call, s.addr, rt, buf[:0])
	if ref != nil {
		return it.refuseRate(ctx, ss, info.FullMethod, ref)
	}
	if it.streams != nil {
		if reason := it.acquire(it.streams, s.addr); reason != "" {
			it.admit.Refund(ctx, charges)
			return it.refuse(ctx, ss, info.FullMethod, s.addr, it.busy[reason])
		}
		s.q.slots, s.q.client = it.streams, s.addr
	}
	it.count(rt, "")
	if it.capacity == nil && !(it.messages && s.limited()) {
		return handler(srv, ss) // nothing to watch for
	}
	err := handler(srv, s)
	if s.q.held.Reports() {
		result = outcome(ctx, err)
	}
	return err
}

// stream is a server stream as its handler sees it: it gives the stream's
// place in the gate back once the stream is established, and charges its
// messages if configured.
type stream struct {
	grpc.ServerStream
	it   *Interceptor
	q    hold // what the stream holds; the handler's context
	call call
	addr string // the client address key
	rt   *route // the call's route, if any
	// received says the stream's first message has been received. Only
	// RecvMsg uses it, which gRPC never calls concurrently.
	received bool
}

// Context returns the stream's context, through which ReleaseCapacity
// finds the stream's place in the gate.
func (s *stream) Context() context.Context { return &s.q }

// SendHeader establishes the stream, and sends the header metadata.
func (s *stream) SendHeader(md metadata.MD) error {
	s.q.held.Leave(adaptive.Success)
	return s.ServerStream.SendHeader(md)
}

// SendMsg establishes the stream, and sends m.
func (s *stream) SendMsg(m any) error {
	s.q.held.Leave(adaptive.Success)
	return s.ServerStream.SendMsg(m)
}

// RecvMsg receives a message into m. A call after the stream's first
// message establishes the stream; a message after the first, with
// LimitMessages, is charged to the client's buckets, and if refused,
// RecvMsg returns the refusal's status error.
func (s *stream) RecvMsg(m any) error {
	if s.received {
		s.q.held.Leave(adaptive.Success)
	}
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if !s.received {
		s.received = true
		return nil
	}
	it := s.it
	if !it.messages || !s.limited() {
		return nil
	}
	var buf [3]front.Charge
	if _, ref := it.admitCall(s.q.Context, s.call, s.addr, s.rt, buf[:0]); ref != nil {
		return it.refuseRate(s.q.Context, s.ServerStream, s.call.method, ref)
	}
	return nil
}

// limited reports whether the stream's messages have rate layers to pass.
func (s *stream) limited() bool {
	return len(s.it.rates) > 0 || s.rt != nil && len(s.rt.layers) > 0
}
