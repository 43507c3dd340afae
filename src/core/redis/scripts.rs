//! The Lua scripts every lock operation runs (one `EVAL` per node and
//! operation, so each step is atomic on its node), and the parsing of their
//! replies.
//!
//! Keys: `KEYS[1]` is the lock key, `KEYS[2]` the companion fencing counter
//! (see [`super::keys`]). Every script returns an integer or a flat array of
//! integers: the only reply shape both HTTP protocols carry exactly (webdis
//! drops non-UTF-8 strings and nested arrays).
//!
//! The fencing counter is only ever raised: `extend` and `release` carry the
//! holder's fencing token and set the counter to at least that value, even
//! when the lock is no longer theirs (raising is always safe, and it repairs
//! a node that lost its counter in a restart, or lags behind the others).

use super::value::{RedisCommand, RedisValue};

/// `SET key token NX PX ttl` and the fencing counter, atomically:
/// `{1, counter, 0}` when set, otherwise `{0, counter, wait}`, `wait` the
/// holder's PTTL (or, while readers hold, the end of the last reader's
/// lease: the lock frees itself then at the latest).
///
/// With `ARGV[3] == "1"` (Redlock) the counter is `INCR`ed on every attempt,
/// granted or not, so that a later attempt reaching this node always sees a
/// larger value (the cross-node argument in [`super::redlock`] needs it).
/// Otherwise (one node) it moves only on a grant, so tokens count holders
/// and a refused attempt changes nothing.
///
/// The writer side of the read-write lock (see [`super::rwlock`]): `KEYS[3]`
/// the readers (expired ones are dropped first, by the server's `TIME`),
/// `KEYS[4]` the writer intent. The lock is refused while any reader
/// remains; a refused attempt with `ARGV[4]` ms > 0 (a writer that will
/// wait, never a try) sets the intent for that long, so that new readers
/// queue behind it; a grant deletes the intent (the lock key now keeps
/// readers out; other waiting writers set it again at their next attempt).
pub const ACQUIRE: &str = "-- edgelock acquire v3
local every = ARGV[3] == '1'
local f
if every then f = redis.call('INCR', KEYS[2]) end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
local last = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')
if not last[2] and redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if not every then f = redis.call('INCR', KEYS[2]) end
  redis.call('DEL', KEYS[4])
  return {1, f, 0}
end
if not every then f = tonumber(redis.call('GET', KEYS[2]) or '0') or 0 end
if tonumber(ARGV[4]) > 0 then redis.call('SET', KEYS[4], '1', 'PX', ARGV[4]) end
local wait = redis.call('PTTL', KEYS[1])
if wait == -2 and last[2] then wait = math.max(0, tonumber(last[2]) - now) end
return {0, f, wait}";

/// The keys [`ACQUIRE_SET`] names for each name of the set, in order.
pub const SET_KEYS_PER_NAME: usize = 10;

/// An `AcquireAll` of free names in one script (one node whose host lets a
/// script touch keys of several hash slots: see `core::multi`). For each
/// name `i` the keys `KEYS[10i+1..10i+10]`: the lock key, its fencing
/// counter, the readers, the writer intent, the waiters' queue and leases,
/// the semaphore's limit record, its waiters' queue and leases, the set of
/// reentrant holds. `ARGV[1]` is the TTL, `ARGV[1+i]` name `i`'s owner token.
///
/// A name is free iff none of its keys exists except the counter (expired
/// readers are dropped first, by the server's `TIME`, as [`ACQUIRE`] does),
/// and, where a limit record exists, none of its permit slots
/// `<lock key>:permit:<k>`, `k < limit` (computed in the script: the host
/// must not check declared keys). The leader record is not checked: it
/// lingers after its lock and counts only while the lock key exists.
///
/// Every name free: each lock key is `SET` to its token with `PX ttl` and
/// its counter `INCR`ed, exactly as [`ACQUIRE`] grants one name; returns
/// `{1, counter of name 1, ..., counter of name n}`. Otherwise nothing is
/// written (but expired readers) and it returns `{0}`.
pub const ACQUIRE_SET: &str = "-- edgelock acquire set v1
local n = #ARGV - 1
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for i = 0, n - 1 do
  local k = i * 10
  redis.call('ZREMRANGEBYSCORE', KEYS[k + 3], '-inf', now)
  for j = 1, 10 do
    if j ~= 2 and redis.call('EXISTS', KEYS[k + j]) == 1 then
      if j ~= 7 then return {0} end
      local limit = tonumber(redis.call('GET', KEYS[k + 7]) or '0') or 0
      for s = 0, limit - 1 do
        if redis.call('EXISTS', KEYS[k + 1] .. ':permit:' .. s) == 1 then return {0} end
      end
    end
  end
end
local r = {1}
for i = 0, n - 1 do
  local k = i * 10
  redis.call('SET', KEYS[k + 1], ARGV[i + 2], 'PX', ARGV[1])
  r[i + 2] = redis.call('INCR', KEYS[k + 2])
end
return r";

/// Raise the counter to `ARGV[3]`; if the key holds our token, `PEXPIRE` it
/// to `ARGV[2]` ms. Returns `{1, counter}` when it was ours, else
/// `{0, counter}`, the counter as it is after the raise: a Redlock raise
/// round learns from it that a node's counter is above the token it is
/// about to hand out (that node's attempt answer was lost).
///
/// v3: the lock's hold count `KEYS[3]` ([`REENTER`]), if any, is renewed
/// with it, so that the count lives exactly as long as the lock.
///
/// v4: `ARGV[4]` names the renewing hold ([`OUTER_HOLD`] for the hold an
/// acquire granted). The key counts as ours only where this node knows
/// that hold: in the owner's set of holds, or, without one, for the outer
/// hold only. On Redlock a node that missed a re-entry must not vouch for
/// that hold's lifetime: it may drop its key at another hold's release
/// (see `tasks/reenter.rs`). One node always knows its holds.
pub const EXTEND: &str = "-- edgelock extend v4
local f = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
if f < tonumber(ARGV[3]) then
  f = tonumber(ARGV[3])
  redis.call('SET', KEYS[2], ARGV[3])
end
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {0, f} end
if redis.call('SISMEMBER', KEYS[3], '=' .. ARGV[1]) == 1 then
  if redis.call('SISMEMBER', KEYS[3], ARGV[4]) == 0 then return {0, f} end
elseif ARGV[4] ~= '+' then
  return {0, f}
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('PEXPIRE', KEYS[3], ARGV[2])
return {1, f}";

/// Raise the counter to `ARGV[2]`; delete the key only if it holds our token
/// (1 if deleted, else 0). Never a blind `DEL`. A delete publishes
/// `released:<ARGV[2]>` on the wake-up channel `ARGV[3]` (see
/// [`super::subscription`]) so that waiters attempt at once; nothing is
/// published when the key was not ours (it expired: waiters' timers cover it),
/// nor by the cleanup of a failed attempt (`ARGV[2]` = 0: such a key was
/// never handed out, and waking every waiter after each split Redlock vote
/// made them all attempt, split again and clean up again — a storm the
/// simulation measured at 89 % of all messages).
/// When the waiters' queue (`KEYS[3]`, leases in `KEYS[4]`, see
/// [`ACQUIRE_QUEUED`]) has a live head, the payload names it,
/// `released:<fence>:<waiter>`, and only that waiter attempts; a dead head
/// (lease over) is not named, so every waiter attempts and the queued
/// acquire script drops it.
///
/// Reentrant holds (v4): `KEYS[5]` is the lock's set of holds
/// ([`REENTER`]) and `ARGV[4]` the releasing hold's member (`+` for the
/// outer hold). While holds of this owner remain after removing it, the
/// release returns 2 (the key stays, nobody is woken); otherwise the set
/// goes with the key. A stale set (another owner's) is deleted.
///
/// v5: a hold this node does not know (not in the owner's set, or any
/// re-entered hold where the node has no set of the owner: it missed that
/// re-entry on Redlock, or the release is a retry) changes nothing and
/// returns 0. Only the release of a hold it counted can free a node's key,
/// so every node that counted a hold keeps its key while that hold lives
/// (see `tasks/reenter.rs`).
pub const RELEASE: &str = "-- edgelock release v5
local f = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
if f < tonumber(ARGV[2]) then redis.call('SET', KEYS[2], ARGV[2]) end
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if redis.call('SISMEMBER', KEYS[5], '=' .. ARGV[1]) == 1 then
  if redis.call('SREM', KEYS[5], ARGV[4]) == 0 then return 0 end
  if redis.call('SCARD', KEYS[5]) > 1 then return 2 end
