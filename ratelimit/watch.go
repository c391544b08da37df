package ratelimit

// This file reloads the configuration when its directory changes, and
// describes the Service's metrics.

import (
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/limitsgo/limits/admit"
	"github.com/limitsgo/limits/metrics"
)

// Watch reloads the configuration from dir whenever a file in it changes,
// is added or removed, or a symbolic link on the way to it is swapped
// (envoyproxy/ratelimit's runtime layout), looking every interval (0
// means a second), until ctx ends: whenever it differs from what LoadDir
// read last. A configuration that cannot be loaded
// is logged and counted, and the one before stays in force. Each load
// keeps every key's state and every counter.
func (s *Service) Watch(ctx context.Context, dir string, interval time.Duration) {
	if interval <= 0 {
		interval = time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if fingerprint(dir, s.opts.Load.IgnoreDotFiles) != s.fp.Load() {
			s.reload(dir)
		}
	}
}

// reload loads dir, and logs how it went.
func (s *Service) reload(dir string) {
	err := s.LoadDir(dir)
	l := s.opts.Logger
	if l == nil {
		return
	}
	if err != nil {
		l.Error("ratelimit: configuration not loaded; the one before stays", slog.String("dir", dir), slog.String("error", err.Error()))
		return
	}
	l.Info("ratelimit: configuration loaded", slog.String("dir", dir), slog.Int("limits", len(s.cur.Load().nodes)))
}

// fingerprint returns a hash of what LoadDir would read from dir: the
// directory a link resolves to, and each file's path, size, mode and time
// of change.
func fingerprint(dir string, ignoreDot bool) uint64 {
	h := fnv.New64a()
	root, err := filepath.EvalSymlinks(dir)
	fmt.Fprintf(h, "%s\x00%v\x00", root, err)
	files, err := configFiles(dir, ignoreDot)
	fmt.Fprintf(h, "%v\x00", err)
	for _, f := range files {
		info, err := os.Stat(f)
		if err != nil {
			fmt.Fprintf(h, "%s\x00%v\x00", f, err)
			continue
		}
		real, _ := filepath.EvalSymlinks(f)
		fmt.Fprintf(h, "%s\x00%s\x00%d\x00%v\x00%d\x00", f, real, info.Size(), info.Mode(), info.ModTime().UnixNano())
	}
	return h.Sum64()
}

// engineStats is the Service seen as a front end of the engine, for the
// metrics package's description of front ends.
type engineStats struct{ s *Service }

func (e engineStats) Stats() admit.Stats { return e.s.Stats() }

// Metrics returns the description of the Service's metrics, for
// limitsprom.Register and limitsotel.Register: those of a front end of
// the engine under the subsystem ratelimit (limits_ratelimit_requests_total,
// limits_ratelimit_policy_requests_total{policy, outcome} and
// limits_ratelimit_policy_shadow_refusals_total{policy, outcome}, with one
// policy per limit of the configuration, named by its path of keys and
// values, as envoyproxy/ratelimit names its stats, and
// limits_ratelimit_route_requests_total{route, outcome} by domain), and
// its own:
//
//	limits_ratelimit_near_limit_total{policy}      counter  hits allowed that left the key near its limit (NearLimitRatio)
//	limits_ratelimit_descriptors_total{outcome}    counter  descriptors matching no limit (unmatched), an unlimited one, or replaced; requests of an unknown domain (unknown_domain)
//	limits_ratelimit_errors_total{kind}            counter  calls answered with an error: invalid, unavailable (no decision: Redis, under the failure policy error), canceled
//	limits_ratelimit_redis_errors_total            counter  decisions Redis did not make, whatever the failure policy did
//	limits_ratelimit_config_loads_total{result}    counter  loads of the configuration: ok, or failed (the one before stayed)
//	limits_ratelimit_calls_total                   counter  ShouldRateLimit calls
//
// Every label value is a name of the configuration or a fixed word, never
// a descriptor's value.
func (s *Service) Metrics() metrics.Set {
	front, _ := metrics.For(engineStats{s})
	const sub = "ratelimit"
	own := []metrics.Metric{
		{Subsystem: sub, Name: "near_limit", Kind: metrics.Counter, Unit: "{hit}", Labels: []string{"policy"},
			Help: "Hits allowed that left their key with at most the share 1-NearLimitRatio of its burst, by limit."},
		{Subsystem: sub, Name: "descriptors", Kind: metrics.Counter, Unit: "{descriptor}", Labels: []string{"outcome"},
			Help: "Descriptors that matched no limit (unmatched), an unlimited one (unlimited), or a replaced one (replaced); requests of an unknown domain (unknown_domain)."},
		{Subsystem: sub, Name: "errors", Kind: metrics.Counter, Unit: "{call}", Labels: []string{"kind"},
			Help: "Calls answered with an error: an invalid request, no decision (unavailable), or a caller gone (canceled)."},
		{Subsystem: sub, Name: "redis_errors", Kind: metrics.Counter, Unit: "{decision}",
			Help: "Decisions Redis did not make, whatever the failure policy then did."},
		{Subsystem: sub, Name: "config_loads", Kind: metrics.Counter, Unit: "{load}", Labels: []string{"result"},
			Help: "Loads of the configuration: ok, or failed, the configuration before staying in force."},
		{Subsystem: sub, Name: "calls", Kind: metrics.Counter, Unit: "{call}",
			Help: "ShouldRateLimit calls."},
	}
	at := len(front.Metrics)
	return metrics.Set{
		Metrics: append(front.Metrics[:at:at], own...),
		Read: func(e metrics.Emitter) {
			front.Read(e)
			for _, n := range s.cur.Load().nodes {
				e.Value(at, metrics.Count(n.near.Load()), n.policy)
			}
			c := &s.n
			e.Value(at+1, metrics.Count(c.unmatched.Load()), "unmatched")
			e.Value(at+1, metrics.Count(c.unlimited.Load()), "unlimited")
			e.Value(at+1, metrics.Count(c.replaced.Load()), "replaced")
			e.Value(at+1, metrics.Count(c.unknownDomain.Load()), "unknown_domain")
			e.Value(at+2, metrics.Count(c.invalid.Load()), "invalid")
			e.Value(at+2, metrics.Count(c.unavailable.Load()), "unavailable")
			e.Value(at+2, metrics.Count(c.canceled.Load()), "canceled")
			e.Value(at+3, metrics.Count(c.redisErrors.Load()))
			e.Value(at+4, metrics.Count(c.loads.Load()), "ok")
			e.Value(at+4, metrics.Count(c.loadErrors.Load()), "failed")
			e.Value(at+5, metrics.Count(c.requests.Load()))
		},
	}
}
