// Command limits-ratelimit is a rate limit service for Envoy and the
// gateways built on it (envoy.service.ratelimit.v3 over gRPC), reading
// envoyproxy/ratelimit's configuration as it is and deciding each limit
// with an exact GCRA: in this process by default, across replicas with
// -redis.
//
//	go run ./cmd/limits-ratelimit -config examples/config
//	go run ./cmd/limits-ratelimit -config /srv/runtime_data/current/ratelimit/config -redis 127.0.0.1:6379
//
// It serves gRPC on -grpc (ShouldRateLimit and the gRPC health service)
// and HTTP on -http: /healthcheck, /json (a RateLimitRequest as JSON,
// answered 200 or 429 with the RateLimitResponse, as envoyproxy/ratelimit
// answers), /rlconfig (the limits in force) and /metrics (Prometheus). The
// configuration directory is reloaded when it changes (-watch), keeping
// every key's state; a configuration that cannot be honoured is refused
// with the file, line and field named, at start (the command exits) and
// on reload (the one before stays).
//
// Each flag's default comes from envoyproxy/ratelimit's environment
// variable where it has one, so that a deployment keeps its environment:
// RUNTIME_ROOT, RUNTIME_SUBDIRECTORY and RUNTIME_APPDIRECTORY (-config),
// RUNTIME_IGNOREDOTFILES, GRPC_HOST and GRPC_PORT (-grpc), HOST and PORT
// (-http), REDIS_URL with REDIS_SOCKET_TYPE tcp, REDIS_TYPE, REDIS_AUTH
// and REDIS_POOL_SIZE (-redis and its options), CACHE_KEY_PREFIX
// (-redis-prefix), SHADOW_MODE (-shadow), LIMIT_RESPONSE_HEADERS_ENABLED
// (-headers ietf), NEAR_LIMIT_RATIO, MERGE_DOMAIN_CONFIG, LOG_LEVEL and
// LOG_FORMAT. Variables that ask for what it does not do (BACKEND_TYPE
// memcache, CONFIG_TYPE GRPC_XDS_SOTW, REDIS_PERSECOND, GRPC_SERVER_USE_TLS,
// GRPC_UDS) stop it at start, naming the variable.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/limitsgo/limits/limitsprom"
	"github.com/limitsgo/limits/ratelimit"
)

func main() {
	if err := run(os.Args[1:], os.LookupEnv, os.Stderr, nil); err != nil {
		fmt.Fprintln(os.Stderr, "limits-ratelimit:", err)
		os.Exit(1)
	}
}

// flags are the command's settings.
type flags struct {
	config, grpcAddr, httpAddr      string
	redisAddr, redisType, redisAuth string
	redisPrefix                     string
	redisPool                       int
	leaseSlots                      int
	timeout, watch                  time.Duration
	onError, headers                string
	shadow, merge, ignoreDot        bool
	nearRatio                       float64
	logLevel, logFormat             string
	shutdownGrace                   time.Duration
}

// env returns the variable's value, or def if it is unset.
func env(lookup func(string) (string, bool), name, def string) string {
	if v, ok := lookup(name); ok {
		return v
	}
	return def
}

