package grpclimit

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/adaptive"
	"github.com/limitsgo/limits/admit"
	"github.com/limitsgo/limits/httplimit"
)

// inside counts the requests of every protocol being served at once, and
// the most there ever were.
type inside struct {
	now, peak atomic.Int64
}

func (in *inside) enter() {
	n := in.now.Add(1)
	for {
		p := in.peak.Load()
		if n <= p || in.peak.CompareAndSwap(p, n) {
			return
		}
	}
}

func (in *inside) leave() { in.now.Add(-1) }

// TestSharedGate serves HTTP and gRPC from one process over loopback TCP,
// both front ends given one gate of 4, with handlers that block until
// released, and a direct user of the gate too: together they never have
// more than 4 requests inside, every protocol gets some places, and each
// front end counts its own refusals while both report the one gate.
func TestSharedGate(t *testing.T) {
	const size = 4
	g, err := limits.NewGate(size)
	if err != nil {
		t.Fatal(err)
	}
	var in inside
	release := make(chan struct{})
	mw, err := httplimit.New(httplimit.Config{Limits: admit.Config{Gate: g}})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in.enter()
		defer in.leave()
		<-release
	})))
	defer hs.Close()

	it := mustNew(t, Config{Limits: admit.Config{Gate: g}})
	srv := grpc.NewServer(it.ServerOptions()...)
	srv.RegisterService(&echoDesc, &echo{say: func(ctx context.Context, s string) (string, error) {
		in.enter()
		defer in.leave()
		<-release
		return s, nil
	}})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	defer srv.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	const perProtocol = 24
	var wg sync.WaitGroup
	var httpOK, httpBusy, grpcOK, grpcBusy, directOK atomic.Int64
	for range perProtocol {
		wg.Add(3)
		go func() {
			defer wg.Done()
			resp, err := hs.Client().Get(hs.URL)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			switch resp.StatusCode {
			case http.StatusOK:
				httpOK.Add(1)
			case http.StatusServiceUnavailable:
				httpBusy.Add(1)
			default:
				t.Errorf("HTTP status %d", resp.StatusCode)
			}
		}()
		go func() {
			defer wg.Done()
			_, _, err := say(conn, "x")
			switch status.Code(err) {
			case codes.OK:
				grpcOK.Add(1)
			case codes.Unavailable:
				grpcBusy.Add(1)
			default:
				t.Errorf("gRPC: %v", err)
			}
		}()
		go func() {
			defer wg.Done()
			if p, ok := g.TryEnter(); ok {
				in.enter()
				directOK.Add(1)
				<-release
				in.leave()
				p.Release()
			}
		}()
	}
	// Let the gate fill and refuse some of both protocols (nothing leaves
	// it until released), then serve everything inside in turns.
	waitFor(t, "a full gate refusing both protocols", func() bool {
		return g.InFlight() == size && httpBusy.Load() > 0 && grpcBusy.Load() > 0
	})
	for g.InFlight() > 0 || httpOK.Load()+httpBusy.Load()+grpcOK.Load()+grpcBusy.Load() < 2*perProtocol {
		if in.now.Load() > size {
			t.Fatalf("%d requests inside a gate of %d", in.now.Load(), size)
		}
		select {
		case release <- struct{}{}:
		case <-time.After(time.Millisecond):
		}
	}
	close(release)
	wg.Wait()

	if p := in.peak.Load(); p > size || g.Stats().Peak > size {
		t.Errorf("peak %d requests inside, gate's peak %d: want at most %d across protocols", p, g.Stats().Peak, size)
	}
	hst, gst := mw.Stats(), it.Stats()
	if !hst.SharedGate || !gst.SharedGate || hst.Gate == nil || gst.Gate == nil {
		t.Fatalf("Stats do not report the shared gate: %+v, %+v", hst, gst)
	}
	ok, busy := admit.Allowed, admit.ServerBusy
	if hst.Requests[ok] != uint64(httpOK.Load()) || hst.Requests[busy] != uint64(httpBusy.Load()) ||
		gst.Requests[ok] != uint64(grpcOK.Load()) || gst.Requests[busy] != uint64(grpcBusy.Load()) {
		t.Errorf("each front end counts its own: HTTP %d/%d, gRPC %d/%d allowed/busy; Stats %v, %v",
			httpOK.Load(), httpBusy.Load(), grpcOK.Load(), grpcBusy.Load(), hst.Requests, gst.Requests)
	}
	gs := g.Stats()
	if want := uint64(httpOK.Load() + grpcOK.Load() + directOK.Load()); gs.Admitted != want {
		t.Errorf("the gate admitted %d, want %d: one set of counters for every user", gs.Admitted, want)
	}
}

// TestSharedGateConfig checks the rules of a shared gate: it excludes the
// fields that make a gate of one's own, and a Controller must move the
// Gate given with it; with a Controller alone, its gate is shared, and
// both front ends report to it.
func TestSharedGateConfig(t *testing.T) {
	g, _ := limits.NewGate(8)
	other, _ := limits.NewGate(8)
	ctrl, err := adaptive.New(g, adaptive.Config{Window: time.Millisecond, Samples: 1, ProbeEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		cfg  admit.Config
		want string
	}{
		{admit.Config{Gate: g, MaxInFlight: 8}, "MaxInFlight"},
		{admit.Config{Gate: g, Adaptive: &adaptive.Config{}}, "Adaptive"},
		{admit.Config{Gate: g, QueueWait: time.Millisecond, QueueAdapt: time.Second}, "QueueAdapt"},
		{admit.Config{Gate: g, Reserve: map[limits.Priority]int{limits.PriorityCritical: 1}}, "Reserve"},
		{admit.Config{Gate: other, Controller: ctrl}, "moves another gate than Gate"},
	} {
		if _, err := New(Config{Limits: tt.cfg}); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New(%+v) = %v, want an error naming %s", tt.cfg, err, tt.want)
		}
		if _, err := httplimit.New(httplimit.Config{Limits: tt.cfg}); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("httplimit.New(%+v) = %v, want an error naming %s", tt.cfg, err, tt.want)
		}
	}
	it := mustNew(t, Config{Limits: admit.Config{Controller: ctrl}})
	mw, err := httplimit.New(httplimit.Config{Limits: admit.Config{Gate: g, Controller: ctrl}})
	if err != nil {
		t.Fatal(err)
	}
	// Each front end's requests, alone, reach the one controller.
	conn := newServer(t, it, &echo{}).dial("192.0.2.1:1")
	h := mw.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	waitFor(t, "HTTP requests sampled by the shared controller", func() bool {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
		return ctrl.Stats().Samples > 0
	})
	before := ctrl.Stats().Samples
	waitFor(t, "gRPC calls sampled by the shared controller", func() bool {
		mustSay(t, conn, "x")
		return ctrl.Stats().Samples > before
	})
	if s := it.Stats(); s.Adaptive == nil || !s.SharedGate {
		t.Errorf("Stats of an Interceptor with a shared Controller: %+v", s)
	}
}
