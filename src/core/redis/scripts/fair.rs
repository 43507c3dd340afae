//! The waiters' queue on one node: the queued acquire (the fair lock, and
//! whom a release wakes) and a waiter leaving the queue.

use super::command::eval;
use crate::core::redis::keys::{bypass_key, intent_key, leases_key, queue_key, readers_key};
use crate::core::redis::subscription::wake_channel;
use crate::core::redis::value::RedisCommand;

/// The queued acquire (one node): a FIFO queue of waiter ids (`KEYS[3]`, a
/// list) with a lease each (`KEYS[4]`, a sorted set scored by the server's
/// `TIME` in ms, never a client clock). Dead heads (lease over) are dropped
/// first. Then the lock is taken (`SET NX PX`) if it is free and the queue
/// is empty, or its head is this waiter (`ARGV[3]`), or its head has been
/// bypassed fewer than `ARGV[5]` times (v4: the bypass record `KEYS[7]`,
/// `<head>:<n>`, as in [`ACQUIRE`](super::ACQUIRE); a grant to another than
/// the head counts one more). The fair lock passes 0: only the head may
/// take it; the default lock [`MAX_BYPASS`](super::MAX_BYPASS), so that the
/// head is served within that many grants to others ([`RELEASE`](super::RELEASE)
/// names the live head, whom a release wakes). A granted waiter leaves the queue:
/// `{1, counter, 0}`, the counter moving on grants only. Otherwise, with a
/// lease (`ARGV[4]` ms > 0; 0 for a try, which never queues), the waiter
/// joins the tail (keeping its place if it is already queued) and its lease
/// is renewed: `{0, counter, wait}`, `wait` the holder's PTTL, or while the
/// lock is free but another waiter heads a fair queue, that head's
/// remaining lease.
///
/// The read-write lock's writer side, as in [`ACQUIRE`](super::ACQUIRE): `KEYS[5]` the
/// readers (the lock is refused while one remains; `wait` is then the end
/// of the last reader's lease), `KEYS[6]` the writer intent, set for
/// `ARGV[6]` ms by a refused attempt (0: not set) and deleted by a grant.
pub const ACQUIRE_QUEUED: &str = "-- edgelock queued acquire v4
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local head = redis.call('LINDEX', KEYS[3], 0)
local lease_end = 0
while head do
  lease_end = tonumber(redis.call('ZSCORE', KEYS[4], head) or '0')
  if lease_end > now then break end
  redis.call('LPOP', KEYS[3])
  redis.call('ZREM', KEYS[4], head)
  head = redis.call('LINDEX', KEYS[3], 0)
end
local other = head and head ~= ARGV[3]
local n = 0
if other then
  local b = redis.call('GET', KEYS[7])
  if b then
    local h, c = string.match(b, '^(.*):(%d+)$')
    if h == head then n = tonumber(c) end
  end
end
redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', now)
local last = redis.call('ZRANGE', KEYS[5], -1, -1, 'WITHSCORES')
if not last[2] and (not other or n < tonumber(ARGV[5])) and redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if redis.call('ZREM', KEYS[4], ARGV[3]) == 1 then redis.call('LREM', KEYS[3], 1, ARGV[3]) end
  redis.call('DEL', KEYS[6])
  if other then
    redis.call('SET', KEYS[7], head .. ':' .. (n + 1), 'PX', lease_end - now)
  else
    redis.call('DEL', KEYS[7])
  end
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

/// `EVAL` of [`ACQUIRE_QUEUED`] for waiter `waiter` (queueing with a lease
/// of `lease_ms`, 0 for a try); others than the queue's head may take the
/// free lock `max_bypass` times while it heads (0: the fair lock);
/// a refusal sets the writer intent for `lease_ms` (a waiting writer renews
/// it at every attempt, as its queue lease).
pub fn acquire_queued(
    key: &str,
    fence_key: &str,
    token: &str,
    ttl_ms: u64,
    waiter: &str,
    lease_ms: u64,
    max_bypass: u32,
) -> RedisCommand {
    let lease = lease_ms.to_string();
    eval(
        ACQUIRE_QUEUED,
        &[
            key,
            fence_key,
            &queue_key(key),
            &leases_key(key),
            &readers_key(key),
            &intent_key(key),
            &bypass_key(key),
        ],
        &[
            token,
            &ttl_ms.to_string(),
            waiter,
            &lease,
            &max_bypass.to_string(),
            &lease,
        ],
    )
}

/// A queued waiter gives up: it leaves the queue (`ARGV[1]` its id) and, if
/// the lock is free, wakes the new head (`ARGV[2]` the wake-up channel).
/// It also deletes the writer intent (`KEYS[5]`, see [`ACQUIRE`](super::ACQUIRE)), so that
/// readers held back by a writer that gave up are not kept waiting for the
/// intent to expire: when the queue is then empty and the lock free, the
/// readers are woken (`released:<counter>`, naming nobody). Another waiting
/// writer sets the intent again with its next attempt (the new head is
/// woken at once).
///
/// v3: a head that leaves deletes its bypass record (`KEYS[6]`, see
/// [`ACQUIRE`](super::ACQUIRE)); the next head starts with none.
pub const LEAVE: &str = "-- edgelock leave v3
if redis.call('LINDEX', KEYS[3], 0) == ARGV[1] then redis.call('DEL', KEYS[6]) end
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

/// `EVAL` of [`LEAVE`]: waiter `waiter` leaves `key`'s queue (and drops the
/// writer intent of `key`).
pub fn leave(key: &str, fence_key: &str, waiter: &str) -> RedisCommand {
    leave_of(key, fence_key, waiter)
}

/// [`LEAVE`] of the queue of `base` (a lock key, or a semaphore's base).
fn leave_of(base: &str, fence_key: &str, waiter: &str) -> RedisCommand {
    eval(
        LEAVE,
        &[
            base,
            fence_key,
            &queue_key(base),
            &leases_key(base),
            &intent_key(base),
            &bypass_key(base),
        ],
        &[waiter, &wake_channel(base)],
    )
}

/// [`LEAVE`] of a semaphore's queue (`base`, see
/// [`permit_base`](crate::core::redis::keys::permit_base)).
/// The script wakes the new head when its `KEYS[1]` does not exist: here
/// the base, which never does, so the head is always woken (it cannot tell
/// whether a slot is free without declaring them all; a spurious wake-up
/// costs one attempt). Its intent key (`<base>:wintent`) is never written:
/// deleting it is a no-op.
pub fn leave_permits(base: &str, fence_key: &str, waiter: &str) -> RedisCommand {
    leave_of(base, fence_key, waiter)
}
