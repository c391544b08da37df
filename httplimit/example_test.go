package httplimit_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/admit"
	"github.com/limitsgo/limits/httplimit"
)

// get sends a GET for path from the client address remote to h and
// prints what came back.
func get(h http.Handler, remote, path string, header ...string) {
	r := httptest.NewRequest(http.MethodGet, path, nil)
	r.RemoteAddr = remote
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	fmt.Println(strings.TrimSpace(fmt.Sprint(r.URL.Path, " ", w.Code, " ", w.Header().Get("RateLimit"), " ", w.Header().Get("Retry-After"))))
}

var hello = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello\n") })

func Example() {
	m, err := httplimit.New(httplimit.Config{Limits: admit.Config{
		Exempt:      []string{"/healthz"},
		MaxInFlight: 512,                                          // 503 server_busy beyond
		Rate:        limits.Limit{Events: 2, Period: time.Minute}, // 429 rate_limited, per client address
	}})
	if err != nil {
		panic(err)
	}
	h := m.Handler(hello)
	for range 3 {
		get(h, "192.0.2.1:4711", "/")
	}
	get(h, "192.0.2.1:4711", "/healthz") // exempt
	get(h, "192.0.2.2:4711", "/")        // another client
	s := m.Stats()
	fmt.Println("allowed", s.Requests[admit.Allowed], "rate limited", s.Requests[limits.ReasonRateLimited], "exempt", s.Requests[admit.Exempt])
	// Output:
	// / 200 "default";r=1;t=30
	// / 200 "default";r=0;t=60
	// / 429 "default";r=0;t=30 30
	// /healthz 200
	// / 200 "default";r=1;t=30
	// allowed 3 rate limited 1 exempt 1
}

// One process has one gate, while its routes carry policies of their own:
// a login limited per address, an API limited per key, uploads that cost
// their size. A request refused by a route's policy gets back what the
// others charged. Config.Cost gives a request's cost in every policy
// without a Cost of its own: the address bucket too.
func ExampleConfig_policies() {
	m, err := httplimit.New(httplimit.Config{
		Limits: admit.Config{
			MaxInFlight: 512,
			Rate:        limits.Limit{Events: 120, Period: time.Minute}, // every route, per address
			Policies: []admit.Policy{
				{Name: "login", Routes: []string{"/login"}, Rate: limits.Limit{Events: 1, Period: time.Minute}},
				{Name: "api", Routes: []string{"/api/"}, Rate: limits.Limit{Events: 10, Period: time.Minute}, Key: "X-Api-Key"},
				{Name: "upload", Routes: []string{"/upload"}, Rate: limits.Limit{Events: 50, Period: time.Hour}}, // megabytes an hour
			},
		},
		Cost: func(r *http.Request) int {
			if r.URL.Path == "/upload" {
				mb, _ := strconv.Atoi(r.URL.Query().Get("mb"))
				return mb
			}
			return 1
		},
	})
	if err != nil {
		panic(err)
	}
	h := m.Handler(hello)

	get(h, "192.0.2.1:1", "/login")
	get(h, "192.0.2.1:1", "/login")
	get(h, "192.0.2.1:1", "/api/items", "X-Api-Key", "k1")
	get(h, "192.0.2.1:1", "/upload?mb=43")
	get(h, "192.0.2.1:1", "/upload?mb=20")
	get(h, "192.0.2.1:1", "/upload?mb=55") // more than the policy ever allows at once
	get(h, "192.0.2.1:1", "/")
	// Output:
	// /login 200 "default";r=119;t=1, "login";r=0;t=60
	// /login 429 "login";r=0;t=60 60
	// /api/items 200 "default";r=118;t=1, "api";r=9;t=6
	// /upload 200 "default";r=75;t=23, "upload";r=7;t=3096
	// /upload 429 "upload";r=7;t=936 936
	// /upload 429 "upload";r=7;t=3096
	// / 200 "default";r=74;t=23
}