elseif ARGV[4] ~= '+' then
  return 0
end
redis.call('DEL', KEYS[5])
redis.call('DEL', KEYS[1])
if ARGV[2] == '0' then return 1 end
local msg = 'released:' .. ARGV[2]
local head = redis.call('LINDEX', KEYS[3], 0)
if head then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  if tonumber(redis.call('ZSCORE', KEYS[4], head) or '0') > now then msg = msg .. ':' .. head end
end
redis.call('PUBLISH', ARGV[3], msg)
return 1";

/// Re-enter the exclusive lock `KEYS[1]` held by owner `ARGV[1]`: one more
/// hold, named `ARGV[2]` (random per re-entry), in the lock's set of holds
/// `KEYS[2]` (`keys::holds_key`): the marker `=<owner>`, `+` for the outer
/// hold and one member per re-entered hold; it expires with the lock
/// ([`EXTEND`] renews both). A set without our owner's marker is stale (an
/// earlier owner's) and replaced. Members, not a number, make every change
/// idempotent: a re-entry or a release retried after an unknown outcome
/// adds or removes its own member again, never a second one.
/// `{1, holds, pttl}`, or `{0, 0, 0}` when the owner does not hold the lock
/// (nothing written).
pub const REENTER: &str = "-- edgelock reenter v1
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {0, 0, 0} end
if redis.call('SISMEMBER', KEYS[2], '=' .. ARGV[1]) == 0 then
  redis.call('DEL', KEYS[2])
  redis.call('SADD', KEYS[2], '=' .. ARGV[1], '+')
end
redis.call('SADD', KEYS[2], ARGV[2])
local ttl = redis.call('PTTL', KEYS[1])
redis.call('PEXPIRE', KEYS[2], math.max(1, ttl))
return {1, redis.call('SCARD', KEYS[2]) - 1, ttl}";

/// The queued acquire (one node): a FIFO queue of waiter ids (`KEYS[3]`, a
/// list) with a lease each (`KEYS[4]`, a sorted set scored by the server's
/// `TIME` in ms, never a client clock). Dead heads (lease over) are dropped
/// first. Then the lock is taken (`SET NX PX`): with `ARGV[5] == '1'` (the
/// fair lock) only if the queue is empty or its head is this waiter
/// (`ARGV[3]`); otherwise (a waiter of the default lock) whenever it is
/// free, so the queue decides only whom a release wakes ([`RELEASE`] names
/// the live head), not who may take it. A granted waiter leaves the queue:
/// `{1, counter, 0}`, the counter moving on grants only. Otherwise, with a
/// lease (`ARGV[4]` ms > 0; 0 for a try, which never queues), the waiter
/// joins the tail (keeping its place if it is already queued) and its lease
/// is renewed: `{0, counter, wait}`, `wait` the holder's PTTL, or while the
/// lock is free but another waiter heads a fair queue, that head's
/// remaining lease.
///
/// The read-write lock's writer side, as in [`ACQUIRE`]: `KEYS[5]` the
/// readers (the lock is refused while one remains; `wait` is then the end
/// of the last reader's lease), `KEYS[6]` the writer intent, set for
/// `ARGV[6]` ms by a refused attempt (0: not set) and deleted by a grant.
pub const ACQUIRE_QUEUED: &str = "-- edgelock queued acquire v3
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local head = redis.call('LINDEX', KEYS[3], 0)
while head do
  if tonumber(redis.call('ZSCORE', KEYS[4], head) or '0') > now then break end
  redis.call('LPOP', KEYS[3])
  redis.call('ZREM', KEYS[4], head)
  head = redis.call('LINDEX', KEYS[3], 0)
end
redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', now)
local last = redis.call('ZRANGE', KEYS[5], -1, -1, 'WITHSCORES')
if not last[2] and (ARGV[5] ~= '1' or not head or head == ARGV[3]) and redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if redis.call('ZREM', KEYS[4], ARGV[3]) == 1 then redis.call('LREM', KEYS[3], 1, ARGV[3]) end
  redis.call('DEL', KEYS[6])
  return {1, redis.call('INCR', KEYS[2]), 0}
end
local f = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
local lease = tonumber(ARGV[4])
if lease > 0 then
  if not redis.call('ZSCORE', KEYS[4], ARGV[3]) then redis.call('RPUSH', KEYS[3], ARGV[3]) end
  redis.call('ZADD', KEYS[4], now + lease, ARGV[3])
  redis.call('PEXPIRE', KEYS[3], lease)
  redis.call('PEXPIRE', KEYS[4], lease)
  head = redis.call('LINDEX', KEYS[3], 0)
end
if tonumber(ARGV[6]) > 0 then redis.call('SET', KEYS[6], '1', 'PX', ARGV[6]) end
local wait = redis.call('PTTL', KEYS[1])
if wait == -2 and last[2] then wait = math.max(0, tonumber(last[2]) - now) end
if wait == -2 and head and head ~= ARGV[3] then
  wait = math.max(0, tonumber(redis.call('ZSCORE', KEYS[4], head) or '0') - now)
end
return {0, f, wait}";

