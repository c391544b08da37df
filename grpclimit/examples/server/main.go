// Command server serves a small gRPC service on loopback behind the
// interceptors of package grpclimit: the health service exempt, a gate of
// 32 calls, 10 calls a second per client address and per authorization
// token, 8 unary calls and 2 streams open per client. From the grpclimit
// directory:
//
//	go run ./examples/server                  # serve on 127.0.0.1:50051 until interrupted
//	go run ./examples/server -duration 30s    # serve, and stop after 30 seconds
//	go run ./examples/server -demo            # call itself as a few clients, print what each got
//
// The LIMITS_* variables of admit.Config.LoadEnv change the limits,
// such as LIMITS_RATE=100/min. Loopback is a trusted proxy, so a local
// client may name the client it stands for in x-forwarded-for, as the
// demo's clients do; the server listens on loopback only.
//
// The service, demo.Greeter, is written without generated code: Hello
// (unary, a string in and out) and Ticks (a server stream of a tick every
// 100ms, until the client cancels).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/admit"
	"github.com/limitsgo/limits/grpclimit"
)

func main() {
	log.SetFlags(0)
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		log.Fatal(err)
	}
}

// run parses args, serves until the duration passes or an interrupt, and
// writes what happened to out; logs go to logs.
func run(args []string, out, logs io.Writer) error {
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	fs.SetOutput(logs)
	addr := fs.String("addr", "127.0.0.1:50051", "loopback `address` to listen on")
	duration := fs.Duration("duration", 0, "stop after this long (0: serve until interrupted)")
	demo := fs.Bool("demo", false, "call the server as a few clients for a second or two, print what each got, and stop")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := loopback(*addr); err != nil {
		return err
	}
	cfg := grpclimit.Config{Limits: admit.Config{
		MaxInFlight:          32,
		QueueWait:            10 * time.Millisecond,
		Timeout:              2 * time.Second,
		Rate:                 limits.Limit{Events: 10, Period: time.Second},
		CallerKey:            "authorization",
		MaxInFlightPerClient: 8,
		MaxStreamsPerClient:  2,
		TrustedProxies:       []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")},
		Logger:               slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}}
	if err := cfg.Limits.LoadEnv("", nil); err != nil {
		return err
	}
	l, err := grpclimit.New(cfg)
	if err != nil {
		return err
	}
	srv := grpc.NewServer(l.ServerOptions()...)
	srv.RegisterService(&greeter, nil)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	fmt.Fprintf(out, "serving demo.Greeter on %s\n", lis.Addr())

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if *duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *duration)
		defer cancel()
	}
	if *demo {
		if *duration == 0 {
			*duration = 1500 * time.Millisecond
		}
		err = drive(ctx, lis.Addr().String(), *duration, out)
	} else {
		<-ctx.Done()
	}
	srv.GracefulStop()
	if serr := <-served; serr != nil && !errors.Is(serr, grpc.ErrServerStopped) {
		return serr
	}
	stats, _ := json.MarshalIndent(l.Stats(), "", "  ")
	fmt.Fprintf(out, "stats: %s\n", stats)
	return err
}

// loopback returns an error unless addr's host is a loopback address or
// localhost.
func loopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("-addr %q: %w", addr, err)
	}
	if a, err := netip.ParseAddr(host); (err != nil || !a.IsLoopback()) && host != "localhost" {
		return fmt.Errorf("-addr %q: this example listens on loopback only", addr)
	}
	return nil
}

// greeter is the demo.Greeter service.
var greeter = grpc.ServiceDesc{
	ServiceName: "demo.Greeter",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Hello",
		Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := func(ctx context.Context, req any) (any, error) {
				time.Sleep(5 * time.Millisecond) // some work
				return wrapperspb.String("hello, " + req.(*wrapperspb.StringValue).GetValue()), nil
			}
			if ic == nil {
				return h(ctx, in)
			}
			return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/demo.Greeter/Hello"}, h)
		},
	}},
	Streams: []grpc.StreamDesc{{
		StreamName:    "Ticks",
		ServerStreams: true,
		Handler: func(srv any, ss grpc.ServerStream) error {
			if err := ss.RecvMsg(new(wrapperspb.StringValue)); err != nil {
				return err
			}
			t := time.NewTicker(100 * time.Millisecond)
			defer t.Stop()
			for {
				// The first send establishes the stream: it leaves the gate.
				if err := ss.SendMsg(wrapperspb.String("tick")); err != nil {
					return err
				}
				select {
				case <-ss.Context().Done():
					return nil
				case <-t.C:
				}
			}
		},
	}},
}

