package httplimit_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/limitsgo/limits/httplimit"
)

// BenchmarkTransport measures a Transport's cost per call against its
// base alone, in the same run: over loopback to a server that answers
// with the draft-10 fields (a pace of a billion a second, so that no call
// waits), and with a stub base that returns such an answer at once, which
// shows the Transport's own cost.
func BenchmarkTransport(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("RateLimit-Policy", `"default";q=1000000000;w=1`)
		h.Set("RateLimit", `"default";r=999999999;t=1`)
	}))
	defer srv.Close()
	loop := srv.Client().Transport.(*http.Transport).Clone()
	loop.MaxIdleConnsPerHost = 64
	defer loop.CloseIdleConnections()

	for _, base := range []struct {
		name string
		rt   http.RoundTripper
	}{
		{"loopback", loop},
		{"stub", newStubTransport()},
	} {
		for _, rt := range []struct {
			name string
			rt   http.RoundTripper
		}{
			{"bare", base.rt},
			{"Transport", &httplimit.Transport{Base: base.rt}},
		} {
			b.Run(base.name+"/"+rt.name+"/serial", func(b *testing.B) {
				req := httptest.NewRequest("GET", srv.URL, nil)
				req.RequestURI = ""
				b.ReportAllocs()
				for b.Loop() {
					call(b, rt.rt, req)
				}
				report(b, rt.rt)
			})
			b.Run(base.name+"/"+rt.name+"/parallel", func(b *testing.B) {
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					req := httptest.NewRequest("GET", srv.URL, nil)
					req.RequestURI = ""
					for pb.Next() {
						call(b, rt.rt, req)
					}
				})
				report(b, rt.rt)
			})
		}
	}
}

func call(b *testing.B, rt http.RoundTripper, req *http.Request) {
	resp, err := rt.RoundTrip(req)
	if err != nil {
		b.Fatal(err)
	}
	if resp.Body != http.NoBody {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// report reports the share of calls a Transport made wait.
func report(b *testing.B, rt http.RoundTripper) {
	if tr, ok := rt.(*httplimit.Transport); ok {
		s := tr.Stats()
		b.ReportMetric(float64(s.Waited)/float64(s.Requests), "waits/op")
	}
}
