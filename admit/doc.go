// Package admit runs the layers of admission control in front of any
// protocol: exemptions, a capacity gate for the process (with priority
// classes, a deadline, and an adaptive limit), a rate per client address,
// a rate per key the caller sends, the policies of the request's route
// (rates, calendar quotas, tiers, per-key overrides), and a cap on the
// requests each client has in progress. It is the engine under httplimit
// (HTTP) and grpclimit (gRPC); put it in front of anything else, a job
// queue or a WebSocket hub, the same way:
//
//	e, err := admit.New(admit.Config{MaxInFlight: 64, Rate: limits.Limit{Events: 10, Period: time.Second}})
//	if err != nil {
//		log.Fatal(err)
//	}
//	var conn net.Conn // a client's connection, say
//	var t admit.Ticket
//	if err := e.Admit(context.Background(), &admit.Request{Peer: conn.RemoteAddr().String(), Route: "/ws/join"}, &t); err != nil {
//		log.Print(err) // a *admit.Refusal: its Reason, Class and RetryAfter say why, and when to come back
//		return
//	}
//	defer t.Done(adaptive.Success)
//
// A front end describes each request by what the layers need (Request:
// its peer, route, cost, class, and the fields a policy keys by), and
// answers a Refusal in its protocol's terms: its Reason (a limits.Reason,
// whose String is the code responses and metrics carry), its Class (Busy,
// Limited or Failed), its exact RetryAfter, and the rate limit fields of
// the refusing policy.
//
// The whole configuration is data (Config): it loads from a JSON file
// (Config.UnmarshalJSON) and from the environment (Config.LoadEnv), and
// Engine.Update replaces any part of it while the engine serves, keeping
// every key's state and every counter. Stats counts every outcome, by
// reason, policy and route; package metrics describes them for the
// Prometheus and OpenTelemetry exporters.
package admit