/// A queued waiter gives up: it leaves the queue (`ARGV[1]` its id) and, if
/// the lock is free, wakes the new head (`ARGV[2]` the wake-up channel).
/// It also deletes the writer intent (`KEYS[5]`, see [`ACQUIRE`]), so that
/// readers held back by a writer that gave up are not kept waiting for the
/// intent to expire: when the queue is then empty and the lock free, the
/// readers are woken (`released:<counter>`, naming nobody). Another waiting
/// writer sets the intent again with its next attempt (the new head is
/// woken at once).
pub const LEAVE: &str = "-- edgelock leave v2
redis.call('LREM', KEYS[3], 0, ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
local intent = redis.call('DEL', KEYS[5])
if redis.call('EXISTS', KEYS[1]) == 0 then
  local f = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
  local head = redis.call('LINDEX', KEYS[3], 0)
  if head then
    redis.call('PUBLISH', ARGV[2], 'released:' .. f .. ':' .. head)
  elseif intent == 1 then
    redis.call('PUBLISH', ARGV[2], 'released:' .. f)
  end
end
return 1";

/// `{exists, is-ours (ARGV[1]), pttl, counter}`; pttl is -2 when absent.
pub const STATUS: &str = "-- edgelock status v1
local f = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
local v = redis.call('GET', KEYS[1])
if not v then return {0, 0, -2, f} end
local mine = 0
if v == ARGV[1] then mine = 1 end
return {1, mine, redis.call('PTTL', KEYS[1]), f}";

/// A permit of a semaphore (see [`super::semaphore`]), atomically.
///
/// `KEYS[1]` the fencing counter, `KEYS[2]` the limit record, `KEYS[3]` /
/// `KEYS[4]` the semaphore's waiters' queue and leases, `KEYS[5..]` the
/// slot keys `0..d` (`d` ≥ the limit asked for: every slot the script may
/// read is declared). `ARGV`: token, ttl ms, limit, preferred slot (`-1`:
/// the lowest free one), `1` to count every attempt (Redlock, as
/// [`ACQUIRE`]), the waiter's id (`-` for none: Redlock, or one node's
/// first attempt) and its queue lease in ms (0: do not queue).
///
/// The limit record is checked first and nothing is touched on a refusal:
/// a stored limit other than the one asked for is replaced only while every
/// slot of the stored limit is free (`{2, 0, 0, -1, stored, 0}` otherwise:
/// the caller asked for a different limit than the holders'), and when the
/// stored limit has more slots than were declared the script cannot look
/// at them: `{3, 0, 0, -1, stored, 0}` asks for a new attempt declaring
/// them. Then the free slots are read (PTTL, the server's own clock) and
/// one is taken with `SET PX`: `{1, counter, 0, slot, lo, hi}`, or, with
/// none free (or the preferred one held), `{0, counter, wait, -1, lo,
/// hi}`, `wait` 0 when another slot is free, else the smallest PTTL of the
/// held slots (the earliest one frees itself). `lo` / `hi` are the other
/// free slots as a bit mask (slots 0..49 and 50..99: exact in a Lua
/// double), so that a Redlock retry can choose a slot free on a quorum.
/// The waiters' queue is that of [`ACQUIRE_QUEUED`] (never fair: the queue
/// decides whom a release wakes, not who may take a slot).
pub const ACQUIRE_PERMIT: &str = "-- edgelock acquire permit v1
local limit = tonumber(ARGV[3])
local stored = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
if stored ~= limit then
  if stored > #KEYS - 4 then return {3, 0, 0, -1, stored, 0} end
  for i = 1, stored do
    if redis.call('EXISTS', KEYS[4 + i]) == 1 then return {2, 0, 0, -1, stored, 0} end
  end
  redis.call('SET', KEYS[2], ARGV[3])
end
local every = ARGV[5] == '1'
local f
if every then f = redis.call('INCR', KEYS[1]) end
local waiter = ARGV[6] ~= '-'
local now = 0
if waiter then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local head = redis.call('LINDEX', KEYS[3], 0)
  while head do
    if tonumber(redis.call('ZSCORE', KEYS[4], head) or '0') > now then break end
    redis.call('LPOP', KEYS[3])
    redis.call('ZREM', KEYS[4], head)
    head = redis.call('LINDEX', KEYS[3], 0)
  end
end
local pref = tonumber(ARGV[4])
local slot, lo, hi, wait = -1, 0, 0, -1
for i = 0, limit - 1 do
  local p = redis.call('PTTL', KEYS[5 + i])
  if p == -2 then
    if slot < 0 and (pref < 0 or pref == i) then slot = i
    elseif i < 50 then lo = lo + 2 ^ i
    else hi = hi + 2 ^ (i - 50) end
  elseif p >= 0 and (wait < 0 or p < wait) then wait = p end
end
if slot >= 0 then
  redis.call('SET', KEYS[5 + slot], ARGV[1], 'PX', ARGV[2])
  if not every then f = redis.call('INCR', KEYS[1]) end
  if waiter and redis.call('ZREM', KEYS[4], ARGV[6]) == 1 then redis.call('LREM', KEYS[3], 1, ARGV[6]) end
  return {1, f, 0, slot, lo, hi}
end
if not every then f = tonumber(redis.call('GET', KEYS[1]) or '0') or 0 end
local lease = tonumber(ARGV[7])
if waiter and lease > 0 then
  if not redis.call('ZSCORE', KEYS[4], ARGV[6]) then redis.call('RPUSH', KEYS[3], ARGV[6]) end
  redis.call('ZADD', KEYS[4], now + lease, ARGV[6])
  redis.call('PEXPIRE', KEYS[3], lease)
  redis.call('PEXPIRE', KEYS[4], lease)
end
if lo + hi > 0 then wait = 0 end
return {0, f, wait, -1, lo, hi}";

/// The cleanup of a permit attempt whose outcome is unknown or that did
/// not reach a quorum: delete every slot key (`KEYS`) that holds the
/// attempt's token `ARGV[1]` (one node picks the slot itself, so the
/// caller may not know which). Returns how many it deleted (0 or 1: a
/// token is fresh per attempt). Publishes nothing: nothing was handed out.
pub const PERMIT_CLEANUP: &str = "-- edgelock permit cleanup v1
local n = 0
for i = 1, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[1] then
    redis.call('DEL', KEYS[i])
    n = n + 1
  end
end
return n";

/// What inspect reads about a name, for any kind: `KEYS[1]` the lock key,
/// `KEYS[2]` the counter, `KEYS[3]` the limit record, `KEYS[4]` the
/// readers, `KEYS[5..]` slot keys. `{exists, pttl, counter, stored limit
/// (0: none), live readers, ms until the last reader's lease ends (-2:
/// none), pttl of each declared slot...}` (PTTL: -2 free, -1 no expiry).
/// Read-only: expired readers are not counted, not dropped. Inspect
/// declares no slot first and asks again with the stored limit's slots if
/// there is one.
pub const INSPECT: &str = "-- edgelock inspect v2
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local r = {redis.call('EXISTS', KEYS[1]), redis.call('PTTL', KEYS[1]),
  tonumber(redis.call('GET', KEYS[2]) or '0') or 0, tonumber(redis.call('GET', KEYS[3]) or '0') or 0}
local n = redis.call('ZCOUNT', KEYS[4], '(' .. now, '+inf')
r[5] = n
r[6] = -2
if n > 0 then
  local last = redis.call('ZRANGE', KEYS[4], -1, -1, 'WITHSCORES')
  r[6] = math.max(0, tonumber(last[2]) - now)
end
for i = 5, #KEYS do r[#r + 1] = redis.call('PTTL', KEYS[i]) end
return r";

/// A shared hold of a read-write lock (see [`super::rwlock`]), one node:
/// `KEYS[1]` the lock key (the writer), `KEYS[2]` the counter, `KEYS[3]`
/// the readers, `KEYS[4]` the writer intent; `ARGV` token, ttl ms.
/// Expired readers are dropped (server `TIME`). While a writer holds, or a
/// writer waits (its intent is set), nothing is taken: `{0, counter,
/// wait}`, `wait` the writer's or the intent's PTTL. Otherwise the token
/// joins the readers with its lease end as score, the set lives as long as
/// its last reader, and the counter rises: `{1, counter, 0}` (the reply
/// shape of [`ACQUIRE`]).
pub const ACQUIRE_SHARED: &str = "-- edgelock acquire shared v1
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
local wait = redis.call('PTTL', KEYS[1])
if wait == -2 then wait = redis.call('PTTL', KEYS[4]) end
if wait ~= -2 then return {0, tonumber(redis.call('GET', KEYS[2]) or '0') or 0, wait} end
redis.call('ZADD', KEYS[3], now + tonumber(ARGV[2]), ARGV[1])
local last = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')
redis.call('PEXPIRE', KEYS[3], math.max(1, tonumber(last[2]) - now))
return {1, redis.call('INCR', KEYS[2]), 0}";

/// A reader's extend: `KEYS[1]` the readers, `KEYS[2]` the counter; `ARGV`
/// token, ttl ms, fencing floor. Raises the counter as [`EXTEND`] does; if
/// the token is still a live reader its lease ends `ttl` ms from the
/// server's now (`{1, counter}`), else nothing (`{0, counter}`: the hold
/// is lost, never re-created).
pub const EXTEND_SHARED: &str = "-- edgelock extend shared v1
local f = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
if f < tonumber(ARGV[3]) then
  f = tonumber(ARGV[3])
  redis.call('SET', KEYS[2], ARGV[3])
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return {0, f} end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIRE', KEYS[1], math.max(1, tonumber(last[2]) - now))
return {1, f}";

/// A reader's release: `KEYS[1]` the lock key, `KEYS[2]` the counter,
/// `KEYS[3]` / `KEYS[4]` the waiters' queue and leases, `KEYS[5]` the
/// readers; `ARGV` token, fencing floor, wake-up channel. Raises the
/// counter, drops expired readers, then removes the token: 0 when it was
/// not a live reader (a late release of an expired reader touches no
/// other). When it was the last reader and no writer holds, the name's
/// waiters are woken as [`RELEASE`] wakes them (`released:<counter>`,
/// naming the queue's live head: a waiting writer).
pub const RELEASE_SHARED: &str = "-- edgelock release shared v1
local f = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
if f < tonumber(ARGV[2]) then
  f = tonumber(ARGV[2])
  redis.call('SET', KEYS[2], ARGV[2])
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', now)
if redis.call('ZREM', KEYS[5], ARGV[1]) == 0 then return 0 end
if redis.call('ZCARD', KEYS[5]) > 0 or redis.call('EXISTS', KEYS[1]) == 1 then return 1 end
local msg = 'released:' .. f
local head = redis.call('LINDEX', KEYS[3], 0)
if head and tonumber(redis.call('ZSCORE', KEYS[4], head) or '0') > now then msg = msg .. ':' .. head end
redis.call('PUBLISH', ARGV[3], msg)
return 1";

/// A reader's status (resume): `KEYS[1]` the readers, `KEYS[2]` the
/// counter; `ARGV[1]` the token. `{1, 1, ms left, counter}` while the
/// token is a live reader, else `{0, 0, -2, counter}` (the reply shape of
/// [`STATUS`]).
pub const STATUS_SHARED: &str = "-- edgelock status shared v1
local f = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local s = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1]) or '0')
if s <= now then return {0, 0, -2, f} end
return {1, 1, s - now, f}";

