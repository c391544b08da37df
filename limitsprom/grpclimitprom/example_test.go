package grpclimitprom_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/grpclimit"
	"github.com/limitsgo/limits/limitsprom/grpclimitprom"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// An Interceptor allowing each client 2 calls a minute, of which one
// client makes 3: the calls by outcome, and the clients its policy's
// table holds, of the most it may.
func ExampleRegister() {
	it, err := grpclimit.New(grpclimit.Config{
		Rate:    limits.Limit{Events: 2, Period: time.Minute},
		MaxKeys: 10_000,
	})
	if err != nil {
		panic(err)
	}
	reg := prometheus.NewRegistry()
	if err := grpclimitprom.Register(reg, "rpc", it); err != nil {
		panic(err)
	}

	lis := bufconn.Listen(1 << 16)
	srv := grpc.NewServer(it.ServerOptions()...)
	srv.RegisterService(echoDesc(nil), struct{}{})
	go srv.Serve(lis)
	defer srv.Stop()
	conn, err := grpc.NewClient("passthrough:///example",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	for range 3 {
		var out wrapperspb.StringValue
		conn.Invoke(context.Background(), "/test.Echo/Say", wrapperspb.String("hi"), &out)
	}

	text, err := testutil.GatherAndFormat(reg, expfmt.TypeTextPlain,
		"limits_grpc_requests_total", "limits_grpc_policy_keys", "limits_grpc_policy_max_keys")
	if err != nil {
		panic(err)
	}
	for line := range strings.Lines(string(text)) {
		if !strings.HasPrefix(line, "# HELP") {
			fmt.Print(line)
		}
	}
	// Output:
	// # TYPE limits_grpc_policy_keys gauge
	// limits_grpc_policy_keys{name="rpc",policy="default"} 1
	// # TYPE limits_grpc_policy_max_keys gauge
	// limits_grpc_policy_max_keys{name="rpc",policy="default"} 10000
	// # TYPE limits_grpc_requests_total counter
	// limits_grpc_requests_total{layer="all",name="rpc",outcome="allowed"} 2
	// limits_grpc_requests_total{layer="capacity",name="rpc",outcome="request_timeout"} 0
	// limits_grpc_requests_total{layer="capacity",name="rpc",outcome="server_busy"} 0
	// limits_grpc_requests_total{layer="concurrency",name="rpc",outcome="concurrency_limited"} 0
	// limits_grpc_requests_total{layer="concurrency",name="rpc",outcome="concurrency_table_full"} 0
	// limits_grpc_requests_total{layer="exempt",name="rpc",outcome="exempt"} 0
	// limits_grpc_requests_total{layer="rate",name="rpc",outcome="cost_above_burst"} 0
	// limits_grpc_requests_total{layer="rate",name="rpc",outcome="invalid_cost"} 0
	// limits_grpc_requests_total{layer="rate",name="rpc",outcome="limiter_error"} 0
	// limits_grpc_requests_total{layer="rate",name="rpc",outcome="rate_limited"} 1
	// limits_grpc_requests_total{layer="rate",name="rpc",outcome="table_full"} 0
}
