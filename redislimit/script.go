package redislimit

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/limitsgo/limits/internal/gcra"
	"github.com/redis/go-redis/v9"
)

// scriptLib is the part the refund and lease scripts share (the decision
// script, gcraScript, has it inline): exact time arithmetic in
// Lua, whose numbers are doubles, and the stored form of a TAT.
//
// A time is a table {s, ns, f}: s whole seconds, ns nanoseconds in [0, 1e9)
// and f units in [0, den), a nanosecond being den units (den = ARGV[1], at
// most 2^32). A time in nanoseconds since the Unix epoch (about 1.8e18) is
// beyond the 2^53 up to which doubles hold integers exactly, but each part
// of such a triple is not: seconds since 1970 plus at most twice burst*T
// (itself at most about 73 years) stay below about 1e10, nanoseconds below
// 2e9 and units below 2^33 in any sum, so every sum, difference and
// comparison is exact. Nothing is divided and nothing multiplied but the
// seconds of an expiry, into milliseconds, exactly too.
//
// A key's value is its TAT in whole nanoseconds since the Unix epoch, in
// decimal, followed when the TAT has a fraction of a nanosecond by a colon
// and the fraction in units, in decimal: "1767225600000000000" or
// "1767226114285714285:5" with a den of 7. parse reads it back, or returns
// nil for a value of another form. A fraction not below den (written by a
// limiter with another limit) counts as a whole nanosecond: the TAT is
// rounded up, never down.
const scriptLib = `
local den = tonumber(ARGV[1])
local function add(a, b)
  local s, ns, f = a[1] + b[1], a[2] + b[2], a[3] + b[3]
  if f >= den then ns, f = ns + 1, f - den end
  if ns >= 1e9 then s, ns = s + 1, ns - 1e9 end
  return {s, ns, f}
end
local function sub(a, b)
  local s, ns, f = a[1] - b[1], a[2] - b[2], a[3] - b[3]
  if f < 0 then ns, f = ns - 1, f + den end
  if ns < 0 then s, ns = s - 1, ns + 1e9 end
  return {s, ns, f}
end
local function less(a, b)
  if a[1] ~= b[1] then return a[1] < b[1] end
  if a[2] ~= b[2] then return a[2] < b[2] end
  return a[3] < b[3]
end
local function arg(i)
  return {tonumber(ARGV[i]), tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])}
end
local zero = {0, 0, 0}
local clock = redis.call('TIME')
local now_s, now_us = tonumber(clock[1]), tonumber(clock[2])
local now = {now_s, now_us * 1000, 0}
local function parse(v)
  local whole, frac = string.match(v, '^(%d+):(%d+)$')
  if not whole then whole = string.match(v, '^(%d+)$') end
  if not whole then return nil end
  local t = {0, tonumber(whole), 0}
  if #whole > 9 then t = {tonumber(string.sub(whole, 1, -10)), tonumber(string.sub(whole, -9)), 0} end
  if frac then
    local f = tonumber(frac)
    if f < den then t[3] = f else t = add(t, {0, 1, 0}) end
  end
  return t
end
local function load()
  local v = redis.pcall('GET', KEYS[1])
  if type(v) == 'table' then
    return nil, redis.error_reply('redislimit: key ' .. KEYS[1] .. ' does not hold a TAT: ' .. tostring(v.err))
  end
  if not v then return nil end
  local t = parse(v)
  if not t then
    return nil, redis.error_reply('redislimit: key ' .. KEYS[1] .. ' does not hold a TAT')
  end
  return t
end
local function store(t)
  local v = string.format('%d%09d', t[1], t[2])
  if t[3] > 0 then v = v .. ':' .. string.format('%d', t[3]) end
  local up = t[2]
  if t[3] > 0 then up = up + 1 end
  redis.call('SET', KEYS[1], v, 'PXAT', t[1] * 1000 + math.ceil(up / 1e6))
end
local function reply(flag, t)
  return {flag, t[1], t[2], t[3], now_s, now_us}
end
`