/// Which script a command runs (the simulation's Redis model matches on this).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Script {
    /// [`ACQUIRE`].
    Acquire,
    /// [`EXTEND`].
    Extend,
    /// [`RELEASE`].
    Release,
    /// [`STATUS`].
    Status,
    /// [`ACQUIRE_QUEUED`].
    AcquireQueued,
    /// [`LEAVE`].
    Leave,
    /// [`ACQUIRE_PERMIT`].
    AcquirePermit,
    /// [`PERMIT_CLEANUP`].
    PermitCleanup,
    /// [`INSPECT`].
    Inspect,
    /// [`ACQUIRE_SHARED`].
    AcquireShared,
    /// [`EXTEND_SHARED`].
    ExtendShared,
    /// [`RELEASE_SHARED`].
    ReleaseShared,
    /// [`STATUS_SHARED`].
    StatusShared,
    /// [`super::election::RECORD`].
    LeaderRecord,
    /// [`super::election::LEADER`].
    Leader,
    /// [`REENTER`].
    Reenter,
    /// [`ACQUIRE_SET`].
    AcquireSet,
}

impl Script {
    /// Every script.
    pub const ALL: [Script; 17] = [
        Script::Acquire,
        Script::Extend,
        Script::Release,
        Script::Status,
        Script::AcquireQueued,
        Script::Leave,
        Script::AcquirePermit,
        Script::PermitCleanup,
        Script::Inspect,
        Script::AcquireShared,
        Script::ExtendShared,
        Script::ReleaseShared,
        Script::StatusShared,
        Script::LeaderRecord,
        Script::Leader,
        Script::Reenter,
        Script::AcquireSet,
    ];

    /// The Lua source sent with `EVAL`.
    pub fn text(self) -> &'static str {
        match self {
            Script::Acquire => ACQUIRE,
            Script::Extend => EXTEND,
            Script::Release => RELEASE,
            Script::Status => STATUS,
            Script::AcquireQueued => ACQUIRE_QUEUED,
            Script::Leave => LEAVE,
            Script::AcquirePermit => ACQUIRE_PERMIT,
            Script::PermitCleanup => PERMIT_CLEANUP,
            Script::Inspect => INSPECT,
            Script::AcquireShared => ACQUIRE_SHARED,
            Script::ExtendShared => EXTEND_SHARED,
            Script::ReleaseShared => RELEASE_SHARED,
            Script::StatusShared => STATUS_SHARED,
            Script::LeaderRecord => super::election::RECORD,
            Script::Leader => super::election::LEADER,
            Script::Reenter => REENTER,
            Script::AcquireSet => ACQUIRE_SET,
        }
    }

    /// The script whose source is exactly `text`, if any.
    pub fn from_text(text: &[u8]) -> Option<Script> {
        Script::ALL
            .into_iter()
            .find(|s| s.text().as_bytes() == text)
    }

    /// The SHA-1 of the source, as `EVALSHA` names it (lowercase hex).
    pub fn sha1(self) -> String {
        sha1_smol::Sha1::from(self.text()).digest().to_string()
    }

    /// The script whose SHA-1 is `sha` (any case), if any.
    pub fn from_sha1(sha: &[u8]) -> Option<Script> {
        Script::ALL
            .into_iter()
            .find(|s| s.sha1().as_bytes().eq_ignore_ascii_case(sha))
    }

    /// The script an `EVAL` or `EVALSHA` command runs, if it is one of ours.
    pub fn of_command(cmd: &RedisCommand) -> Option<Script> {
        let source = cmd.args.get(1)?;
        match cmd.name() {
            b"EVAL" => Script::from_text(source),
            b"EVALSHA" => Script::from_sha1(source),
            _ => None,
        }
    }

    /// Index in [`Script::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

/// The `EVALSHA` form of an `EVAL` of `script`: the same keys and arguments,
/// the source replaced by its SHA-1 (about 400 bytes less per request).
/// Redis answers `NOSCRIPT` when its script cache lacks it (first use on a
/// node, a restart, `SCRIPT FLUSH`): the engine then sends the `EVAL`, which
/// also caches the script.
pub fn as_evalsha(cmd: &RedisCommand, script: Script) -> RedisCommand {
    let mut args = cmd.args.clone();
    if args.len() > 1 {
        args[0] = b"EVALSHA".to_vec();
        args[1] = script.sha1().into_bytes();
    }
    RedisCommand { args }
}

/// Whether a reply says the node's script cache lacks the script.
pub fn is_noscript(v: &RedisValue) -> bool {
    matches!(v, RedisValue::Error(e) if e.starts_with("NOSCRIPT"))
}

fn eval(script: Script, key: &str, fence_key: &str) -> RedisCommand {
    RedisCommand::new("EVAL")
        .arg(script.text())
        .arg("2")
        .arg(key)
        .arg(fence_key)
}

/// `EVAL` of [`ACQUIRE`]: take `key` for owner `token` for `ttl_ms` if it
/// is free; `count_every_attempt` for Redlock (see [`ACQUIRE`]); a refusal
/// sets the writer intent for `intent_ms` (0: not).
pub fn acquire(
    key: &str,
    fence_key: &str,
    token: &str,
    ttl_ms: u64,
    count_every_attempt: bool,
    intent_ms: u64,
) -> RedisCommand {
    let every = if count_every_attempt { "1" } else { "0" };
    RedisCommand::new("EVAL")
        .arg(Script::Acquire.text())
        .arg("4")
        .arg(key)
        .arg(fence_key)
        .arg(super::keys::readers_key(key))
        .arg(super::keys::intent_key(key))
        .arg(token)
        .arg(ttl_ms.to_string())
        .arg(every)
        .arg(intent_ms.to_string())
}

/// `EVAL` of [`EXTEND`]: set `key`'s TTL to `ttl_ms` if it holds `token`,
/// raising the fencing counter to at least `fence_floor` (the outer hold).
pub fn extend(
    key: &str,
    fence_key: &str,
    token: &str,
    ttl_ms: u64,
    fence_floor: u64,
) -> RedisCommand {
    extend_hold(key, fence_key, token, ttl_ms, fence_floor, OUTER_HOLD)
}

/// [`extend`] of the hold named `hold` ([`OUTER_HOLD`] for the hold an
/// acquire granted): confirmed only where the node knows that hold.
pub fn extend_hold(
    key: &str,
    fence_key: &str,
    token: &str,
    ttl_ms: u64,
    fence_floor: u64,
    hold: &str,
) -> RedisCommand {
    RedisCommand::new("EVAL")
        .arg(Script::Extend.text())
        .arg("3")
        .arg(key)
        .arg(fence_key)
        .arg(super::keys::holds_key(key))
        .arg(token)
        .arg(ttl_ms.to_string())
        .arg(fence_floor.to_string())
        .arg(hold)
}

/// The member of the outer hold in a lock's set of holds ([`REENTER`]).
pub const OUTER_HOLD: &str = "+";

/// `EVAL` of [`REENTER`]: one more hold, `hold`, of `token`'s lock at `key`.
pub fn reenter(key: &str, token: &str, hold: &str) -> RedisCommand {
    RedisCommand::new("EVAL")
        .arg(Script::Reenter.text())
        .arg("2")
        .arg(key)
        .arg(super::keys::holds_key(key))
        .arg(token)
        .arg(hold)
}

/// A reply of [`REENTER`]: `Some(pttl)` when the hold was counted (the
/// lock's remaining ms), `None` when the owner no longer holds it.
pub fn parse_reenter(v: &RedisValue) -> Result<Option<u64>, String> {
    match v.as_ints().as_deref() {
        Some([1, n, pttl]) if *n >= 2 && *pttl > 0 => Ok(Some(*pttl as u64)),
        Some([0, 0, 0]) => Ok(None),
        _ => Err(format!("unexpected reply {}", describe(v))),
    }
}

/// What a release did on a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Released {
    /// The key was ours and is deleted (1).
    Deleted,
    /// The key was ours and stays: one of several counted holds ended (2).
    Decremented,
    /// The key was not ours (0).
    NotOurs,
}

/// A reply of [`RELEASE`].
pub fn parse_release(v: &RedisValue) -> Result<Released, String> {
    match v.as_int() {
        Some(1) => Ok(Released::Deleted),
        Some(2) => Ok(Released::Decremented),
        Some(0) => Ok(Released::NotOurs),
        _ => Err(format!("unexpected reply {}", describe(v))),
    }
}

