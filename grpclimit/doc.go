// Package grpclimit provides gRPC server interceptors that protect a
// service with the layers of package admit, as package httplimit does for
// HTTP: exemptions for the health service, a capacity gate for the whole
// process, a rate limit per client address (and per caller key, such as an
// API key), the rate policies of the call's service and method, and caps
// on the calls and streams each client has in progress.
//
//	l, err := grpclimit.New(grpclimit.Config{Limits: admit.Config{
//		MaxInFlight: 512,
//		Rate:        limits.Limit{Events: 100, Period: time.Minute},
//	}})
//	if err != nil {
//		log.Fatal(err)
//	}
//	srv := grpc.NewServer(l.ServerOptions()...)
//
// The policies of Limits.Policies whose Routes name a method
// ("/package.Service/Method") or a service ("/package.Service/") limit
// its calls, after Config's own buckets, all or nothing. Limits.Gate
// shares one gate (and Limits.Controller its adaptive controller) with an
// httplimit.Middleware and with code that calls the gate directly: one
// capacity for the process, whatever the protocol. Limits is data: it
// reads from a JSON file and from the environment (admit.Config.LoadEnv),
// and Interceptor.Update replaces it while the interceptor serves, keeping
// every key's state and every counter. ClientInterceptor is the client
// side: it keeps outbound calls under the limits of the servers they call.
//
// # Refusals
//
// A refused call never reaches its handler. Its client gets a status
// error whose message starts with the reason code, and details that say
// why: an ErrorInfo (Domain ErrorDomain, Reason the code in upper case,
// the policy in its metadata, as ReasonOf reads it), a RetryInfo with the
// delay after which the call would be allowed when waiting helps, and a
// QuotaFailure naming the policy for refusals by a rate. The trailer
// grpc-retry-pushback-ms gives the same delay in milliseconds, rounded up,
// so that gRPC's retry policy (for the codes it lists as retryable) waits
// exactly as long, or -1 when retrying cannot help:
//
//	reason                  code               RetryInfo, pushback
//	rate_limited            ResourceExhausted  the limiter's exact RetryAfter
//	concurrency_limited     ResourceExhausted  BusyRetryAfter
//	cost_above_burst        ResourceExhausted  none, -1
//	server_busy             Unavailable        BusyRetryAfter
//	table_full              Unavailable        BusyRetryAfter
//	limiter_error           Unavailable        BusyRetryAfter
//	concurrency_table_full  Unavailable        BusyRetryAfter
//	request_timeout         DeadlineExceeded   none, none
//	invalid_cost            Internal           none, -1
//
// # Clients
//
// Clients are told apart by the address of the connection's peer, grouped
// by prefix (IPv6 by /64); the forwarding metadata (x-forwarded-for by
// default) counts only from trusted proxies. A key the caller chooses,
// such as an authorization token read from metadata, can add a fairer
// bucket per key, but never replaces the address bucket: a caller cannot
// escape its address limit by changing keys.
//
// # Streams
//
// A stream is charged as one call when it opens. It holds its place in
// the gate only while it is set up, and gives it back once established
// (see Interceptor.Stream), so that long-lived streams do not fill the
// gate; Limits.MaxStreamsPerClient caps the streams each client has open.
// LimitMessages charges the messages a stream receives too.
//
// # The contract across layers
//
// The layers run in one order: exemptions, capacity (the gate, then the
// deadline), the client address's bucket, the caller key's bucket, the
// policies of the call's service and method, per-client concurrency. The
// order is part of the contract, and so is this:
//
//   - A refused call costs nothing: when a layer refuses, the buckets
//     earlier layers charged are given back, leaving each key owing no
//     less than before the call and exactly that much when no other call
//     came in between.
//   - A caller key gets a bucket only for a call its address allowed, so
//     the entries one address can create are bounded by its own
//     allowance.
//   - Every wait is bounded: the gate's queue by QueueWait (with an
//     adaptive gate and no QueueWait, by the controller's wait, at most
//     the mean latency), each call of a limiter by LimiterTimeout, the
//     unary call from its admission (limiter calls and handler together)
//     by Timeout. Past the bound the layer's policy applies, and every
//     place taken is given back on every way out: return, panic, client
//     gone, timeout, ReleaseCapacity.
//   - Per-client concurrency is counted exactly for each client.
//   - A refusal reports the layer that refused: its code, reason and
//     policy, and a retry delay only when waiting helps, never earlier
//     than the truth.
package grpclimit