// client is one of the demo's clients: the address it stands for, its
// token, and what it does.
type client struct {
	name, addr, token string
	act               func(ctx context.Context, c *client, conn *grpc.ClientConn)

	mu      sync.Mutex
	results map[string]int // "ok" or the refusal's reason, counted
}

func (c *client) record(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch r := grpclimit.ReasonOf(err); {
	case err == nil:
		c.results["ok"]++
	case r != admit.Allowed:
		c.results[r.String()]++
	default:
		c.results[status.Code(err).String()]++
	}
}

// outgoing returns ctx with c's forwarded address and token.
func (c *client) outgoing(ctx context.Context) context.Context {
	md := []string{"x-forwarded-for", c.addr}
	if c.token != "" {
		md = append(md, "authorization", "Bearer "+c.token)
	}
	return metadata.AppendToOutgoingContext(ctx, md...)
}

// every calls f every interval until ctx ends.
func every(ctx context.Context, interval time.Duration, f func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for ctx.Err() == nil {
		f()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// callContext returns the context of one call made while ctx lasts: the
// call may finish after the demo's end.
func callContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
}

func hello(ctx context.Context, c *client, conn *grpc.ClientConn) {
	ctx, cancel := callContext(ctx)
	defer cancel()
	var out wrapperspb.StringValue
	c.record(conn.Invoke(c.outgoing(ctx), "/demo.Greeter/Hello", wrapperspb.String(c.name), &out))
}

// drive runs the demo's clients against addr for d, and prints what each
// got.
func drive(ctx context.Context, addr string, d time.Duration, out io.Writer) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	clients := []*client{
		{name: "polite", addr: "192.0.2.1", token: "polite", act: func(ctx context.Context, c *client, conn *grpc.ClientConn) {
			every(ctx, 200*time.Millisecond, func() { hello(ctx, c, conn) }) // 5 a second, under 10
		}},
		{name: "greedy", addr: "192.0.2.2", token: "greedy", act: func(ctx context.Context, c *client, conn *grpc.ClientConn) {
			every(ctx, 5*time.Millisecond, func() { hello(ctx, c, conn) }) // 200 a second
		}},
		{name: "rotator", addr: "192.0.2.3", act: func(ctx context.Context, c *client, conn *grpc.ClientConn) {
			n := 0
			every(ctx, 10*time.Millisecond, func() { // a new token every call
				n++
				c.token = fmt.Sprint("rotated-", n)
				hello(ctx, c, conn)
			})
		}},
		{name: "streamer", addr: "192.0.2.4", token: "streamer", act: func(ctx context.Context, c *client, conn *grpc.ClientConn) {
			var wg sync.WaitGroup
			for range 4 { // 2 may be open at once
				wg.Go(func() {
					cs, err := conn.NewStream(c.outgoing(ctx), &greeter.Streams[0], "/demo.Greeter/Ticks")
					if err == nil {
						err = cs.SendMsg(wrapperspb.String("ticks"))
					}
					if err == nil {
						err = cs.RecvMsg(new(wrapperspb.StringValue))
					}
					c.record(err)
				})
				time.Sleep(20 * time.Millisecond)
			}
			wg.Wait()
			<-ctx.Done()
		}},
		{name: "probe", addr: "192.0.2.5", act: func(ctx context.Context, c *client, conn *grpc.ClientConn) {
			hc := healthpb.NewHealthClient(conn)
			every(ctx, 50*time.Millisecond, func() {
				ctx, cancel := callContext(ctx)
				defer cancel()
				_, err := hc.Check(c.outgoing(ctx), &healthpb.HealthCheckRequest{})
				c.record(err)
			})
		}},
	}
	var wg sync.WaitGroup
	for _, c := range clients {
		c.results = map[string]int{}
		wg.Go(func() { c.act(ctx, c, conn) })
	}
	wg.Wait()
	for _, c := range clients {
		fmt.Fprintf(out, "%-9s", c.name)
		keys := make([]string, 0, len(c.results))
		for k := range c.results {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			fmt.Fprintf(out, " %s=%d", k, c.results[k])
		}
		fmt.Fprintln(out)
	}
	return nil
}