// gcraScript makes one decision for the key KEYS[1], on the clock of the
// Redis server that holds it.
//
// Arguments: ARGV[1] is "1" to charge an allowed request and "0" to look
// only; ARGV[2] and ARGV[3] the cost of the request, n*T, in seconds and
// nanoseconds; ARGV[4] and ARGV[5] D = burst*T; ARGV[6] den, and ARGV[7]
// and ARGV[8] the units of n*T and D, all three left out when den is 1 (T
// a whole number of nanoseconds), which the script then takes them to be,
// with no units: the same arithmetic on fewer arguments. ARGV[9] to
// ARGV[11], the lead L in seconds, nanoseconds and units, are given, after
// all eight, only while keys charged under an earlier limit of a larger
// burst may run further ahead than D (see GCRA.SetLimit); L is D when
// they are left out.
//
// With ahead = TAT - now, taken as 0 when the TAT has passed (the key owes
// nothing) and as L when it runs further ahead than L, the request is
// allowed if and only if ahead + n*T <= D, the local GCRA's inequality moved
// by now; when allowed and charged, TAT becomes now + ahead + n*T. A key
// whose ahead lies between D and L is refused any positive cost (a cost
// of 0 is always allowed) and keeps its TAT: as gcra.Policy.Judge with
// its Lead at L. The key then expires at the TAT rounded up to a millisecond (SET with PXAT, Redis
// 6.2 or later): its time to live is the time until the key is back to its
// full burst, and it never expires while it carries debt. An absolute
// expiry is used because a relative one (PX) counts from Redis's own
// millisecond clock, which may lag the microseconds of TIME.
//
// A TAT further ahead than L cannot have been written by this limiter,
// whose TATs never run more than L ahead of the time they were written at:
// it comes from another writer or from a clock that went back. The script
// stores now + L in its place, so that the key recovers as a key that has
// just used its full burst does. Otherwise a refusal or a look writes
// nothing.
//
// It returns four integers, each exact in a double: ahead after the
// decision, its nanoseconds times 2, plus 1 if allowed; its seconds; its
// units; and now, as TIME gave it, in microseconds since the Unix epoch
// (below 2^53 until the year 2255).
//
// It runs on every decision, so it does the arithmetic of scriptLib and
// reads and stores the key's value as scriptLib does, but inline, on plain
// numbers: a time is three locals (seconds, nanoseconds, units), not a
// table, and no function is defined, so that a call allocates nothing in
// Lua beyond the strings and the reply it must make. The exactness argument
// of scriptLib holds as it stands. TestDecideScript checks it against
// gcra.Policy on random states, fractions and foreign values included.
//
// Writing after TIME needs effects replication, the default since Redis 5.0
// and the only mode since 7.0.
const gcraScript = `
local den, cf, df = 1, 0, 0
if ARGV[6] then den, cf, df = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8]) end
local ds, dns = tonumber(ARGV[4]), tonumber(ARGV[5])
local ls, lns, lf = ds, dns, df
if ARGV[9] then ls, lns, lf = tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11]) end
local clock = redis.call('TIME')
local now_s, now_us = tonumber(clock[1]), tonumber(clock[2])
local now_ns = now_us * 1000
local v = redis.pcall('GET', KEYS[1])
local as, ans, af, repair = 0, 0, 0, false
if v then
  if type(v) == 'table' then
    return redis.error_reply('redislimit: key ' .. KEYS[1] .. ' does not hold a TAT: ' .. tostring(v.err))
  end
  local whole, frac = v, nil
  if not string.find(v, '^%d+$') then
    whole, frac = string.match(v, '^(%d+):(%d+)$')
    if not whole then
      return redis.error_reply('redislimit: key ' .. KEYS[1] .. ' does not hold a TAT')
    end
  end
  local ts, tns, tf = 0, 0, 0
  if #whole > 9 then
    ts, tns = tonumber(string.sub(whole, 1, -10)), tonumber(string.sub(whole, -9))
  else
    tns = tonumber(whole)
  end
  if frac then
    tf = tonumber(frac)
    if tf >= den then
      tf, tns = 0, tns + 1
      if tns >= 1e9 then ts, tns = ts + 1, tns - 1e9 end
    end
  end
  as, ans, af = ts - now_s, tns - now_ns, tf
  if ans < 0 then as, ans = as - 1, ans + 1e9 end
  if as < 0 or as == 0 and ans == 0 and af == 0 then
    as, ans, af = 0, 0, 0
  elseif as > ls or as == ls and (ans > lns or ans == lns and af > lf) then
    as, ans, af, repair = ls, lns, lf, true
  end
end
local xs, xns, xf = as + tonumber(ARGV[2]), ans + tonumber(ARGV[3]), af + cf
if xf >= den then xns, xf = xns + 1, xf - den end
if xns >= 1e9 then xs, xns = xs + 1, xns - 1e9 end
local flag = 1
if (xs > as or xns > ans or xf > af) and (xs > ds or xs == ds and (xns > dns or xns == dns and xf > df)) then flag = 0 end
local now = now_s * 1e6 + now_us
if flag == 0 or ARGV[1] ~= '1' then
  if not repair then return {ans * 2 + flag, as, af, now} end
  xs, xns, xf = as, ans, af
end
local s, ns = now_s + xs, now_ns + xns
if ns >= 1e9 then s, ns = s + 1, ns - 1e9 end
local val, up = string.format('%d%09d', s, ns), ns
if xf > 0 then val, up = val .. ':' .. string.format('%d', xf), ns + 1 end
redis.call('SET', KEYS[1], val, 'PXAT', s * 1000 + math.ceil(up / 1e6))
return {xns * 2 + flag, xs, xf, now}
`

