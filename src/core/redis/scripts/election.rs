//! An election's scripts (see `redis::election` for the recipe): the
//! owner-checked leader record and the read of who leads.

use super::command::eval;
use crate::core::redis::subscription::wake_channel;
use crate::core::redis::value::{RedisCommand, RedisValue};
use crate::core::{Leadership, MAX_CAMPAIGN_VALUE};

/// Owner-checked write of the leader record (see the module docs):
/// `KEYS[1]` the lock key, `KEYS[2]` the record; `ARGV[1]` the owner token,
/// `ARGV[2]` the fencing token, `ARGV[3]` `=` + the value, `ARGV[4]` the
/// wake-up channel. 1 when written, 0 when the lock key is not ours.
pub const RECORD: &str = "-- edgelock leader record v1
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[2], 'o', ARGV[1], 'f', ARGV[2], 'v', ARGV[3])
redis.call('PUBLISH', ARGV[4], 'leader:' .. ARGV[2])
return 1";

/// Who leads: `{1, fence, pttl, "=value"}` when the record's owner holds
/// the lock key, else `{0, 0, pttl}` (`KEYS[1]` the lock key, `KEYS[2]` the
/// record; `pttl` the lock key's, -2 when absent).
pub const LEADER: &str = "-- edgelock leader v1
local o = redis.call('GET', KEYS[1])
local pttl = redis.call('PTTL', KEYS[1])
if o then
  local r = redis.call('HMGET', KEYS[2], 'o', 'f', 'v')
  if r[1] == o and r[2] and r[3] then return {1, tonumber(r[2]) or -1, pttl, r[3]} end
end
return {0, 0, pttl}";

/// The leader record of a lock key: `<lock_key>:leader`.
pub fn record_key(lock_key: &str) -> String {
    format!("{lock_key}:leader")
}

/// `EVAL` of [`RECORD`]: write `value` with `fence` as the leader record of
/// the lock at `key` if it holds `token`.
pub fn record(key: &str, token: &str, fence: u64, value: &str) -> RedisCommand {
    eval(
        RECORD,
        &[key, &record_key(key)],
        &[
            token,
            &fence.to_string(),
            &format!("={value}"),
            &wake_channel(key),
        ],
    )
}

/// `EVAL` of [`LEADER`] for the lock at `key`.
pub fn leader(key: &str) -> RedisCommand {
    eval(LEADER, &[key, &record_key(key)], &[])
}

/// A node's answer to [`LEADER`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderReply {
    /// The leader whose record this node vouches for.
    pub leader: Option<Leadership>,
    /// The lock key's remaining ms (`None`: absent or without expiry).
    pub pttl: Option<u64>,
}

fn describe(v: &RedisValue) -> String {
    match v {
        RedisValue::Nil => "nil".into(),
        RedisValue::Int(i) => format!("integer {i}"),
        RedisValue::Bulk(b) => format!("string of {} bytes", b.len()),
        RedisValue::Array(a) => format!("array of {}", a.len()),
        RedisValue::Error(e) => format!("error {:?}", e.chars().take(120).collect::<String>()),
    }
}

/// An integer element, as Redis or a protocol may send it (some gateways
/// carry integers inside arrays as decimal strings).
fn int_of(v: &RedisValue) -> Option<i64> {
    match v {
        RedisValue::Int(i) => Some(*i),
        RedisValue::Bulk(b) if b.len() <= 20 => std::str::from_utf8(b).ok()?.parse().ok(),
        _ => None,
    }
}

/// Parses a reply of [`LEADER`]; the error describes an unexpected reply.
pub fn parse_leader(v: &RedisValue) -> Result<LeaderReply, String> {
    let bad = || format!("unexpected leader reply {}", describe(v));
    let RedisValue::Array(items) = v else {
        return Err(bad());
    };
    let pttl_of = |p: &RedisValue| -> Result<Option<u64>, String> {
        let p = int_of(p).ok_or_else(bad)?;
        match p {
            -2 | -1 => Ok(None),
            p if p >= 0 => Ok(Some(p as u64)),
            _ => Err(bad()),
        }
    };
    match items.as_slice() {
        [flag, fence, pttl] if int_of(flag) == Some(0) && int_of(fence) == Some(0) => {
            Ok(LeaderReply {
                leader: None,
                pttl: pttl_of(pttl)?,
            })
        }
        [flag, fence, pttl, RedisValue::Bulk(value)] if int_of(flag) == Some(1) => {
            let fence = int_of(fence)
                .and_then(|f| u64::try_from(f).ok())
                .filter(|f| *f > 0)
                .ok_or_else(|| {
                    format!(
                        "leader record with a malformed fencing token ({})",
                        describe(v)
                    )
                })?;
            let value = value
                .strip_prefix(b"=")
                .filter(|s| s.len() <= MAX_CAMPAIGN_VALUE)
                .and_then(|s| std::str::from_utf8(s).ok())
                .ok_or_else(|| "leader record with a malformed value".to_string())?;
            Ok(LeaderReply {
                leader: Some(Leadership {
                    value: value.to_string(),
                    fencing_token: fence,
                }),
                pttl: pttl_of(pttl)?,
            })
        }
        _ => Err(bad()),
    }
}
