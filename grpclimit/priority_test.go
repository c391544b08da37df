package grpclimit

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/admit"
)

// TestPriority fills a gate of 3 places, one kept for critical calls,
// with blocking calls: default and sheddable calls get the 2 places they
// may take and are refused beyond, while a call the client marks
// critical in its metadata still gets in; the gate counts each class.
func TestPriority(t *testing.T) {
	g, err := limits.NewGate(3, limits.WithReserve(limits.PriorityCritical, 1))
	if err != nil {
		t.Fatal(err)
	}
	it := mustNew(t, Config{Limits: admit.Config{Gate: g}, Priority: MetadataPriority("X-Criticality")})
	release := make(chan struct{})
	conn := newServer(t, it, &echo{say: func(ctx context.Context, s string) (string, error) {
		if s == "block" {
			<-release
		}
		return s, nil
	}}).dial("192.0.2.1:1")
	done := make(chan error, 3)
	for _, class := range []string{"default", "sheddable_plus"} {
		go func() {
			_, _, err := say(conn, "block", "x-criticality", class)
			done <- err
		}()
	}
	waitFor(t, "two calls inside", func() bool { return g.InFlight() == 2 })
	for _, class := range []string{"", "DEFAULT", "sheddable", "bogus"} {
		if _, _, err := say(conn, "x", "x-criticality", class); status.Code(err) != codes.Unavailable {
			t.Errorf("a %q call with 2 of 3 places taken, one kept for critical calls: %v, want server_busy", class, err)
		}
	}
	go func() {
		_, _, err := say(conn, "block", "x-criticality", "CRITICAL")
		done <- err
	}()
	waitFor(t, "the critical call inside", func() bool { return g.InFlight() == 3 })
	close(release)
	for range 3 {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
	s := g.Stats()
	shed, def, crit := s.Classes[0], s.Classes[1], s.Classes[2]
	if shed.Admitted != 1 || shed.Shed != 1 || def.Admitted != 1 || def.Shed != 3 || crit.Admitted != 1 || crit.Shed != 0 {
		t.Errorf("classes: %+v", s.Classes)
	}
	if st := it.Stats(); st.Requests[admit.ServerBusy] != 4 || st.Requests[admit.Allowed] != 3 {
		t.Errorf("Stats: %v; want 4 busy and 3 allowed", st.Requests)
	}
	for v, want := range map[string]limits.Priority{
		"critical_plus": limits.PriorityCritical, "Critical": limits.PriorityCritical,
		"sheddable_plus": limits.PrioritySheddable, "SHEDDABLE": limits.PrioritySheddable,
		"default": limits.PriorityDefault, "bogus": limits.PriorityDefault, "": limits.PriorityDefault,
	} {
		if p := MetadataPriority("K")(metadata.NewIncomingContext(context.Background(), metadata.Pairs("k", v)), ""); p != want {
			t.Errorf("%q: %v, want %v", v, p, want)
		}
	}
	if p := MetadataPriority("k")(context.Background(), ""); p != limits.PriorityDefault {
		t.Errorf("no metadata: %v", p)
	}
}