// refundScript gives back a charge for the key KEYS[1], as
// gcra.Policy.Refund does for a charge known to the nanosecond above.
//
// Arguments: ARGV[1] is den; ARGV[2] and ARGV[3] the key's TAT just after
// the charge, rounded up to the nanosecond (the Decision's At + ResetAfter),
// in seconds and nanoseconds since the Unix epoch; ARGV[4] to ARGV[6] the
// charge n*T; ARGV[7] to ARGV[9] L, as gcraScript takes it (D, or the lead
// after a change of limit); ARGV[10] and ARGV[11] the latest time,
// on the server's clock, in seconds and microseconds, at which the caller
// still waits for the reply, or "" and "" if it is not known.
//
// A script that runs after that deadline (sent before the caller gave up,
// and run late, by a server that was stalled) does nothing: its caller has
// reported that nothing was given back.
//
// The exact TAT after the charge lies in (charged - 1ns, charged] when den
// is above 1, and is charged otherwise. The script takes off the part of
// the charge still ahead of now, counted from the low end, at most n*T, and
// never takes the TAT below now, so that refunds are exact in any order,
// as gcra.Policy.Refund says. An absent
// key is left absent. A TAT further ahead than L is first taken as now + L,
// as in gcraScript. The key is stored again with its new expiry, or deleted
// if it owes nothing.
//
// It returns six integers, as gcraScript does: 1 if the key was written or
// deleted, 0 if left as it was, 2 if the deadline had passed; how far its
// TAT runs ahead of now after (0 if it owes nothing, or the deadline had
// passed); and now.
const refundScript = scriptLib + `
if ARGV[10] ~= '' then
  local ds, dus = tonumber(ARGV[10]), tonumber(ARGV[11])
  if now_s > ds or (now_s == ds and now_us > dus) then return reply(2, zero) end
end
local t, err = load()
if err then return err end
if not t then return reply(0, zero) end
local cost, d = arg(4), arg(7)
local changed = false
if less(add(now, d), t) then t, changed = add(now, d), true end
local charged = {tonumber(ARGV[2]), tonumber(ARGV[3]), 0}
local low = charged
if den > 1 then low = sub(charged, {0, 1, 0}) end
local left = sub(low, now)
if less(zero, left) then
  if less(cost, left) then left = cost end
  local nxt = sub(t, left)
  if less(nxt, now) then nxt = now end
  if less(nxt, t) then t, changed = nxt, true end
end
if not changed then
  if less(now, t) then return reply(0, sub(t, now)) end
  return reply(0, zero)
end
if less(now, t) then
  store(t)
  return reply(1, sub(t, now))
end
redis.call('DEL', KEYS[1])
return reply(1, zero)
`

