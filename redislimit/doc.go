// Package redislimit limits requests per key across many processes: the
// GCRA of package limits with its state in Redis, through go-redis.
//
// A limits.GCRA limits what one process allows. When a fleet of N processes
// each runs one, a caller spread over them gets N times the limit; a GCRA
// from this package keeps one state per key in Redis, shared by the fleet,
// and makes the same decisions as limits.GCRA would, in one round trip per
// request. Both implement limits.Limiter, so a front end takes either.
//
//	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{"redis:6379"}, ContextTimeoutEnabled: true})
//	perKey, err := redislimit.New(rdb, 100, time.Minute, redislimit.WithPrefix("limits:api:"))
//	if err != nil {
//		log.Fatal(err) // an invalid limit
//	}
//	ctx, apiKey := context.Background(), "key"
//	d, err := perKey.Allow(ctx, apiKey)
//
// # Semantics
//
// The decision, Remaining, RetryAfter and ResetAfter are those of
// limits.GCRA with the same limit, period and burst, at the time of the
// Redis server's clock (TIME, in microseconds), which is the Decision's
// At. The arithmetic is exact, as in limits.GCRA: the emission interval
// T = period/limit is kept as a fraction of a nanosecond, so 7 an hour
// lets exactly 7 through at once and takes exactly an hour to come back,
// and durations are rounded up once, to the nanosecond. Costs of 0, above
// the burst and below 0 are answered as limits.GCRA answers them.
//
// The state of a key is one string, its theoretical arrival time: whole
// nanoseconds since the Unix epoch, followed by ":" and the fraction of a
// nanosecond in units of 1/den ns when there is one (see GCRA), set to
// expire once the key is back to its full burst. It needs Redis 6.2 or
// later.
//
// Refund gives a charge back, when a later check refuses a request an
// earlier one allowed: in one atomic script, the part of the charge the key
// still owes, never leaving it owing less than had the request never been
// made.
//
// # Failures
//
// When Redis cannot decide, the policy chosen at construction does.
// FailClosed, the default, refuses and returns an error wrapping
// ErrUnavailable; FailOpen allows; WithFallback asks a local limits.GCRA. Every
// call is bounded by the caller's context and a timeout (DefaultTimeout,
// 100ms), and Stats counts the failures. Redis may be down when New is
// called and may go away and come back: calls fail by the policy meanwhile
// and decide again once it answers. While Redis is unreachable each call
// fails within the timeout. With go-redis's default options it usually
// takes about that long: go-redis retries a failed dial (DialerRetries, 5,
// with pauses of 100ms) and a failed command (MaxRetries, 3, with pauses
// of 8 to 512ms), and even once it fails dials at once, after PoolSize of
// them failed in a row, the pauses between retries remain. With
// MaxRetries: -1 and DialerRetries: 1 a refused connection fails the call
// at once. The error says why the connection failed when it is known (the
// dial's error), not only that the time ran out, and every error of a call
// that ran out of time wraps context.DeadlineExceeded.
//
// A failed call may still have charged its key in Redis: a command that
// reached Redis after its caller gave up still runs, and go-redis retries a
// command whose connection broke, which may charge it twice. Failures never
// lower what a key owes; a failed Refund leaves the charge in place.
//
// # When Redis loses data
//
// What a key owes lives only in Redis, so whatever makes Redis lose writes
// forgives debts: each key it forgets starts again with its full burst. A
// restart without persistence forgets every key; a failover to a replica
// that had not yet received the latest writes forgets those charges. For
// a limit that protects a service this is usually acceptable (one extra
// burst per key and outage). Where it is not, as for a quota that is
// billed, configure Redis to keep what it acknowledged:
//
//   - persistence with the append-only file (appendonly yes), with
//     appendfsync always to lose nothing on a crash, or everysec to lose
//     at most about a second of charges;
//   - for replicas, min-replicas-to-write and min-replicas-max-lag on the
//     primary, so that it refuses writes (and this package's calls fail by
//     the policy) unless enough replicas are close behind, bounding what a
//     failover can lose; a client that must know a write reached replicas
//     sends WAIT after it, which this package does not do.
//
// A server clock that jumps ahead forgives debts too, and one that goes
// back makes keys owe more, up to one full burst (see GCRA).
//
// # Leases
//
// WithLeases makes a key that is hot in a process cost a Redis call per
// lease of up to slots decisions rather than per decision: the process
// takes a run of the key's next emission slots in one script call and
// spends them locally, each within the GCRA's tolerance of its own time,
// so that the fleet's admissions still conform to the one GCRA. What it
// costs is bounded under-admission, at most (P+1)*slots + burst/8 for P
// processes at any moment; see WithLeases.
//
// # Changing a limit
//
// SetLimit changes a GCRA's limit while it serves, by one rule: a key's
// TAT is kept, so that under a stricter limit it waits longer, with an
// exact RetryAfter, and no change hands out a fresh burst; counters keep
// counting. The limit lives in each process: each process of a fleet
// calls SetLimit itself, and while they disagree each decides by its own
// on the one TAT per key. In lease mode the slots in hand go back to
// Redis at the change.
//
// # Redis Cluster
//
// Each key goes to the slot of its own name by default; WithHashTag puts
// all keys of one limiter in one slot, at the cost of putting all its load
// on one node.
//
// # Calendar quotas
//
// NewQuota makes the calendar quota of package quota (so many events per
// key per day, week or month in a time zone) for a fleet: one count per
// key and period in Redis, expiring when the period ends, decided on the
// server's clock with the decisions of a quota.Quota, RetryAfter exact to
// the next period's start, days of 23 and 25 hours included.
package redislimit