// A limiter shared by a fleet (here standing in for a redislimit.GCRA)
// with a local limiter of the same rate in front: a client over the rate
// in this process is refused without a call to the shared store.
func ExampleConfig_localBeforeShared() {
	shared := &countingLimiter{Limiter: limits.NewGCRA(2, time.Minute)}
	m, err := httplimit.New(httplimit.Config{Limits: admit.Config{
		Limiters: map[string]limits.Limiter{"fleet": shared},
		Limiter:  "fleet",
		Rate:     limits.Limit{Events: 2, Period: time.Minute}, // asked first, in this process
	}})
	if err != nil {
		panic(err)
	}
	h := m.Handler(hello)
	for range 5 {
		get(h, "192.0.2.1:1", "/")
	}
	fmt.Println("calls to the shared limiter:", shared.calls)
	// Output:
	// / 200 "default";r=1;t=30
	// / 200 "default";r=0;t=60
	// / 429 "default";r=0;t=30 30
	// / 429 "default";r=0;t=30 30
	// / 429 "default";r=0;t=30 30
	// calls to the shared limiter: 2
}

// countingLimiter counts the calls of Take of the limiter it wraps.
type countingLimiter struct {
	limits.Limiter
	calls int
}

func (c *countingLimiter) Take(ctx context.Context, key string, n int) (limits.Decision, error) {
	c.calls++
	return c.Limiter.Take(ctx, key, n)
}

// An operator unblocks a client by hand, with the key the middleware uses
// for its address.
func ExampleMiddleware_Reset() {
	m, _ := httplimit.New(httplimit.Config{Limits: admit.Config{Rate: limits.Limit{Events: 1, Period: time.Hour}}})
	h := m.Handler(hello)
	get(h, "198.51.100.7:1", "/")
	get(h, "198.51.100.7:1", "/")
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "198.51.100.7:1"
	key := m.ClientKey(r)
	fmt.Println("key:", key)
	m.Reset(context.Background(), key)
	get(h, "198.51.100.7:1", "/")
	// Output:
	// / 200 "default";r=0;t=3600
	// / 429 "default";r=0;t=3600 3600
	// key: a:198.51.100.7/32
	// / 200 "default";r=0;t=3600
}

// ExampleMiddleware_ClientKey shows whose bucket a request is charged to
// behind a trusted proxy: the client the proxy forwarded; the proxy
// itself where its forwarded entry is no address, as it answers for what
// it wrote; and a:invalid only for a peer whose own address cannot be
// parsed.
func ExampleMiddleware_ClientKey() {
	m, err := httplimit.New(httplimit.Config{Limits: admit.Config{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}})
	if err != nil {
		log.Fatal(err)
	}
	for _, tc := range []struct{ peer, forwarded string }{
		{"10.0.0.1:4711", "203.0.113.9"},
		{"10.0.0.1:4711", "garbage"},
		{"10.0.0.1:4711", "garbage, 10.0.0.2"},
		{"pipe", ""},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = tc.peer
		if tc.forwarded != "" {
			r.Header.Set("X-Forwarded-For", tc.forwarded)
		}
		fmt.Println(m.ClientKey(r))
	}
	// Output:
	// a:203.0.113.9/32
	// a:10.0.0.1/32
	// a:10.0.0.2/32
	// a:invalid
}

// A WebSocket or a stream counts against the gate while it is set up, and
// gives its place back once it runs: a hijacked connection gives it back
// by itself; other long-lived handlers call ReleaseCapacity.
func ExampleReleaseCapacity() {
	m, err := httplimit.New(httplimit.Config{Limits: admit.Config{MaxInFlight: 1}})
	if err != nil {
		panic(err)
	}
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The costly part: authenticate, subscribe...
		httplimit.ReleaseCapacity(w)
		fmt.Println("in the gate while streaming:", m.Stats().Gate.InFlight)
		// ...stream for as long as the client listens.
	}))
	get(h, "192.0.2.1:1", "/events")
	// Output:
	// in the gate while streaming: 0
	// /events 200
}
