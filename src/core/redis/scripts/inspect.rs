//! Inspect: what a node knows about a name, for any kind.

use super::command::eval;
use super::reply::{counter, describe};
use crate::core::redis::keys::readers_key;
use crate::core::redis::value::{RedisCommand, RedisValue};

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

/// `EVAL` of [`INSPECT`] of a lock key, its counter, its limit record, its
/// readers and `slots`.
pub fn inspect(key: &str, fence_key: &str, limit_key: &str, slots: &[String]) -> RedisCommand {
    let readers = readers_key(key);
    let mut keys = vec![key, fence_key, limit_key, &readers];
    keys.extend(slots.iter().map(String::as_str));
    eval(INSPECT, &keys, &[])
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

#[cfg(test)]
mod tests {
    use super::{parse_inspect, InspectReply};
    use crate::core::redis::value::RedisValue;

    fn ints(v: &[i64]) -> RedisValue {
        RedisValue::Array(v.iter().map(|i| RedisValue::Int(*i)).collect())
    }

    #[test]
    fn parses_inspect_replies() {
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
