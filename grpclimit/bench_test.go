package grpclimit

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"

	"github.com/limitsgo/limits"
)

// peers returns n contexts of calls from n client addresses, as the
// server hands them to interceptors.
func peers(n int) []context.Context {
	ctxs := make([]context.Context, n)
	for i := range ctxs {
		addr := &net.TCPAddr{IP: net.IPv4(10, byte(i>>16), byte(i>>8), byte(i)), Port: 40000}
		ctxs[i] = peer.NewContext(context.Background(), &peer.Peer{Addr: addr})
	}
	return ctxs
}

var benchInfo = &grpc.UnaryServerInfo{FullMethod: methodSay}

func noop(ctx context.Context, req any) (any, error) { return req, nil }

// benchConfigs are the configurations the benchmarks and the allocation
// test run: the rate layer alone, and every layer of a unary call.
var benchConfigs = []struct {
	name string
	cfg  Config
}{
	{"rate", Config{Rate: limits.Limit{Events: 1 << 30, Period: time.Second}}},
	{"all", Config{MaxInFlight: 1 << 20, Rate: limits.Limit{Events: 1 << 30, Period: time.Second}, MaxInFlightPerClient: 1 << 20}},
}

// BenchmarkUnary measures the unary interceptor alone, around a handler
// that does nothing, for 1,024 clients.
func BenchmarkUnary(b *testing.B) {
	ctxs := peers(1024)
	for _, bc := range benchConfigs {
		it := mustNewB(b, bc.cfg)
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				it.Unary(ctxs[i&1023], nil, benchInfo, noop)
				i++
			}
		})
		b.Run(bc.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					it.Unary(ctxs[i&1023], nil, benchInfo, noop)
					i++
				}
			})
		})
	}
}

func mustNewB(b *testing.B, cfg Config) *Interceptor {
	it, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return it
}

// TestUnaryAllocs bounds the allocations of an allowed unary call: the
// client's key, and, when the call holds a place, the context that holds
// it.
func TestUnaryAllocs(t *testing.T) {
	ctx := peers(1)[0]
	for _, bc := range benchConfigs {
		it := mustNew(t, bc.cfg)
		got := testing.AllocsPerRun(100, func() { it.Unary(ctx, nil, benchInfo, noop) })
		want := 1.0
		if bc.cfg.MaxInFlight > 0 {
			want++
		}
		if got > want {
			t.Errorf("%s: %v allocations per call, want at most %v", bc.name, got, want)
		}
	}
}