// Scripts with their SHA-1, computed once.
var (
	decideScript = redis.NewScript(gcraScript)
	returnScript = redis.NewScript(refundScript)
)

// reply is what a script returned.
type reply struct {
	flag  int64     // 1 if allowed, or for a refund, 1 if written, 2 if too late
	ahead gcra.Time // the key's TAT minus now, after the script
	now   time.Time // the server's clock, TIME
}

// errReply reports a reply of the wrong shape, from a server that ran
// something else under a script's SHA-1, say.
var errReply = errors.New("unexpected reply to the GCRA script")

// eval runs s by its SHA-1, and by its source if the server does not have
// it (after a restart, a failover or SCRIPT FLUSH), which also loads it for
// the next calls (redis.Script.Run). A NOSCRIPT reply means the script did
// not run, so nothing is charged twice.
func eval(ctx context.Context, c redis.Scripter, s *redis.Script, keys []string, args []any) (reply, error) {
	vals, err := s.Run(ctx, c, keys, args...).Slice()
	if err != nil {
		return reply{}, err
	}
	if s == decideScript {
		return decideReply(vals)
	}
	if len(vals) != 6 {
		return reply{}, fmt.Errorf("%w: %d values", errReply, len(vals))
	}
	var n [6]int64
	for i, v := range vals {
		x, ok := v.(int64)
		if !ok {
			return reply{}, fmt.Errorf("%w: %T", errReply, v)
		}
		n[i] = x
	}
	return reply{
		flag:  n[0],
		ahead: gcra.Time{NS: n[1]*1e9 + n[2], Frac: uint64(n[3])},
		now:   time.Unix(n[4], n[5]*1e3),
	}, nil
}

// decideReply reads the four integers gcraScript returns.
func decideReply(vals []any) (reply, error) {
	n, err := naturals(vals)
	if err != nil {
		return reply{}, err
	}
	return reply{
		flag:  n[0] & 1,
		ahead: gcra.Time{NS: n[1]*1e9 + n[0]>>1, Frac: uint64(n[2])},
		now:   time.Unix(n[3]/1e6, n[3]%1e6*1e3),
	}, nil
}

// timeArgs appends t, a time of at most gcra.MaxSpan, as a script's
// arguments: whole seconds, nanoseconds left over and units.
func timeArgs(args []any, t gcra.Time) []any {
	return append(args, strconv.FormatInt(t.NS/1e9, 10), strconv.FormatInt(t.NS%1e9, 10), strconv.FormatUint(t.Frac, 10))
}

