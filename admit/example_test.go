package admit_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/adaptive"
	"github.com/limitsgo/limits/admit"
)

// The layers in front of a job queue: at most 2 jobs run at once, each
// tenant may submit 3 jobs a minute, and exports, which cost 2, are
// limited to 4 a minute per tenant. A job is described by what the
// layers need; the engine admits it, with a Ticket to finish when the
// job ends, or refuses it, saying why and when to retry.
func Example_jobQueue() {
	e, err := admit.New(admit.Config{
		MaxInFlight: 2,
		Rate:        limits.Limit{Events: 3, Period: time.Minute},
		CallerKey:   "tenant",
		Policies: []admit.Policy{
			{Name: "exports", Routes: []string{"/jobs/export"}, Key: "tenant", Rate: limits.Limit{Events: 4, Period: time.Minute}, Cost: 2},
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	var running []*admit.Ticket
	submit := func(tenant, kind string) {
		t := new(admit.Ticket)
		err := e.Admit(context.Background(), &admit.Request{Peer: "10.0.0.1", Key: tenant, Route: "/jobs/" + kind}, t)
		var ref *admit.Refusal
		switch {
		case err == nil:
			running = append(running, t)
			fmt.Println(tenant, kind, "runs")
		case errors.As(err, &ref):
			fmt.Printf("%s %s refused: %v (%v), retry after %.0fs\n", tenant, kind, ref.Reason, ref.Class(), ref.RetryAfter.Seconds())
		}
	}
	submit("acme", "export")
	submit("acme", "export")
	submit("acme", "report") // both places are taken
	for _, t := range running {
		t.Done(adaptive.Success) // the jobs end
	}
	submit("acme", "export") // over the exports policy: 2 and 2 spent
	submit("acme", "report")
	submit("acme", "report") // over the tenant's 3 a minute
	// Output:
	// acme export runs
	// acme export runs
	// acme report refused: server_busy (busy), retry after 1s
	// acme export refused: rate_limited (limited), retry after 30s
	// acme report runs
	// acme report refused: rate_limited (limited), retry after 20s
}
