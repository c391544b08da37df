// Package grpcbench measures what the unary server interceptor of
// package grpclimit costs a call, against the ratelimit interceptor of
// go-grpc-middleware (v2) given a per-client golang.org/x/time/rate
// limiter, and against no interceptor at all, in the same run, so that
// the results read as ratios to that baseline. It is a module of its own,
// so that neither the library nor grpclimit depends on the peers.
//
// Two settings: the interceptor alone, called with the context of a call
// from one of 1,024 client addresses, around a handler that does nothing
// (Direct); and whole calls over an in-memory connection to a real
// grpc.Server (Bufconn). Each serial and parallel; the limits are set
// high enough that every call is allowed, so what is measured is the cost
// of deciding, not of refusing.
//
//	go test -run '^$' -bench . -benchtime 2s
package grpcbench
