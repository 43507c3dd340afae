//! The exclusive lock's scripts: acquire, extend, release and status (the
//! read-write lock's writer side included), their commands and replies.

use super::command::eval;
use super::reply::{counter, describe};
use crate::core::redis::keys::{
    bypass_key, holds_key, intent_key, leases_key, queue_key, readers_key,
};
use crate::core::redis::subscription::wake_channel;
use crate::core::redis::value::{RedisCommand, RedisValue};

/// `SET key token NX PX ttl` and the fencing counter, atomically:
/// `{1, counter, 0}` when set, otherwise `{0, counter, wait}`, `wait` the
/// holder's PTTL (or, while readers hold, the end of the last reader's
/// lease: the lock frees itself then at the latest).
///
/// With `ARGV[3] == "1"` (Redlock) the counter is `INCR`ed on every attempt,
/// granted or not, so that a later attempt reaching this node always sees a
/// larger value (the cross-node argument in
/// [`redlock`](crate::core::redis::redlock) needs it). Otherwise (one node) it
/// moves only on a grant, so tokens count holders and a refused attempt changes
/// nothing.
///
/// The writer side of the read-write lock (see
/// [`rwlock`](crate::core::redis::rwlock)): `KEYS[3]` the readers (expired ones
/// are dropped first, by the server's `TIME`), `KEYS[4]` the writer intent. The
/// lock is refused while any reader remains; a refused attempt with `ARGV[4]`
/// ms > 0 (a writer that will wait, never a try) sets the intent for that long,
/// so that new readers queue behind it; a grant deletes the intent (the lock
/// key now keeps readers out; other waiting writers set it again at their next
/// attempt).
///
/// v4, **bounded bypass** (no starved waiter): `KEYS[5]`/`KEYS[6]` are the
/// waiters' queue and leases ([`ACQUIRE_QUEUED`](super::ACQUIRE_QUEUED)),
/// `KEYS[7]` the bypass record. While a live waiter heads the queue, a free
/// lock goes to someone else at most `ARGV[5]` times (the record counts
/// them for that head, `<head>:<n>`); after that only the head may take it,
/// so every waiter is served within a bounded number of grants. Dead heads
/// (lease over) are dropped first. A refusal for the head's sake waits the
/// head's remaining lease (the head is woken by the release that freed it).
/// A grant with no live head deletes the record (a left-over of a head that
/// left or died), as the head's own grant and its leaving do, so that
/// nothing stays behind once the waiters are gone.
pub const ACQUIRE: &str = "-- edgelock acquire v4
local every = ARGV[3] == '1'
local f
if every then f = redis.call('INCR', KEYS[2]) end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
local last = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')
local head = redis.call('LINDEX', KEYS[5], 0)
local lease_end = 0
while head do
  lease_end = tonumber(redis.call('ZSCORE', KEYS[6], head) or '0')
  if lease_end > now then break end
  redis.call('LPOP', KEYS[5])
  redis.call('ZREM', KEYS[6], head)
  head = redis.call('LINDEX', KEYS[5], 0)
end
local n = 0
if head then
  local b = redis.call('GET', KEYS[7])
  if b then
    local h, c = string.match(b, '^(.*):(%d+)$')
    if h == head then n = tonumber(c) end
  end
end
if not last[2] and (not head or n < tonumber(ARGV[5])) and redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if not every then f = redis.call('INCR', KEYS[2]) end
  redis.call('DEL', KEYS[4])
  if head then
    redis.call('SET', KEYS[7], head .. ':' .. (n + 1), 'PX', lease_end - now)
  else
    redis.call('DEL', KEYS[7])
  end
  return {1, f, 0}
end
if not every then f = tonumber(redis.call('GET', KEYS[2]) or '0') or 0 end
if tonumber(ARGV[4]) > 0 then redis.call('SET', KEYS[4], '1', 'PX', ARGV[4]) end
local wait = redis.call('PTTL', KEYS[1])
if wait == -2 and last[2] then wait = math.max(0, tonumber(last[2]) - now) end
if wait == -2 and head then wait = lease_end - now end
return {0, f, wait}";

/// How many times a free lock may go to others while a live waiter heads
/// its queue (the default lock's bound; a fair lock's is 0). Two keeps most
/// handoffs as cheap as the unfair lock's (the releasing client, or a
/// newcomer, takes the free lock in its own round trip) while no waiter
/// waits more than `(2 + 1) ×` the queue ahead of it in grants.
pub const MAX_BYPASS: u32 = 2;