// parse reads the flags, with defaults from the environment.
func parse(args []string, lookup func(string) (string, bool), stderr io.Writer) (*flags, error) {
	for _, v := range []struct{ name, bad, why string }{
		{"BACKEND_TYPE", "memcache", "memcache is not a backend: use Redis (-redis) or none"},
		{"CONFIG_TYPE", "GRPC_XDS_SOTW", "configuration from an xDS server is not supported: use files (-config)"},
		{"REDIS_PERSECOND", "true", "a second Redis for per-second limits is not supported: one Redis serves every limit"},
		{"GRPC_SERVER_USE_TLS", "true", "TLS is not supported: terminate it in front (a sidecar)"},
	} {
		if val, ok := lookup(v.name); ok && strings.EqualFold(val, v.bad) {
			return nil, fmt.Errorf("%s=%s: %s", v.name, val, v.why)
		}
	}
	if v, ok := lookup("GRPC_UDS"); ok && v != "" {
		return nil, errors.New("GRPC_UDS: a Unix socket is not supported: use -grpc")
	}
	f := &flags{}
	fs := flag.NewFlagSet("limits-ratelimit", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configDef := ""
	if root, ok := lookup("RUNTIME_ROOT"); ok {
		configDef = filepath.Join(root, env(lookup, "RUNTIME_SUBDIRECTORY", ""), env(lookup, "RUNTIME_APPDIRECTORY", "config"))
	}
	fs.StringVar(&f.config, "config", configDef, "the directory of the configuration files (envoyproxy/ratelimit's YAML); default RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY")
	fs.StringVar(&f.grpcAddr, "grpc", net.JoinHostPort(env(lookup, "GRPC_HOST", ""), env(lookup, "GRPC_PORT", "8081")), "the gRPC address to serve")
	fs.StringVar(&f.httpAddr, "http", net.JoinHostPort(env(lookup, "HOST", ""), env(lookup, "PORT", "8080")), `the HTTP address to serve /healthcheck, /json, /rlconfig and /metrics on; "" for none`)
	redisDef := ""
	if strings.EqualFold(env(lookup, "REDIS_SOCKET_TYPE", ""), "tcp") {
		redisDef = env(lookup, "REDIS_URL", "")
	}
	fs.StringVar(&f.redisAddr, "redis", redisDef, "Redis addresses, comma-separated, for limits shared by replicas; none decides in this process")
	fs.StringVar(&f.redisType, "redis-type", strings.ToLower(env(lookup, "REDIS_TYPE", "single")), "single, cluster, or sentinel (the first address is then the master's name)")
	fs.StringVar(&f.redisAuth, "redis-auth", env(lookup, "REDIS_AUTH", ""), `Redis's password, or "user:password"`)
	fs.StringVar(&f.redisPrefix, "redis-prefix", env(lookup, "CACHE_KEY_PREFIX", "")+"rls:", "the prefix of the Redis keys")
	pool, err := strconv.Atoi(env(lookup, "REDIS_POOL_SIZE", "0"))
	if err != nil {
		return nil, fmt.Errorf("REDIS_POOL_SIZE: %v", err)
	}
	fs.IntVar(&f.redisPool, "redis-pool", pool, "connections to each Redis node; 0 for go-redis's default")
	fs.IntVar(&f.leaseSlots, "lease-slots", 64, "the most slots a lease of a hot descriptor holds; 1 for a Redis call per decision")
	fs.DurationVar(&f.timeout, "timeout", 100*time.Millisecond, "the most a decision waits on Redis; then the failure policy applies")
	fs.StringVar(&f.onError, "on-error", "error", "failure policy where the configuration sets none: error (answer Unavailable, Envoy's failure_mode_deny decides), open (OK) or closed (OVER_LIMIT)")
	headersDef := "none"
	if b, _ := strconv.ParseBool(env(lookup, "LIMIT_RESPONSE_HEADERS_ENABLED", "false")); b {
		headersDef = "ietf"
	}
	fs.StringVar(&f.headers, "headers", headersDef, "rate limit fields in response_headers_to_add: none, ietf (draft-10 RateLimit and RateLimit-Policy), ietf_legacy, legacy (X-RateLimit-*)")
	shadow, _ := strconv.ParseBool(env(lookup, "SHADOW_MODE", "false"))
	fs.BoolVar(&f.shadow, "shadow", shadow, "every limit in shadow mode: counted, never enforced")
	merge, _ := strconv.ParseBool(env(lookup, "MERGE_DOMAIN_CONFIG", "false"))
	fs.BoolVar(&f.merge, "merge-domains", merge, "let several files configure one domain")
	ignoreDot, _ := strconv.ParseBool(env(lookup, "RUNTIME_IGNOREDOTFILES", "false"))
	fs.BoolVar(&f.ignoreDot, "ignore-dot-files", ignoreDot, "skip configuration files whose names start with a dot")
	ratio, err := strconv.ParseFloat(env(lookup, "NEAR_LIMIT_RATIO", "0.8"), 64)
	if err != nil {
		return nil, fmt.Errorf("NEAR_LIMIT_RATIO: %v", err)
	}
	fs.Float64Var(&f.nearRatio, "near-limit-ratio", ratio, "the share of a limit's burst past which hits count as near the limit")
	fs.DurationVar(&f.watch, "watch", time.Second, "how often to look for changes of the configuration; 0 for never")
	fs.StringVar(&f.logLevel, "log-level", strings.ToLower(env(lookup, "LOG_LEVEL", "warn")), "debug (each refusal), info, warn or error")
	fs.StringVar(&f.logFormat, "log-format", strings.ToLower(env(lookup, "LOG_FORMAT", "text")), "text or json")
	fs.DurationVar(&f.shutdownGrace, "shutdown-grace", 5*time.Second, "how long calls in progress may take to end at SIGTERM")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if f.config == "" {
		return nil, errors.New("-config is required: the directory of the configuration files")
	}
	return f, nil
}

// logger returns the logger the flags ask for.
func (f *flags) logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	switch f.logLevel {
	case "debug", "trace":
		level = slog.LevelDebug
	case "info":
		level = slog.LevelInfo
	case "warn", "warning", "":
		level = slog.LevelWarn
	case "error", "fatal", "panic":
		level = slog.LevelError
	default:
		return nil, fmt.Errorf("-log-level: want debug, info, warn or error, got %q", f.logLevel)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch f.logFormat {
	case "text", "":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("-log-format: want text or json, got %q", f.logFormat)
}

// redisClient returns the Redis client the flags ask for, nil for none.
func (f *flags) redisClient() (redis.UniversalClient, error) {
	if f.redisAddr == "" {
		return nil, nil
	}
	addrs := strings.Split(f.redisAddr, ",")
	opts := &redis.UniversalOptions{
		Addrs:                 addrs,
		PoolSize:              f.redisPool,
		ContextTimeoutEnabled: true,
		MaxRetries:            -1, // a failed call fails within the timeout, not after retries
		DialerRetries:         1,
	}
	if f.redisAuth != "" {
		if user, pass, ok := strings.Cut(f.redisAuth, ":"); ok {
			opts.Username, opts.Password = user, pass
		} else {
			opts.Password = f.redisAuth
		}
	}
	switch f.redisType {
	case "single":
		if len(addrs) != 1 {
			return nil, fmt.Errorf("-redis: a single Redis has one address, got %d", len(addrs))
		}
		return redis.NewClient(opts.Simple()), nil
	case "cluster":
		return redis.NewClusterClient(opts.Cluster()), nil
	case "sentinel":
		if len(addrs) < 2 {
			return nil, errors.New("-redis: with sentinel, the master's name and then the sentinels' addresses")
		}
		opts.MasterName, opts.Addrs = addrs[0], addrs[1:]
		return redis.NewFailoverClient(opts.Failover()), nil
	}
	return nil, fmt.Errorf("-redis-type: want single, cluster or sentinel, got %q", f.redisType)
}

// run runs the service until SIGINT or SIGTERM, or until ready, if not
// nil, is sent the addresses served and then closed by the caller's
// context (tests).
func run(args []string, lookup func(string) (string, bool), stderr io.Writer, ready func(grpcAddr, httpAddr string, stop context.CancelFunc)) error {
	f, err := parse(args, lookup, stderr)
	if err != nil {
		return err
	}
	logger, err := f.logger(stderr)
	if err != nil {
		return err
	}
	rdb, err := f.redisClient()
	if err != nil {
		return err
	}
	opts := ratelimit.Options{
		RedisPrefix: f.redisPrefix, LeaseSlots: f.leaseSlots, Timeout: f.timeout,
		OnError: ratelimit.FailurePolicy(f.onError), ShadowMode: f.shadow, Headers: f.headers,
		NearLimitRatio: f.nearRatio, Logger: logger,
		Load: ratelimit.LoadOptions{MergeDomains: f.merge, IgnoreDotFiles: f.ignoreDot},
	}
	if rdb != nil {
		opts.Redis = rdb
		defer rdb.Close()
	}
	svc, err := ratelimit.New(opts)
	if err != nil {
		return err
	}
	if err := svc.LoadDir(f.config); err != nil {
		return fmt.Errorf("loading the configuration: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if f.watch > 0 {
		go svc.Watch(ctx, f.config, f.watch)
	}

	gl, err := net.Listen("tcp", f.grpcAddr)
	if err != nil {
		return err
	}
	// Stream workers serve calls on goroutines that are reused, rather
	// than one new goroutine per call.
	srv := grpc.NewServer(grpc.NumStreamWorkers(uint32(runtime.GOMAXPROCS(0))))
	pb.RegisterRateLimitServiceServer(srv, svc)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus(pb.RateLimitService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	errs := make(chan error, 2)
	go func() { errs <- srv.Serve(gl) }()

	var hsrv *http.Server
	httpAddr := ""
	if f.httpAddr != "" {
		reg := prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		if err := limitsprom.Register(reg, "ratelimit", svc); err != nil {
			return err
		}
		hl, err := net.Listen("tcp", f.httpAddr)
		if err != nil {
			return err
		}
		httpAddr = hl.Addr().String()
		hsrv = &http.Server{Handler: handler(svc, hs, reg), ReadHeaderTimeout: 10 * time.Second}
		go func() { errs <- hsrv.Serve(hl) }()
	}
	logger.Info("limits-ratelimit: serving", slog.String("grpc", gl.Addr().String()), slog.String("http", httpAddr),
		slog.String("config", f.config), slog.Bool("redis", rdb != nil))
	if ready != nil {
		ready(gl.Addr().String(), httpAddr, stop)
	}
	select {
	case <-ctx.Done():
	case err := <-errs:
		return err
	}
	// Orderly shutdown: unhealthy first, so that Envoy stops sending, then
	// the calls in progress end, then the leases go back to Redis.
	hs.Shutdown()
	done := make(chan struct{})
	go func() { srv.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(f.shutdownGrace):
		srv.Stop()
	}
	if hsrv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), f.shutdownGrace)
		hsrv.Shutdown(sctx)
		cancel()
	}
	if rdb != nil {
		rctx, cancel := context.WithTimeout(context.Background(), f.shutdownGrace)
		defer cancel()
		if err := svc.ReturnLeases(rctx); err != nil {
			logger.Warn("limits-ratelimit: leases not all returned", slog.String("error", err.Error()))
		}
	}
	return nil
}

// handler serves the HTTP endpoints.
func handler(svc *ratelimit.Service, hs *health.Server, reg *prometheus.Registry) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthcheck", func(w http.ResponseWriter, r *http.Request) {
		resp, err := hs.Check(r.Context(), &healthpb.HealthCheckRequest{})
		if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
			http.Error(w, "NOT SERVING", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "OK")
	})
	mux.HandleFunc("POST /json", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var req pb.RateLimitRequest
		if err := protojson.Unmarshal(body, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		resp, err := svc.ShouldRateLimit(r.Context(), &req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		out, err := protojson.Marshal(resp)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if resp.OverallCode == pb.RateLimitResponse_OVER_LIMIT {
			w.WriteHeader(http.StatusTooManyRequests)
		}
		w.Write(out)
	})
	mux.HandleFunc("/rlconfig", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, svc.Config())
	})
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return mux
}
