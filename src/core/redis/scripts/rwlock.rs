//! The read-write lock's reader side (see `redis::rwlock`): a shared hold,
//! its extend, release and status. Their replies have the shapes of the
//! exclusive lock's ([`super::lock`] parses them).

use super::command::eval;
use crate::core::redis::keys::{intent_key, leases_key, queue_key, readers_key};
use crate::core::redis::subscription::wake_channel;
use crate::core::redis::value::RedisCommand;

/// A shared hold of a read-write lock (see
/// [`rwlock`](crate::core::redis::rwlock)), one node: `KEYS[1]` the lock key
/// (the writer), `KEYS[2]` the counter, `KEYS[3]` the readers, `KEYS[4]` the
/// writer intent; `ARGV` token, ttl ms. Expired readers are dropped (server
/// `TIME`). While a writer holds, or a writer waits (its intent is set),
/// nothing is taken: `{0, counter, wait}`, `wait` the writer's or the intent's
/// PTTL. Otherwise the token joins the readers with its lease end as score, the
/// set lives as long as its last reader, and the counter rises: `{1, counter,
/// 0}` (the reply shape of [`ACQUIRE`](super::ACQUIRE)).
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

/// `EVAL` of [`ACQUIRE_SHARED`]: a shared hold of the read-write lock at
/// `key` for `token`, `ttl_ms` long.
pub fn acquire_shared(key: &str, fence_key: &str, token: &str, ttl_ms: u64) -> RedisCommand {
    eval(
        ACQUIRE_SHARED,
        &[key, fence_key, &readers_key(key), &intent_key(key)],
        &[token, &ttl_ms.to_string()],
    )
}

/// A reader's extend: `KEYS[1]` the readers, `KEYS[2]` the counter; `ARGV`
/// token, ttl ms, fencing floor. Raises the counter as [`EXTEND`](super::EXTEND) does; if
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

/// `EVAL` of [`EXTEND_SHARED`] on the readers `readers_key`.
pub fn extend_shared(
    readers_key: &str,
    fence_key: &str,
    token: &str,
    ttl_ms: u64,
    fence_floor: u64,
) -> RedisCommand {
    eval(
        EXTEND_SHARED,
        &[readers_key, fence_key],
        &[token, &ttl_ms.to_string(), &fence_floor.to_string()],
    )
}

/// A reader's release: `KEYS[1]` the lock key, `KEYS[2]` the counter,
/// `KEYS[3]` / `KEYS[4]` the waiters' queue and leases, `KEYS[5]` the
/// readers; `ARGV` token, fencing floor, wake-up channel. Raises the
/// counter, drops expired readers, then removes the token: 0 when it was
/// not a live reader (a late release of an expired reader touches no
/// other). When it was the last reader and no writer holds, the name's
/// waiters are woken as [`RELEASE`](super::RELEASE) wakes them (`released:<counter>`,
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

/// `EVAL` of [`RELEASE_SHARED`]: the reader `token` of the lock at `key` leaves.
pub fn release_shared(key: &str, fence_key: &str, token: &str, fence_floor: u64) -> RedisCommand {
    eval(
        RELEASE_SHARED,
        &[
            key,
            fence_key,
            &queue_key(key),
            &leases_key(key),
            &readers_key(key),
        ],
        &[token, &fence_floor.to_string(), &wake_channel(key)],
    )
}

/// A reader's status (resume): `KEYS[1]` the readers, `KEYS[2]` the
/// counter; `ARGV[1]` the token. `{1, 1, ms left, counter}` while the
/// token is a live reader, else `{0, 0, -2, counter}` (the reply shape of
/// [`STATUS`](super::STATUS)).
pub const STATUS_SHARED: &str = "-- edgelock status shared v1
local f = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local s = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1]) or '0')
if s <= now then return {0, 0, -2, f} end
return {1, 1, s - now, f}";

/// `EVAL` of [`STATUS_SHARED`]: whether `token` is a live reader of `readers_key`.
pub fn status_shared(readers_key: &str, fence_key: &str, token: &str) -> RedisCommand {
    eval(STATUS_SHARED, &[readers_key, fence_key], &[token])
}