/// `EVAL` of [`ACQUIRE`]: take `key` for owner `token` for `ttl_ms` if it
/// is free (and the queue's head has not been bypassed `max_bypass` times);
/// `count_every_attempt` for Redlock (see [`ACQUIRE`]); a refusal sets the
/// writer intent for `intent_ms` (0: not).
pub fn acquire(
    key: &str,
    fence_key: &str,
    token: &str,
    ttl_ms: u64,
    count_every_attempt: bool,
    intent_ms: u64,
    max_bypass: u32,
) -> RedisCommand {
    let every = if count_every_attempt { "1" } else { "0" };
    eval(
        ACQUIRE,
        &[
            key,
            fence_key,
            &readers_key(key),
            &intent_key(key),
            &queue_key(key),
            &leases_key(key),
            &bypass_key(key),
        ],
        &[
            token,
            &ttl_ms.to_string(),
            every,
            &intent_ms.to_string(),
            &max_bypass.to_string(),
        ],
    )
}

/// Raise the counter to `ARGV[3]`; if the key holds our token, `PEXPIRE` it
/// to `ARGV[2]` ms. Returns `{1, counter}` when it was ours, else
/// `{0, counter}`, the counter as it is after the raise: a Redlock raise
/// round learns from it that a node's counter is above the token it is
/// about to hand out (that node's attempt answer was lost).
///
/// v3: the lock's hold count `KEYS[3]` ([`REENTER`](super::REENTER)), if any, is renewed
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

/// The member of the outer hold in a lock's set of holds ([`REENTER`](super::REENTER)).
pub const OUTER_HOLD: &str = "+";

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
    eval(
        EXTEND,
        &[key, fence_key, &holds_key(key)],
        &[token, &ttl_ms.to_string(), &fence_floor.to_string(), hold],
    )
}

/// Raise the counter to `ARGV[2]`; delete the key only if it holds our token (1
/// if deleted, else 0). Never a blind `DEL`. A delete publishes
/// `released:<ARGV[2]>` on the wake-up channel `ARGV[3]` (see
/// `subscription`) so that waiters attempt
/// at once; nothing is published when the key was not ours (it expired:
/// waiters' timers cover it), nor by the cleanup of a failed attempt (`ARGV[2]`
/// = 0: such a key was never handed out, and waking every waiter after each
/// split Redlock vote made them all attempt, split again and clean up again — a
/// storm the simulation measured at 89 % of all messages). When the waiters'
/// queue (`KEYS[3]`, leases in `KEYS[4]`, see
/// [`ACQUIRE_QUEUED`](super::ACQUIRE_QUEUED)) has a live head, the payload
/// names it, `released:<fence>:<waiter>`, and only that waiter attempts; a dead
/// head (lease over) is not named, so every waiter attempts and the queued
/// acquire script drops it.
///
/// Reentrant holds (v4): `KEYS[5]` is the lock's set of holds
/// ([`REENTER`](super::REENTER)) and `ARGV[4]` the releasing hold's member (`+` for the
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
    eval(
        RELEASE,
        &[
            key,
            fence_key,
            &queue_key(wake_base),
            &leases_key(wake_base),
            &holds_key(key),
        ],
        &[
            token,
            &fence_floor.to_string(),
            &wake_channel(wake_base),
            hold,
        ],
    )
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

/// `{exists, is-ours (ARGV[1]), pttl, counter}`; pttl is -2 when absent.
pub const STATUS: &str = "-- edgelock status v1
local f = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
local v = redis.call('GET', KEYS[1])
if not v then return {0, 0, -2, f} end
local mine = 0
if v == ARGV[1] then mine = 1 end
return {1, mine, redis.call('PTTL', KEYS[1]), f}";

/// `token` `None` asks about the key without claiming it (inspect).
pub fn status(key: &str, fence_key: &str, token: Option<&str>) -> RedisCommand {
    // "-" never equals a hex token, and webdis cannot carry an empty argument.
    eval(STATUS, &[key, fence_key], &[token.unwrap_or("-")])
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

#[cfg(test)]
mod tests {
    use super::{
        parse_acquire, parse_flag, parse_flag_and_counter, parse_status, AcquireReply, StatusReply,
    };
    use crate::core::redis::value::RedisValue;

    fn ints(v: &[i64]) -> RedisValue {
        RedisValue::Array(v.iter().map(|i| RedisValue::Int(*i)).collect())
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
}
