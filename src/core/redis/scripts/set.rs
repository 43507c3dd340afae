//! `AcquireAll` of free names in one script (see `core::multi`).

use super::command::eval;
use super::reply::{counter, describe};
use crate::core::redis::keys::{
    holds_key, intent_key, leases_key, limit_key, permit_base, queue_key, readers_key,
};
use crate::core::redis::value::{RedisCommand, RedisValue};

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
/// readers are dropped first, by the server's `TIME`, as [`ACQUIRE`](super::ACQUIRE) does),
/// and, where a limit record exists, none of its permit slots
/// `<lock key>:permit:<k>`, `k < limit` (computed in the script: the host
/// must not check declared keys). The leader record is not checked: it
/// lingers after its lock and counts only while the lock key exists.
///
/// Every name free: each lock key is `SET` to its token with `PX ttl` and
/// its counter `INCR`ed, exactly as [`ACQUIRE`](super::ACQUIRE) grants one name; returns
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

/// `EVAL` of [`ACQUIRE_SET`]: `names` as `(lock key, fence key, token)`,
/// each taken for `ttl_ms`, all or none.
pub fn acquire_set(names: &[(&str, &str, &str)], ttl_ms: u64) -> RedisCommand {
    let keys: Vec<String> = names
        .iter()
        .flat_map(|(key, fence_key, _)| name_keys(key, fence_key))
        .collect();
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    let ttl = ttl_ms.to_string();
    let args: Vec<&str> = std::iter::once(ttl.as_str())
        .chain(names.iter().map(|(_, _, token)| *token))
        .collect();
    eval(ACQUIRE_SET, &keys, &args)
}

/// The keys [`ACQUIRE_SET`] names for one name, in its order.
fn name_keys(key: &str, fence_key: &str) -> [String; SET_KEYS_PER_NAME] {
    let base = permit_base(key);
    [
        key.to_string(),
        fence_key.to_string(),
        readers_key(key),
        intent_key(key),
        queue_key(key),
        leases_key(key),
        limit_key(key),
        queue_key(&base),
        leases_key(&base),
        holds_key(key),
    ]
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
