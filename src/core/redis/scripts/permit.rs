//! A semaphore's permit (see `redis::semaphore`): the acquire of a slot,
//! the cleanup of an attempt, and the attempt's reply.

use super::command::eval;
use super::reply::{counter, describe};
use crate::core::redis::keys::{leases_key, queue_key};
use crate::core::redis::value::{RedisCommand, RedisValue};

/// A permit of a semaphore (see [`semaphore`](crate::core::redis::semaphore)),
/// atomically.
///
/// `KEYS[1]` the fencing counter, `KEYS[2]` the limit record, `KEYS[3]` /
/// `KEYS[4]` the semaphore's waiters' queue and leases, `KEYS[5..]` the
/// slot keys `0..d` (`d` ≥ the limit asked for: every slot the script may
/// read is declared). `ARGV`: token, ttl ms, limit, preferred slot (`-1`:
/// the lowest free one), `1` to count every attempt (Redlock, as
/// [`ACQUIRE`](super::ACQUIRE)), the waiter's id (`-` for none: Redlock, or one node's
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
/// The waiters' queue is that of [`ACQUIRE_QUEUED`](super::ACQUIRE_QUEUED) (never fair: the queue
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
    let (queue, leases) = (queue_key(p.base), leases_key(p.base));
    let mut keys = vec![p.fence_key, p.limit_key, &queue, &leases];
    keys.extend(p.slots.iter().map(String::as_str));
    let (waiter, lease) = p.waiter.unwrap_or(("-", 0));
    let preferred = p
        .preferred
        .map_or_else(|| "-1".to_string(), |k| k.to_string());
    eval(
        ACQUIRE_PERMIT,
        &keys,
        &[
            p.token,
            &p.ttl_ms.to_string(),
            &p.limit.to_string(),
            &preferred,
            if p.count_every_attempt { "1" } else { "0" },
            waiter,
            &lease.to_string(),
        ],
    )
}

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

/// `EVAL` of [`PERMIT_CLEANUP`]: delete whichever of `slots` holds `token`.
pub fn permit_cleanup(slots: &[String], token: &str) -> RedisCommand {
    let keys: Vec<&str> = slots.iter().map(String::as_str).collect();
    eval(PERMIT_CLEANUP, &keys, &[token])
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

#[cfg(test)]
mod tests {
    use super::{parse_acquire_permit, PermitReply};
    use crate::core::redis::value::RedisValue;

    fn ints(v: &[i64]) -> RedisValue {
        RedisValue::Array(v.iter().map(|i| RedisValue::Int(*i)).collect())
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
    }
}
