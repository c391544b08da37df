package grpclimit

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/limitsgo/limits"
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
	it := mustNew(t, Config{Gate: g, Priority: MetadataPriority("X-Criticality")})
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
	if st := it.Stats(); st.ServerBusy != 4 || st.Allowed != 3 {
		t.Errorf("Stats: %d busy, %d allowed; want 4 and 3", st.ServerBusy, st.Allowed)
	}
	if p := MetadataPriority("k")(metadata.NewIncomingContext(context.Background(), metadata.Pairs("k", "critical_plus")), ""); p != limits.PriorityCritical {
		t.Errorf("critical_plus: %v", p)
	}
}