/// `EVAL` of [`RELEASE`]: delete `key` if it holds `token`, raising the
/// fencing counter to at least `fence_floor` and waking `key`'s waiters.
pub fn release(key: &str, fence_key: &str, token: &str, fence_floor: u64) -> RedisCommand {
    release_waking(key, fence_key, key, token, fence_floor)
}

/// [`release`] of `key` waking the waiters of `wake_base` (its queue's
/// head, on its channel): a permit's release wakes its semaphore's waiters.
///
/// The five keys: `key`, the counter, the queue and leases of `wake_base`
/// (the lock key itself for a lock, the semaphore's base for a permit) and
/// `key`'s hold count.
pub fn release_waking(
    key: &str,
    fence_key: &str,
    wake_base: &str,
    token: &str,
    fence_floor: u64,
) -> RedisCommand {
    release_hold(key, fence_key, wake_base, token, fence_floor, OUTER_HOLD)
}

/// [`release_waking`] of the hold named `hold` in the lock's set of holds
/// ([`OUTER_HOLD`] for the hold an acquire granted).
pub fn release_hold(
    key: &str,
    fence_key: &str,
    wake_base: &str,
    token: &str,
    fence_floor: u64,
    hold: &str,
) -> RedisCommand {
    let channel = super::subscription::wake_channel(wake_base);
    RedisCommand::new("EVAL")
        .arg(Script::Release.text())
        .arg("5")
        .arg(key)
        .arg(fence_key)
        .arg(super::keys::queue_key(wake_base))
        .arg(super::keys::leases_key(wake_base))
        .arg(super::keys::holds_key(key))
        .arg(token)
        .arg(fence_floor.to_string())
        .arg(channel)
        .arg(hold)
}

/// `EVAL` of [`ACQUIRE_QUEUED`] for waiter `waiter` (queueing with a lease
/// of `lease_ms`, 0 for a try); `fair`: only the queue's head may take it;
/// a refusal sets the writer intent for `lease_ms` (a waiting writer renews
/// it at every attempt, as its queue lease).
pub fn acquire_queued(
    key: &str,
    fence_key: &str,
    token: &str,
    ttl_ms: u64,
    waiter: &str,
    lease_ms: u64,
    fair: bool,
) -> RedisCommand {
    RedisCommand::new("EVAL")
        .arg(Script::AcquireQueued.text())
        .arg("6")
        .arg(key)
        .arg(fence_key)
        .arg(super::keys::queue_key(key))
        .arg(super::keys::leases_key(key))
        .arg(super::keys::readers_key(key))
        .arg(super::keys::intent_key(key))
        .arg(token)
        .arg(ttl_ms.to_string())
        .arg(waiter)
        .arg(lease_ms.to_string())
        .arg(if fair { "1" } else { "0" })
        .arg(lease_ms.to_string())
}

/// `EVAL` of [`ACQUIRE_SHARED`]: a shared hold of the read-write lock at
/// `key` for `token`, `ttl_ms` long.
pub fn acquire_shared(key: &str, fence_key: &str, token: &str, ttl_ms: u64) -> RedisCommand {
    RedisCommand::new("EVAL")
        .arg(Script::AcquireShared.text())
        .arg("4")
        .arg(key)
        .arg(fence_key)
        .arg(super::keys::readers_key(key))
        .arg(super::keys::intent_key(key))
        .arg(token)
        .arg(ttl_ms.to_string())
}

/// `EVAL` of [`EXTEND_SHARED`] on the readers `readers_key`.
pub fn extend_shared(
    readers_key: &str,
    fence_key: &str,
    token: &str,
    ttl_ms: u64,
    fence_floor: u64,
) -> RedisCommand {
    eval(Script::ExtendShared, readers_key, fence_key)
        .arg(token)
        .arg(ttl_ms.to_string())
        .arg(fence_floor.to_string())
}

/// `EVAL` of [`RELEASE_SHARED`]: the reader `token` of the lock at `key` leaves.
pub fn release_shared(key: &str, fence_key: &str, token: &str, fence_floor: u64) -> RedisCommand {
    RedisCommand::new("EVAL")
        .arg(Script::ReleaseShared.text())
        .arg("5")
        .arg(key)
        .arg(fence_key)
        .arg(super::keys::queue_key(key))
        .arg(super::keys::leases_key(key))
        .arg(super::keys::readers_key(key))
        .arg(token)
        .arg(fence_floor.to_string())
        .arg(super::subscription::wake_channel(key))
}

/// `EVAL` of [`STATUS_SHARED`]: whether `token` is a live reader of `readers_key`.
pub fn status_shared(readers_key: &str, fence_key: &str, token: &str) -> RedisCommand {
    eval(Script::StatusShared, readers_key, fence_key).arg(token)
}

/// `EVAL` of [`LEAVE`]: waiter `waiter` leaves `key`'s queue (and drops the
/// writer intent of `key`).
pub fn leave(key: &str, fence_key: &str, waiter: &str) -> RedisCommand {
    leave_of(key, fence_key, waiter)
}

/// [`LEAVE`] of the queue of `base` (a lock key, or a semaphore's base).
fn leave_of(base: &str, fence_key: &str, waiter: &str) -> RedisCommand {
    RedisCommand::new("EVAL")
        .arg(Script::Leave.text())
        .arg("5")
        .arg(base)
        .arg(fence_key)
        .arg(super::keys::queue_key(base))
        .arg(super::keys::leases_key(base))
        .arg(super::keys::intent_key(base))
        .arg(waiter)
        .arg(super::subscription::wake_channel(base))
}

/// [`LEAVE`] of a semaphore's queue (`base`, see [`super::keys::permit_base`]).
/// The script wakes the new head when its `KEYS[1]` does not exist: here
/// the base, which never does, so the head is always woken (it cannot tell
/// whether a slot is free without declaring them all; a spurious wake-up
/// costs one attempt). Its intent key (`<base>:wintent`) is never written:
/// deleting it is a no-op.
pub fn leave_permits(base: &str, fence_key: &str, waiter: &str) -> RedisCommand {
    leave_of(base, fence_key, waiter)
}

/// The parameters of an [`ACQUIRE_PERMIT`] attempt (`Debug` redacts the token).
#[derive(Clone, Copy)]
pub struct PermitAttempt<'a> {
    /// The name's fencing counter.
    pub fence_key: &'a str,
    /// The limit record.
    pub limit_key: &'a str,
    /// The semaphore's base (its waiters' queue and leases).
    pub base: &'a str,
    /// Slot keys `0..d`, `d` ≥ `limit`.
    pub slots: &'a [String],
    /// The attempt's owner token (a secret: never in `Debug` of a reply).
    pub token: &'a str,
    /// The permit's TTL.
    pub ttl_ms: u64,
    /// The semaphore's limit.
    pub limit: u32,
    /// Exactly this slot (Redlock), or the lowest free one (`None`).
    pub preferred: Option<u32>,
    /// Count every attempt (Redlock).
    pub count_every_attempt: bool,
    /// The waiter's id and queue lease (one node, once it waits).
    pub waiter: Option<(&'a str, u64)>,
}

impl std::fmt::Debug for PermitAttempt<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PermitAttempt")
            .field("fence_key", &self.fence_key)
            .field("slots", &self.slots.len())
            .field("token", &"<redacted>")
            .field("ttl_ms", &self.ttl_ms)
            .field("limit", &self.limit)
            .field("preferred", &self.preferred)
            .field("waiter", &self.waiter)
            .finish()
    }
}

/// `EVAL` of [`ACQUIRE_PERMIT`].
pub fn acquire_permit(p: &PermitAttempt<'_>) -> RedisCommand {
    let mut cmd = RedisCommand::new("EVAL")
        .arg(Script::AcquirePermit.text())
        .arg((4 + p.slots.len()).to_string())
        .arg(p.fence_key)
        .arg(p.limit_key)
        .arg(super::keys::queue_key(p.base))
        .arg(super::keys::leases_key(p.base));
    for k in p.slots {
        cmd = cmd.arg(k.as_str());
    }
    let (waiter, lease) = p.waiter.unwrap_or(("-", 0));
    cmd.arg(p.token)
        .arg(p.ttl_ms.to_string())
        .arg(p.limit.to_string())
        .arg(
            p.preferred
                .map_or_else(|| "-1".to_string(), |k| k.to_string()),
        )
        .arg(if p.count_every_attempt { "1" } else { "0" })
        .arg(waiter)
        .arg(lease.to_string())
}

