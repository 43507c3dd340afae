//! Re-entering an exclusive lock: one more hold in the lock's set of holds
//! (see `tasks/reenter.rs`).

use super::command::eval;
use super::reply::describe;
use crate::core::redis::keys::holds_key;
use crate::core::redis::value::{RedisCommand, RedisValue};

/// Re-enter the exclusive lock `KEYS[1]` held by owner `ARGV[1]`: one more
/// hold, named `ARGV[2]` (random per re-entry), in the lock's set of holds
/// `KEYS[2]` (`keys::holds_key`): the marker `=<owner>`, `+` for the outer
/// hold and one member per re-entered hold; it expires with the lock
/// ([`EXTEND`](super::EXTEND) renews both). A set without our owner's marker is stale (an
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

/// `EVAL` of [`REENTER`]: one more hold, `hold`, of `token`'s lock at `key`.
pub fn reenter(key: &str, token: &str, hold: &str) -> RedisCommand {
    eval(REENTER, &[key, &holds_key(key)], &[token, hold])
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
