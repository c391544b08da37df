package httplimit_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/admit"
	"github.com/limitsgo/limits/httplimit"
)

// A SaaS API: anonymous clients at 20 a minute per address, API keys at 60
// a minute (free) or 600 (pro), logins limited per account and per
// address, a stricter limit tried in shadow mode before it is enforced, a
// daily quota of 100 calls per key on an expensive route, and a tier's
// limit changed while serving, keeping every key's state and every count.
// Refusals are counted by route, with no code of one's own.
func Example_saas() {
	plans := map[string]string{"key-free": "free", "key-pro": "pro"} // the keys' plans, from a store
	min := func(n int) limits.Limit { return limits.Limit{Events: n, Period: time.Minute} }
	cfg := admit.Config{
		Rate:      min(20), // anonymous: per address
		CallerKey: "X-API-Key",
		Tier:      "plan",                                                                    // tiers: 1
		Tiers:     map[string]admit.Policy{"free": {Rate: min(60)}, "pro": {Rate: min(600)}}, // tiers: 2
		Policies: []admit.Policy{
			{Name: "login-account", Routes: []string{"POST /login"}, Key: "X-Account", Rate: min(5)},
			{Name: "login-address", Routes: []string{"POST /login"}, Rate: min(20)},
			{Name: "report-daily", Routes: []string{"/report"}, Key: "X-API-Key", Quota: "100/day"}, // quota: 1
			{Name: "strict", Key: "X-API-Key", Rate: min(30)},
		},
		Shadow: []string{"strict"}, // shadow: 1
	}
	m, err := httplimit.New(httplimit.Config{Limits: cfg,
		Keys: map[string]func(*http.Request) string{"plan": func(r *http.Request) string { return plans[r.Header.Get("X-API-Key")] }}}) // tiers: 3
	if err != nil {
		log.Fatal(err)
	}
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	send := func(n int, method, path, key string) (ok, refused int, policy string) {
		for range n {
			r := httptest.NewRequest(method, path, nil)
			r.RemoteAddr = "203.0.113.7:4000"
			if key != "" {
				r.Header.Set("X-API-Key", key)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code == http.StatusOK {
				ok++
				policy = w.Header().Get("RateLimit-Policy")
			} else {
				refused++
			}
		}
		return ok, refused, policy
	}
	fmt.Println(send(25, "GET", "/items", ""))
	fmt.Println(send(70, "GET", "/items", "key-free"))
	fmt.Println(send(5, "GET", "/items", "key-pro"))
	fmt.Println(send(110, "GET", "/report", "key-pro"))

	// The pro plan to 1200 a minute, while serving: key-pro keeps its
	// state (115 spent of its burst), every count goes on.
	cfg.Tiers["pro"] = admit.Policy{Rate: min(1200)} // live change: 1
	if err := m.Update(cfg); err != nil {            // live change: 2
		log.Fatal(err)
	}
	fmt.Println(send(5, "GET", "/items", "key-pro"))

	s := m.Stats()
	fmt.Println("strict would have refused", s.Shadow[limits.ReasonRateLimited])
	for _, r := range s.Routes {
		fmt.Println(r.Route, r.Requests[admit.Allowed], r.Requests[limits.ReasonRateLimited])
	}
	// Output:
	// 20 5 "address";q=80;w=60, "keyless";q=20;w=60
	// 60 10 "default/free";q=60;w=60
	// 5 0 "default/pro";q=600;w=60
	// 100 10 "default/pro";q=600;w=60, "report-daily";q=100;w=86400
	// 5 0 "default/pro";q=1200;w=60
	// strict would have refused 120
	// POST /login 0 0
	// /report 100 10
	// other 90 15
}