/// `EVAL` of [`PERMIT_CLEANUP`]: delete whichever of `slots` holds `token`.
pub fn permit_cleanup(slots: &[String], token: &str) -> RedisCommand {
    let mut cmd = RedisCommand::new("EVAL")
        .arg(Script::PermitCleanup.text())
        .arg(slots.len().to_string());
    for k in slots {
        cmd = cmd.arg(k.as_str());
    }
    cmd.arg(token)
}

/// `EVAL` of [`INSPECT`] of a lock key, its counter, its limit record, its
/// readers and `slots`.
pub fn inspect(key: &str, fence_key: &str, limit_key: &str, slots: &[String]) -> RedisCommand {
    let mut cmd = RedisCommand::new("EVAL")
        .arg(Script::Inspect.text())
        .arg((4 + slots.len()).to_string())
        .arg(key)
        .arg(fence_key)
        .arg(limit_key)
        .arg(super::keys::readers_key(key));
    for k in slots {
        cmd = cmd.arg(k.as_str());
    }
    cmd
}

/// `token` `None` asks about the key without claiming it (inspect).
pub fn status(key: &str, fence_key: &str, token: Option<&str>) -> RedisCommand {
    // "-" never equals a hex token, and webdis cannot carry an empty argument.
    eval(Script::Status, key, fence_key).arg(token.unwrap_or("-"))
}

/// A parsed reply of [`ACQUIRE`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AcquireReply {
    /// The key is ours; `fence` is the node's counter after the increment.
    Granted {
        /// The node's fencing counter after the increment.
        fence: u64,
    },
    /// Someone else holds it for `pttl` more ms (`None`: a key without
    /// expiry); `fence` as above.
    Held {
        /// The node's fencing counter after the increment.
        fence: u64,
        /// The holder's remaining ms; `None` for a key without expiry.
        pttl: Option<u64>,
    },
}

fn counter(v: i64) -> Result<u64, String> {
    u64::try_from(v).map_err(|_| format!("negative fencing counter {v}"))
}

/// Parses a reply of [`ACQUIRE`]; the error describes an unexpected reply.
pub fn parse_acquire(v: &RedisValue) -> Result<AcquireReply, String> {
    match v.as_ints().as_deref() {
        Some([1, fence, _]) => Ok(AcquireReply::Granted {
            fence: counter(*fence)?,
        }),
        // -2: the key vanished between SET and PTTL, so it is free now.
        Some([0, fence, pttl]) => Ok(AcquireReply::Held {
            fence: counter(*fence)?,
            pttl: match *pttl {
                -1 => None,
                p => Some(u64::try_from(p).unwrap_or(0)),
            },
        }),
        _ => Err(format!("unexpected acquire reply {}", describe(v))),
    }
}

/// `EVAL` of [`ACQUIRE_SET`]: `names` as `(lock key, fence key, token)`,
/// each taken for `ttl_ms`, all or none.
pub fn acquire_set(names: &[(&str, &str, &str)], ttl_ms: u64) -> RedisCommand {
    use super::keys::*;
    let mut cmd = RedisCommand::new("EVAL")
        .arg(Script::AcquireSet.text())
        .arg((names.len() * SET_KEYS_PER_NAME).to_string());
    for (key, fence, _) in names {
        let base = permit_base(key);
        cmd = cmd
            .arg(*key)
            .arg(*fence)
            .arg(readers_key(key))
            .arg(intent_key(key))
            .arg(queue_key(key))
            .arg(leases_key(key))
            .arg(limit_key(key))
            .arg(queue_key(&base))
            .arg(leases_key(&base))
            .arg(holds_key(key));
    }
    cmd = cmd.arg(ttl_ms.to_string());
    for (_, _, token) in names {
        cmd = cmd.arg(*token);
    }
    cmd
}

/// Parses a reply of [`ACQUIRE_SET`] for `n` names: each name's counter
/// when the set was taken, `None` when it was not.
pub fn parse_acquire_set(v: &RedisValue, n: usize) -> Result<Option<Vec<u64>>, String> {
    match v.as_ints().as_deref() {
        Some([0]) => Ok(None),
        Some([1, fences @ ..]) if fences.len() == n && n > 0 => fences
            .iter()
            .map(|f| counter(*f))
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        _ => Err(format!("unexpected acquire set reply {}", describe(v))),
    }
}

/// Extend and release: 1 = done on our key, 0 = the key is not ours.
pub fn parse_flag(v: &RedisValue) -> Result<bool, String> {
    parse_flag_and_counter(v).map(|(flag, _)| flag)
}

/// Extend (`{flag, counter}`) and release (`flag`): the flag, and the
/// node's fencing counter when the script reports it.
pub fn parse_flag_and_counter(v: &RedisValue) -> Result<(bool, Option<u64>), String> {
    let flag = |f: i64| match f {
        1 => Ok(true),
        0 => Ok(false),
        _ => Err(format!("unexpected reply {}", describe(v))),
    };
    if let Some(f) = v.as_int() {
        return Ok((flag(f)?, None));
    }
    match v.as_ints().as_deref() {
        Some([f, c]) => Ok((flag(*f)?, Some(counter(*c)?))),
        _ => Err(format!("unexpected reply {}", describe(v))),
    }
}

/// A parsed reply of [`STATUS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatusReply {
    /// The lock key exists.
    pub exists: bool,
    /// The key holds the token asked about.
    pub mine: bool,
    /// Remaining ms; `None` for a key without expiry or no key.
    pub pttl: Option<u64>,
    /// The node's fencing counter.
    pub fence: u64,
}

/// Parses a reply of [`STATUS`]; the error describes an unexpected reply.
pub fn parse_status(v: &RedisValue) -> Result<StatusReply, String> {
    match v.as_ints().as_deref() {
        Some([e @ (0 | 1), m @ (0 | 1), pttl, fence]) => Ok(StatusReply {
            exists: *e == 1,
            mine: *m == 1 && *e == 1,
            pttl: u64::try_from(*pttl).ok().filter(|_| *e == 1),
            fence: counter(*fence)?,
        }),
        _ => Err(format!("unexpected status reply {}", describe(v))),
    }
}

/// The free slots a node reported (bit `k` set: slot `k` is free).
pub type FreeSlots = u128;

/// A parsed reply of [`ACQUIRE_PERMIT`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PermitReply {
    /// Slot `slot` is ours; `fence` the counter (after the increment),
    /// `free` the other free slots.
    Granted {
        /// The node's fencing counter.
        fence: u64,
        /// The slot taken.
        slot: u32,
        /// The other slots free on the node.
        free: FreeSlots,
    },
    /// No slot for us: `wait` ms until the earliest held slot frees itself
    /// (0 while another slot is free; `None`: held slots without expiry).
    Busy {
        /// The node's fencing counter.
        fence: u64,
        /// When a slot is expected to free itself.
        wait: Option<u64>,
        /// The slots free on the node.
        free: FreeSlots,
    },
    /// The node's semaphore has limit `stored` and holders: nothing was taken.
    LimitMismatch {
        /// The limit the holders use.
        stored: u32,
    },
    /// The node's stored limit has more slots than the attempt declared.
    NeedsSlots {
        /// The stored limit.
        stored: u32,
    },
}

fn mask(lo: i64, hi: i64) -> Option<FreeSlots> {
    const HALF: i64 = 1 << 50;
    ((0..HALF).contains(&lo) && (0..HALF).contains(&hi))
        .then_some(lo as u128 | ((hi as u128) << 50))
}

/// Parses a reply of [`ACQUIRE_PERMIT`] to an attempt for `limit` permits;
/// the error describes an unexpected reply (a slot out of range, a bad mask).
pub fn parse_acquire_permit(v: &RedisValue, limit: u32) -> Result<PermitReply, String> {
    let bad = || format!("unexpected permit reply {}", describe(v));
    let stored = |s: i64| {
        u32::try_from(s)
            .ok()
            .filter(|s| *s >= 1 && *s <= crate::core::MAX_PERMITS)
    };
    let in_limit = |free: FreeSlots| free >> limit == 0;
    match v.as_ints().as_deref() {
        Some([1, fence, 0, slot, lo, hi]) => {
            let slot = u32::try_from(*slot)
                .ok()
                .filter(|s| *s < limit)
                .ok_or_else(bad)?;
            let free = mask(*lo, *hi).filter(|f| in_limit(*f)).ok_or_else(bad)?;
            Ok(PermitReply::Granted {
                fence: counter(*fence)?,
                slot,
                free,
            })
        }
        Some([0, fence, wait, -1, lo, hi]) => Ok(PermitReply::Busy {
            fence: counter(*fence)?,
            wait: u64::try_from(*wait).ok(),
            free: mask(*lo, *hi).filter(|f| in_limit(*f)).ok_or_else(bad)?,
        }),
        Some([2, 0, 0, -1, s, 0]) => Ok(PermitReply::LimitMismatch {
            stored: stored(*s).ok_or_else(bad)?,
        }),
        Some([3, 0, 0, -1, s, 0]) => Ok(PermitReply::NeedsSlots {
            stored: stored(*s).ok_or_else(bad)?,
        }),
        _ => Err(bad()),
    }
}