// leaseLua leases up to want of the next emission slots of the key KEYS[1]:
// as many as the key could admit at once, k with ahead + k*T <= D, at most
// want, charged as k unit requests arriving together would be: TAT becomes
// now + ahead + k*T, with ahead as in gcraScript (0 for a key that owes
// nothing, L for one further ahead, which is repaired; a key whose ahead
// lies between D and L has no room and keeps its TAT), but no less than
// skip: the slots of a key whose TAT runs less than skip ahead of now
// start at now + skip, so that they have not passed by the time the reply
// reaches the process (skip is its round trip), and the time between is
// charged too, as if spent, at a key with more than skip of room to spare.
//
// Arguments: ARGV[1] is den; ARGV[2] to ARGV[4] T; ARGV[5] to ARGV[7] D;
// ARGV[8] want, 1 to MaxLeaseSlots; ARGV[9] to ARGV[11] skip, less than
// D - T; ARGV[12] to ARGV[14] the lead L, as gcraScript takes it, or left
// out for L = D.
//
// k*T is computed exactly: k is at most 2^16, so k times the units of T
// (below 2^32) stays below 2^48, and k times its nanoseconds below 2^46.
// floor((D - ahead)/T) is first estimated in doubles, then corrected with
// exact comparisons.
//
// It returns six integers, as gcraScript does: k (0 if the key had no
// room), ahead before the lease, in seconds, nanoseconds and units, and now.
const leaseLua = scriptLib + `
local t_, d, skip = arg(2), arg(5), arg(9)
local lead = d
if ARGV[12] then lead = arg(12) end
local want = tonumber(ARGV[8])
local t, err = load()
if err then return err end
local ahead, repair = zero, false
if t then
  ahead = sub(t, now)
  if not less(zero, ahead) then
    ahead = zero
  elseif less(lead, ahead) then
    ahead, repair = lead, true
  end
end
if less(ahead, skip) then ahead, repair = skip, false end
local function mul(k)
  local f = k * t_[3]
  local q = math.floor(f / den)
  local r = f - q * den
  if r < 0 then q, r = q - 1, r + den elseif r >= den then q, r = q + 1, r - den end
  local ns = k * t_[2] + q
  local s = math.floor(ns / 1e9)
  ns = ns - s * 1e9
  if ns < 0 then s, ns = s - 1, ns + 1e9 elseif ns >= 1e9 then s, ns = s + 1, ns - 1e9 end
  return {k * t_[1] + s, ns, r}
end
local room = sub(d, ahead)
local k = math.floor((room[1] * 1e9 + room[2] + room[3] / den) / (t_[1] * 1e9 + t_[2] + t_[3] / den))
if k > want then k = want end
if k < 0 then k = 0 end
while k > 0 and less(room, mul(k)) do k = k - 1 end
if k < want and not less(room, mul(k + 1)) then k = k + 1 end
if k == 0 then
  if repair then store(add(now, ahead)) end
  return reply(0, ahead)
end
store(add(add(now, ahead), mul(k)))
return reply(k, ahead)
`

// giveBackLua takes n*T off the TAT of the key KEYS[1] if, and only if,
// the TAT is top: nothing was charged for the key after the charge or the
// lease that left it at top, so that taking it off is as if that charge
// had never been made, with no slot leased since given out twice.
//
// Arguments: ARGV[1] is den; ARGV[2] to ARGV[4] top, since the Unix epoch;
// ARGV[5] to ARGV[7] n*T; ARGV[8] "1" if top is only known to the
// nanosecond above (the TAT then matches when in (top - 1ns, top]), "0"
// if exactly.
//
// It returns six integers, as gcraScript does: 1 if it took the charge
// off (storing the key again, or deleting it if it then owes nothing), 0
// if not; three zeros; and now.
const giveBackLua = scriptLib + `
local top, cost = arg(2), arg(5)
local t, err = load()
if err then return err end
if not t then return reply(0, zero) end
local match = not less(top, t)
if ARGV[8] == '1' then
  match = match and less(sub(top, {0, 1, 0}), t)
else
  match = match and not less(t, top)
end
if not match then return reply(0, zero) end
local nxt = sub(t, cost)
if less(now, nxt) then
  store(nxt)
  return reply(1, zero)
end
redis.call('DEL', KEYS[1])
return reply(1, zero)
`

// The lease mode's scripts, with their SHA-1.
var (
	leaseScript    = redis.NewScript(leaseLua)
	giveBackScript = redis.NewScript(giveBackLua)
)

// naturals returns the four integers, none negative, of a script's reply.
func naturals(vals []any) ([4]int64, error) {
	var n [4]int64
	if len(vals) != len(n) {
		return n, fmt.Errorf("%w: %d values", errReply, len(vals))
	}
	for i, v := range vals {
		x, ok := v.(int64)
		if !ok || x < 0 {
			return n, fmt.Errorf("%w: %v", errReply, v)
		}
		n[i] = x
	}
	return n, nil
}
