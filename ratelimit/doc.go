// Package ratelimit is a rate limit service for Envoy and the gateways
// built on it: it serves envoy.service.ratelimit.v3 RateLimitService
// (ShouldRateLimit), reads envoyproxy/ratelimit's YAML configuration as it
// is, and decides with the admission engine of package admit: each limit
// a GCRA, exact, with no window edge to double it, in this process or,
// across replicas, through redislimit's leases (hot descriptors decided
// locally, never over the limit).
//
// The command limits-ratelimit (cmd/limits-ratelimit) runs it; this
// package is the service, to embed in a program of one's own:
//
//	svc, err := ratelimit.New(ratelimit.Options{})
//	if err != nil { ... }
//	if err := svc.LoadDir("config"); err != nil { ... } // envoyproxy/ratelimit's YAML files
//	go svc.Watch(ctx, "config", time.Second)            // reloaded on change, keeping every key's state
//	srv := grpc.NewServer()
//	pb.RegisterRateLimitServiceServer(srv, svc)
//
// See docs/RATELIMIT.md in the repository for how its decisions differ
// from envoyproxy/ratelimit's fixed windows, and what each configuration
// feature does.
package ratelimit