/// A parsed reply of [`INSPECT`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InspectReply {
    /// The exclusive lock key exists.
    pub exists: bool,
    /// Its remaining ms (`None`: no key, or no expiry).
    pub pttl: Option<u64>,
    /// The name's fencing counter.
    pub fence: u64,
    /// The semaphore's stored limit (`None`: never a semaphore).
    pub limit: Option<u32>,
    /// Live readers of the read-write lock.
    pub readers: u32,
    /// Ms until the last reader's lease ends (`None`: no reader).
    pub readers_left: Option<u64>,
    /// Per declared slot: `None` free, else its remaining ms
    /// (`u64::MAX`: no expiry).
    pub slots: Vec<Option<u64>>,
}

/// Parses a reply of [`INSPECT`] declaring `declared` slots.
pub fn parse_inspect(v: &RedisValue, declared: usize) -> Result<InspectReply, String> {
    let bad = || format!("unexpected inspect reply {}", describe(v));
    let ints = v.as_ints().ok_or_else(bad)?;
    let [e @ (0 | 1), pttl, fence, limit, readers, readers_left, slots @ ..] = ints.as_slice()
    else {
        return Err(bad());
    };
    if slots.len() != declared {
        return Err(bad());
    }
    let readers = u32::try_from(*readers).map_err(|_| bad())?;
    let readers_left = match *readers_left {
        -2 if readers == 0 => None,
        l if readers > 0 => Some(u64::try_from(l).map_err(|_| bad())?),
        _ => return Err(bad()),
    };
    Ok(InspectReply {
        exists: *e == 1,
        pttl: u64::try_from(*pttl).ok().filter(|_| *e == 1),
        fence: counter(*fence)?,
        // A record out of range is not a semaphore edgelock wrote.
        limit: u32::try_from(*limit)
            .ok()
            .filter(|l| *l >= 1 && *l <= crate::core::MAX_PERMITS),
        readers,
        readers_left,
        slots: slots
            .iter()
            .map(|p| match *p {
                -2 => None,
                p => Some(u64::try_from(p).unwrap_or(u64::MAX)),
            })
            .collect(),
    })
}

