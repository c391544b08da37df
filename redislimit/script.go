package redislimit

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// gcraScript makes one decision for the key KEYS[1], on the clock of the
// Redis server that holds it.
//
// Arguments: ARGV[1] and ARGV[2] are the cost of the request, n*T, in whole
// seconds and the nanoseconds left over; ARGV[3] and ARGV[4] are d = burst*T
// in the same form; ARGV[5] is "1" to charge an allowed request and "0" to
// look only.
//
// The key holds the TAT as a decimal integer: nanoseconds since the Unix
// epoch. Lua numbers in Redis are doubles, exact for integers below 2^53
// (about 9.0e15), and a time in nanoseconds (about 1.8e18) is not. So the
// script never holds a time in one number: it splits the stored TAT into
// its seconds (the digits before the last nine) and its nanoseconds (the
// last nine digits), and every time or duration it computes with is such a
// pair, the nanoseconds normalised to [0, 1e9). Each part of each pair stays
// below about 1e10 (seconds since 1970 plus at most twice d, itself at most
// about 73 years), so every sum, difference and comparison is exact. The
// script does no division and no multiplication but the one that turns
// seconds into the milliseconds of the key's expiry, exact too.
//
// With ahead = max(TAT, now) - now, the request is allowed if and only if
// ahead + n*T <= d, the local GCRA's inequality moved by now; when allowed
// and charged, TAT becomes now + ahead + n*T. The key then expires at the
// TAT rounded up to a millisecond (SET with PXAT, Redis 6.2 or later): its
// time to live is the time until the key is back to its full burst, and it
// never expires while it carries debt. An absolute expiry is used because
// a relative one (PX) counts from Redis's own millisecond clock, which may
// lag the microseconds of TIME. A refusal or a look writes nothing.
//
// It returns five integers: 1 if allowed or 0; how far the TAT runs ahead
// of now after the decision, in seconds and nanoseconds; and now, as TIME
// gave it, in seconds and microseconds. The Go side derives Remaining and
// RetryAfter from these with int64 arithmetic, as the local GCRA does.
//
// Writing after TIME needs effects replication, the default since Redis 5.0
// and the only mode since 7.0.
const gcraScript = `
local clock = redis.call('TIME')
local now_s, now_us = tonumber(clock[1]), tonumber(clock[2])
local now_ns = now_us * 1000
local ahead_s, ahead_ns = 0, 0
local stored = redis.call('GET', KEYS[1])
if stored then
  local s, ns = tonumber(string.sub(stored, 1, -10)), tonumber(string.sub(stored, -9))
  if s == nil or ns == nil then
    return redis.error_reply('redislimit: key ' .. KEYS[1] .. ' does not hold a TAT')
  end
  s, ns = s - now_s, ns - now_ns
  if ns < 0 then s, ns = s - 1, ns + 1e9 end
  if s >= 0 then ahead_s, ahead_ns = s, ns end
end
local next_s, next_ns = ahead_s + tonumber(ARGV[1]), ahead_ns + tonumber(ARGV[2])
if next_ns >= 1e9 then next_s, next_ns = next_s + 1, next_ns - 1e9 end
local d_s, d_ns = tonumber(ARGV[3]), tonumber(ARGV[4])
if next_s > d_s or (next_s == d_s and next_ns > d_ns) then
  return {0, ahead_s, ahead_ns, now_s, now_us}
end
if ARGV[5] ~= '1' then
  return {1, ahead_s, ahead_ns, now_s, now_us}
end
local tat_s, tat_ns = now_s + next_s, now_ns + next_ns
if tat_ns >= 1e9 then tat_s, tat_ns = tat_s + 1, tat_ns - 1e9 end
redis.call('SET', KEYS[1], string.format('%d%09d', tat_s, tat_ns),
  'PXAT', tat_s * 1000 + math.ceil(tat_ns / 1e6))
return {1, next_s, next_ns, now_s, now_us}
`

// script is gcraScript with its SHA-1, computed once.
var script = redis.NewScript(gcraScript)

// reply is what the script returned.
type reply struct {
	allowed bool
	ahead   int64 // TAT after the decision minus now, in nanoseconds
	now     int64 // the server's clock, in nanoseconds since the Unix epoch
}

// errReply reports a reply of the wrong shape, from a server that ran
// something else under the script's SHA-1, say.
var errReply = errors.New("unexpected reply to the GCRA script")

// eval runs the script by its SHA-1, and by its source if the server does
// not have it (after a restart, a failover or SCRIPT FLUSH), which also
// loads it for the next calls. A NOSCRIPT reply means the script did not
// run, so nothing is charged twice.
func eval(ctx context.Context, c redis.Scripter, keys []string, args []any) (reply, error) {
	cmd := c.EvalSha(ctx, script.Hash(), keys, args...)
	if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		cmd = c.Eval(ctx, gcraScript, keys, args...)
	}
	vals, err := cmd.Slice()
	if err != nil {
		return reply{}, err
	}
	if len(vals) != 5 {
		return reply{}, fmt.Errorf("%w: %d values", errReply, len(vals))
	}
	var n [5]int64
	for i, v := range vals {
		x, ok := v.(int64)
		if !ok {
			return reply{}, fmt.Errorf("%w: %T", errReply, v)
		}
		n[i] = x
	}
	return reply{
		allowed: n[0] == 1,
		ahead:   n[1]*1e9 + n[2],
		now:     n[3]*1e9 + n[4]*1e3,
	}, nil
}

// splitNanos returns x nanoseconds as the script's arguments: whole seconds
// and the nanoseconds left over, x >= 0.
func splitNanos(x int64) (any, any) {
	return strconv.FormatInt(x/1e9, 10), strconv.FormatInt(x%1e9, 10)
}
