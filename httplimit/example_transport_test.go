package httplimit_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/admit"
	"github.com/limitsgo/limits/httplimit"
	"github.com/limitsgo/limits/pace"
)

// A service calls an API that allows 10 requests a second, from 15
// goroutines at once. The Transport spaces the calls 100ms apart, so the
// API refuses none; it would learn the same pace from the API's
// RateLimit-Policy field without Rate.
func ExampleTransport() {
	// The API: a server protected by httplimit at 10 requests a second.
	m, err := httplimit.New(httplimit.Config{Limits: admit.Config{Rate: limits.Limit{Events: 10, Period: time.Second}}})
	if err != nil {
		log.Fatal(err)
	}
	api := httptest.NewServer(m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
	defer api.Close()

	client := &http.Client{Transport: &httplimit.Transport{Pace: pace.Config{Rate: limits.Limit{Events: 10, Period: time.Second}}}}

	var refused atomic.Int64
	var wg sync.WaitGroup
	for range 15 {
		wg.Go(func() {
			resp, err := client.Get(api.URL)
			if err != nil {
				log.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode == http.StatusTooManyRequests {
				refused.Add(1)
			}
		})
	}
	wg.Wait()
	fmt.Println("refused:", refused.Load())
	// Output: refused: 0
}