/// A reply described without its content (it may hold keys).
fn describe(v: &RedisValue) -> String {
    match v {
        RedisValue::Nil => "nil".into(),
        RedisValue::Int(i) => format!("integer {i}"),
        RedisValue::Bulk(b) => format!("string of {} bytes", b.len()),
        RedisValue::Array(a) => format!("array of {}", a.len()),
        RedisValue::Error(e) => format!("error {e:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ints(v: &[i64]) -> RedisValue {
        RedisValue::Array(v.iter().map(|i| RedisValue::Int(*i)).collect())
    }

    #[test]
    fn scripts_are_told_apart_by_text() {
        for s in Script::ALL {
            assert_eq!(Script::from_text(s.text().as_bytes()), Some(s));
        }
        assert_eq!(Script::from_text(b"return 1"), None);
        let cmd = acquire("{e:k}", "{e:k}:fence", "ab", 100, true, 0);
        assert_eq!(Script::from_text(&cmd.args[1]), Some(Script::Acquire));
        let args: Vec<&[u8]> = cmd.args[2..].iter().map(Vec::as_slice).collect();
        assert_eq!(
            args,
            [
                &b"4"[..],
                b"{e:k}",
                b"{e:k}:fence",
                b"{e:k}:readers",
                b"{e:k}:wintent",
                b"ab",
                b"100",
                b"1",
                b"0"
            ]
        );
    }

    #[test]
    fn evalsha_names_the_script_by_its_sha1() {
        // The SHA-1 of "return 1" as Redis computes it (SCRIPT LOAD).
        assert_eq!(
            sha1_smol::Sha1::from("return 1").digest().to_string(),
            "e0e1f9fabfc9d4800c877a703b823ac0578ff8db"
        );
        let cmd = release("k", "k:fence", "ab", 3);
        let sha = as_evalsha(&cmd, Script::Release);
        assert_eq!(sha.name(), b"EVALSHA");
        assert_eq!(sha.args[1], Script::Release.sha1().into_bytes());
        assert_eq!(sha.args[2..], cmd.args[2..]);
        assert_eq!(Script::of_command(&sha), Some(Script::Release));
        assert_eq!(Script::of_command(&cmd), Some(Script::Release));
        assert_eq!(Script::of_command(&RedisCommand::new("GET").arg("x")), None);
        assert!(is_noscript(&RedisValue::Error(
            "NOSCRIPT No matching script. Please use EVAL.".into()
        )));
        assert!(!is_noscript(&RedisValue::Error("ERR x".into())));
        for (i, s) in Script::ALL.into_iter().enumerate() {
            assert_eq!(s.index(), i);
        }
    }

    #[test]
    fn parses_replies() {
        assert_eq!(
            parse_acquire(&ints(&[1, 7, 0])),
            Ok(AcquireReply::Granted { fence: 7 })
        );
        assert_eq!(
            parse_acquire(&ints(&[0, 7, 900])),
            Ok(AcquireReply::Held {
                fence: 7,
                pttl: Some(900)
            })
        );
        assert_eq!(
            parse_acquire(&ints(&[0, 7, -1])),
            Ok(AcquireReply::Held {
                fence: 7,
                pttl: None
            })
        );
        assert_eq!(
            parse_acquire(&ints(&[0, 7, -2])),
            Ok(AcquireReply::Held {
                fence: 7,
                pttl: Some(0)
            })
        );
        assert!(parse_acquire(&ints(&[1, -7, 0])).is_err());
        assert!(parse_acquire(&ints(&[2, 7, 0])).is_err());
        assert!(parse_acquire(&RedisValue::Error("ERR".into())).is_err());
        assert_eq!(parse_flag(&RedisValue::Int(1)), Ok(true));
        assert_eq!(parse_flag(&ints(&[1, 9])), Ok(true));
        assert_eq!(parse_flag_and_counter(&ints(&[0, 9])), Ok((false, Some(9))));
        assert!(parse_flag_and_counter(&ints(&[1, -9])).is_err());
        assert!(parse_flag_and_counter(&ints(&[2, 9])).is_err());
        assert_eq!(parse_flag(&RedisValue::Int(0)), Ok(false));
        assert!(parse_flag(&RedisValue::Nil).is_err());
        assert_eq!(
            parse_status(&ints(&[1, 1, 50, 3])),
            Ok(StatusReply {
                exists: true,
                mine: true,
                pttl: Some(50),
                fence: 3
            })
        );
        assert_eq!(
            parse_status(&ints(&[0, 0, -2, 3])),
            Ok(StatusReply {
                exists: false,
                mine: false,
                pttl: None,
                fence: 3
            })
        );
        assert!(parse_status(&ints(&[1, 1, 50])).is_err());
    }

    #[test]
    fn permit_commands_declare_every_key_they_touch() {
        let slots = crate::core::redis::keys::permit_keys("{e:s}", 3);
        let p = PermitAttempt {
            fence_key: "{e:s}:fence",
            limit_key: "{e:s}:limit",
            base: "{e:s}:permit",
            slots: &slots,
            token: "ab",
            ttl_ms: 100,
            limit: 3,
            preferred: Some(2),
            count_every_attempt: true,
            waiter: None,
        };
        let cmd = acquire_permit(&p);
        assert!(
            !format!("{p:?}").contains("\"ab\""),
            "the token stays out of Debug"
        );
        assert_eq!(Script::of_command(&cmd), Some(Script::AcquirePermit));
        let args: Vec<String> = cmd.args[2..]
            .iter()
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        assert_eq!(
            args,
            [
                "7",
                "{e:s}:fence",
                "{e:s}:limit",
                "{e:s}:permit:queue",
                "{e:s}:permit:leases",
                "{e:s}:permit:0",
                "{e:s}:permit:1",
                "{e:s}:permit:2",
                "ab",
                "100",
                "3",
                "2",
                "1",
                "-",
                "0"
            ]
        );
        let one = acquire_permit(&PermitAttempt {
            preferred: None,
            count_every_attempt: false,
            waiter: Some(("w1", 6000)),
            ..p
        });
        assert_eq!(
            one.args[args.len() + 2 - 4..]
                .iter()
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect::<Vec<_>>(),
            ["-1", "0", "w1", "6000"]
        );
        let c = permit_cleanup(&slots, "ab");
        assert_eq!(Script::of_command(&c), Some(Script::PermitCleanup));
        assert_eq!(c.args[2], b"3");
        let r = release_waking("{e:s}:permit:1", "{e:s}:fence", "{e:s}:permit", "ab", 4);
        assert_eq!(r.args[5], b"{e:s}:permit:queue");
        assert_eq!(r.args[2], b"5");
        assert_eq!(r.args[7], b"{e:s}:permit:1:holds");
        assert_eq!(
            r.args[10],
            crate::core::redis::subscription::wake_channel("{e:s}:permit").into_bytes()
        );
        let i = inspect("{e:s}", "{e:s}:fence", "{e:s}:limit", &slots[..1]);
        assert_eq!(Script::of_command(&i), Some(Script::Inspect));
        assert_eq!(i.args[2], b"5");
    }

    #[test]
    fn read_write_commands_declare_every_key_they_touch() {
        let strs = |c: &RedisCommand| {
            c.args[2..]
                .iter()
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect::<Vec<_>>()
        };
        let a = acquire_shared("{e:r}", "{e:r}:fence", "ab", 100);
        assert_eq!(Script::of_command(&a), Some(Script::AcquireShared));
        assert_eq!(
            strs(&a),
            [
                "4",
                "{e:r}",
                "{e:r}:fence",
                "{e:r}:readers",
                "{e:r}:wintent",
                "ab",
                "100"
            ]
        );
        let q = acquire_queued("{e:r}", "{e:r}:fence", "ab", 100, "w1", 6000, false);
        assert_eq!(
            strs(&q),
            [
                "6",
                "{e:r}",
                "{e:r}:fence",
                "{e:r}:queue",
                "{e:r}:leases",
                "{e:r}:readers",
                "{e:r}:wintent",
                "ab",
                "100",
                "w1",
                "6000",
                "0",
                "6000"
            ]
        );
        let r = release_shared("{e:r}", "{e:r}:fence", "ab", 7);
        assert_eq!(Script::of_command(&r), Some(Script::ReleaseShared));
        let channel = crate::core::redis::subscription::wake_channel("{e:r}");
        assert_eq!(
            strs(&r),
            [
                "5",
                "{e:r}",
                "{e:r}:fence",
                "{e:r}:queue",
                "{e:r}:leases",
                "{e:r}:readers",
                "ab",
                "7",
                channel.as_str()
            ]
        );
        let e = extend_shared("{e:r}:readers", "{e:r}:fence", "ab", 100, 7);
        assert_eq!(
            (Script::of_command(&e), strs(&e)[..3].to_vec()),
            (
                Some(Script::ExtendShared),
                vec!["2".into(), "{e:r}:readers".into(), "{e:r}:fence".into()]
            )
        );
        let s = status_shared("{e:r}:readers", "{e:r}:fence", "ab");
        assert_eq!(Script::of_command(&s), Some(Script::StatusShared));
        let l = leave("{e:r}", "{e:r}:fence", "w1");
        assert_eq!(Script::of_command(&l), Some(Script::Leave));
        assert_eq!(
            strs(&l)[..6],
            [
                "5",
                "{e:r}",
                "{e:r}:fence",
                "{e:r}:queue",
                "{e:r}:leases",
                "{e:r}:wintent"
            ]
        );
        let i = inspect("{e:r}", "{e:r}:fence", "{e:r}:limit", &[]);
        assert_eq!(
            strs(&i),
            ["4", "{e:r}", "{e:r}:fence", "{e:r}:limit", "{e:r}:readers"]
        );
        // Every script's text is distinct (the model and EVALSHA tell them apart by it).
        let shas: std::collections::BTreeSet<String> =
            Script::ALL.iter().map(|s| s.sha1()).collect();
        assert_eq!(shas.len(), Script::ALL.len());
    }

    #[test]
    fn no_script_reads_a_client_clock() {
        // Leases are scored by the server's TIME; no script takes a time argument.
        for s in Script::ALL {
            let t = s.text();
            if t.contains("now") {
                assert!(
                    t.contains("redis.call('TIME')"),
                    "{s:?} uses `now` without the server's TIME"
                );
            }
        }
    }

    #[test]
    fn parses_permit_replies() {
        assert_eq!(
            parse_acquire_permit(&ints(&[1, 7, 0, 2, 0b011, 0]), 3),
            Ok(PermitReply::Granted {
                fence: 7,
                slot: 2,
                free: 0b011
            })
        );
        assert_eq!(
            parse_acquire_permit(&ints(&[0, 7, 0, -1, 0, 1]), 100),
            Ok(PermitReply::Busy {
                fence: 7,
                wait: Some(0),
                free: 1 << 50
            })
        );
        assert_eq!(
            parse_acquire_permit(&ints(&[0, 7, 900, -1, 0, 0]), 3),
            Ok(PermitReply::Busy {
                fence: 7,
                wait: Some(900),
                free: 0
            })
        );
        assert_eq!(
            parse_acquire_permit(&ints(&[0, 7, -1, -1, 0, 0]), 3),
            Ok(PermitReply::Busy {
                fence: 7,
                wait: None,
                free: 0
            })
        );
        assert_eq!(
            parse_acquire_permit(&ints(&[2, 0, 0, -1, 5, 0]), 3),
            Ok(PermitReply::LimitMismatch { stored: 5 })
        );
        assert_eq!(
            parse_acquire_permit(&ints(&[3, 0, 0, -1, 5, 0]), 3),
            Ok(PermitReply::NeedsSlots { stored: 5 })
        );
        // A slot or a free slot beyond the limit, a stored limit out of
        // range, a negative counter, a short reply: all refused.
        for bad in [
            [1, 7, 0, 3, 0, 0],
            [1, 7, 0, 0, 0b1000, 0],
            [2, 0, 0, -1, 101, 0],
            [3, 0, 0, -1, 0, 0],
            [1, -7, 0, 0, 0, 0],
            [0, 7, 0, -1, -1, 0],
        ] {
            assert!(parse_acquire_permit(&ints(&bad), 3).is_err(), "{bad:?}");
        }
        assert!(parse_acquire_permit(&ints(&[1, 7, 0, 0]), 3).is_err());
        assert!(parse_acquire_permit(&RedisValue::Error("ERR x".into()), 3).is_err());
        assert_eq!(
            parse_inspect(&ints(&[0, -2, 9, 3, 0, -2, 500, -2, -1]), 3),
            Ok(InspectReply {
                exists: false,
                pttl: None,
                fence: 9,
                limit: Some(3),
                readers: 0,
                readers_left: None,
                slots: vec![Some(500), None, Some(u64::MAX)]
            })
        );
        assert_eq!(
            parse_inspect(&ints(&[1, 40, 9, 0, 0, -2]), 0).map(|r| (r.exists, r.pttl, r.limit)),
            Ok((true, Some(40), None))
        );
        assert_eq!(
            parse_inspect(&ints(&[0, -2, 9, 0, 2, 700]), 0).map(|r| (r.readers, r.readers_left)),
            Ok((2, Some(700)))
        );
        assert!(parse_inspect(&ints(&[1, 40, 9, 0, 0, -2]), 1).is_err());
        assert!(parse_inspect(&ints(&[2, 40, 9, 0, 0, -2]), 0).is_err());
        // Readers without a lease end, a lease end without readers, a
        // negative count: not what the script writes.
        for bad in [
            [0, -2, 9, 0, 2, -2],
            [0, -2, 9, 0, 0, 5],
            [0, -2, 9, 0, -1, -2],
            [0, -2, 9, 0, 1, -1],
        ] {
            assert!(parse_inspect(&ints(&bad), 0).is_err(), "{bad:?}");
        }
    }
}
