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
/// `{1, counter, 0}` when set, otherwise `{0, counter, pttl-of-holder}`.
///
/// With `ARGV[3] == "1"` (Redlock) the counter is `INCR`ed on every attempt,
/// granted or not, so that a later attempt reaching this node always sees a
/// larger value (the cross-node argument in [`super::redlock`] needs it).
/// Otherwise (one node) it moves only on a grant, so tokens count holders
/// and a refused attempt changes nothing.
pub const ACQUIRE: &str = "-- edgelock acquire v2
local every = ARGV[3] == '1'
local f
if every then f = redis.call('INCR', KEYS[2]) end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if not every then f = redis.call('INCR', KEYS[2]) end
  return {1, f, 0}
end
if not every then f = tonumber(redis.call('GET', KEYS[2]) or '0') or 0 end
return {0, f, redis.call('PTTL', KEYS[1])}";

/// Raise the counter to `ARGV[3]`; if the key holds our token, `PEXPIRE` it
/// to `ARGV[2]` ms. Returns `{1, counter}` when it was ours, else
/// `{0, counter}`, the counter as it is after the raise: a Redlock raise
/// round learns from it that a node's counter is above the token it is
/// about to hand out (that node's attempt answer was lost).
pub const EXTEND: &str = "-- edgelock extend v2
local f = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
if f < tonumber(ARGV[3]) then
  f = tonumber(ARGV[3])
  redis.call('SET', KEYS[2], ARGV[3])
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, f}
end
return {0, f}";

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
pub const RELEASE: &str = "-- edgelock release v3
local f = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
if f < tonumber(ARGV[2]) then redis.call('SET', KEYS[2], ARGV[2]) end
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
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
pub const ACQUIRE_QUEUED: &str = "-- edgelock queued acquire v2
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local head = redis.call('LINDEX', KEYS[3], 0)
while head do
  if tonumber(redis.call('ZSCORE', KEYS[4], head) or '0') > now then break end
  redis.call('LPOP', KEYS[3])
  redis.call('ZREM', KEYS[4], head)
  head = redis.call('LINDEX', KEYS[3], 0)
end
if (ARGV[5] ~= '1' or not head or head == ARGV[3]) and redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if redis.call('ZREM', KEYS[4], ARGV[3]) == 1 then redis.call('LREM', KEYS[3], 1, ARGV[3]) end
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
local wait = redis.call('PTTL', KEYS[1])
if wait == -2 and head and head ~= ARGV[3] then
  wait = math.max(0, tonumber(redis.call('ZSCORE', KEYS[4], head) or '0') - now)
end
return {0, f, wait}";

/// A queued waiter gives up: it leaves the queue (`ARGV[1]` its id) and, if
/// the lock is free, wakes the new head (`ARGV[2]` the wake-up channel).
pub const LEAVE: &str = "-- edgelock leave v1
redis.call('LREM', KEYS[3], 0, ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 0 then
  local head = redis.call('LINDEX', KEYS[3], 0)
  if head then
    local f = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
    redis.call('PUBLISH', ARGV[2], 'released:' .. f .. ':' .. head)
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
}

impl Script {
    /// Every script.
    pub const ALL: [Script; 6] = [Script::Acquire, Script::Extend, Script::Release, Script::Status, Script::AcquireQueued, Script::Leave];

    /// The Lua source sent with `EVAL`.
    pub fn text(self) -> &'static str {
        match self {
            Script::Acquire => ACQUIRE,
            Script::Extend => EXTEND,
            Script::Release => RELEASE,
            Script::Status => STATUS,
            Script::AcquireQueued => ACQUIRE_QUEUED,
            Script::Leave => LEAVE,
        }
    }

    /// The script whose source is exactly `text`, if any.
    pub fn from_text(text: &[u8]) -> Option<Script> {
        Script::ALL.into_iter().find(|s| s.text().as_bytes() == text)
    }

    /// The SHA-1 of the source, as `EVALSHA` names it (lowercase hex).
    pub fn sha1(self) -> String {
        sha1_smol::Sha1::from(self.text()).digest().to_string()
    }

    /// The script whose SHA-1 is `sha` (any case), if any.
    pub fn from_sha1(sha: &[u8]) -> Option<Script> {
        Script::ALL.into_iter().find(|s| s.sha1().as_bytes().eq_ignore_ascii_case(sha))
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
    RedisCommand::new("EVAL").arg(script.text()).arg("2").arg(key).arg(fence_key)
}

/// `EVAL` of [`ACQUIRE`]: take `key` for owner `token` for `ttl_ms` if it
/// is free; `count_every_attempt` for Redlock (see [`ACQUIRE`]).
pub fn acquire(key: &str, fence_key: &str, token: &str, ttl_ms: u64, count_every_attempt: bool) -> RedisCommand {
    let every = if count_every_attempt { "1" } else { "0" };
    eval(Script::Acquire, key, fence_key).arg(token).arg(ttl_ms.to_string()).arg(every)
}

/// `EVAL` of [`EXTEND`]: set `key`'s TTL to `ttl_ms` if it holds `token`,
/// raising the fencing counter to at least `fence_floor`.
pub fn extend(key: &str, fence_key: &str, token: &str, ttl_ms: u64, fence_floor: u64) -> RedisCommand {
    eval(Script::Extend, key, fence_key).arg(token).arg(ttl_ms.to_string()).arg(fence_floor.to_string())
}

/// The four keys of a script that knows the waiters' queue.
fn eval_queue(script: Script, key: &str, fence_key: &str) -> RedisCommand {
    RedisCommand::new("EVAL")
        .arg(script.text())
        .arg("4")
        .arg(key)
        .arg(fence_key)
        .arg(super::keys::queue_key(key))
        .arg(super::keys::leases_key(key))
}

/// `EVAL` of [`RELEASE`]: delete `key` if it holds `token`, raising the
/// fencing counter to at least `fence_floor` and waking `key`'s waiters.
pub fn release(key: &str, fence_key: &str, token: &str, fence_floor: u64) -> RedisCommand {
    let channel = super::subscription::wake_channel(key);
    eval_queue(Script::Release, key, fence_key).arg(token).arg(fence_floor.to_string()).arg(channel)
}

/// `EVAL` of [`ACQUIRE_QUEUED`] for waiter `waiter` (queueing with a lease
/// of `lease_ms`, 0 for a try); `fair`: only the queue's head may take it.
pub fn acquire_queued(key: &str, fence_key: &str, token: &str, ttl_ms: u64, waiter: &str, lease_ms: u64, fair: bool) -> RedisCommand {
    eval_queue(Script::AcquireQueued, key, fence_key)
        .arg(token)
        .arg(ttl_ms.to_string())
        .arg(waiter)
        .arg(lease_ms.to_string())
        .arg(if fair { "1" } else { "0" })
}

/// `EVAL` of [`LEAVE`]: waiter `waiter` leaves `key`'s queue.
pub fn leave(key: &str, fence_key: &str, waiter: &str) -> RedisCommand {
    eval_queue(Script::Leave, key, fence_key).arg(waiter).arg(super::subscription::wake_channel(key))
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
        Some([1, fence, _]) => Ok(AcquireReply::Granted { fence: counter(*fence)? }),
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
        let cmd = acquire("k", "k:fence", "ab", 100, true);
        assert_eq!(Script::from_text(&cmd.args[1]), Some(Script::Acquire));
        assert_eq!(cmd.args[2..], [b"2".to_vec(), b"k".to_vec(), b"k:fence".to_vec(), b"ab".to_vec(), b"100".to_vec(), b"1".to_vec()]);
    }

    #[test]
    fn evalsha_names_the_script_by_its_sha1() {
        // The SHA-1 of "return 1" as Redis computes it (SCRIPT LOAD).
        assert_eq!(sha1_smol::Sha1::from("return 1").digest().to_string(), "e0e1f9fabfc9d4800c877a703b823ac0578ff8db");
        let cmd = release("k", "k:fence", "ab", 3);
        let sha = as_evalsha(&cmd, Script::Release);
        assert_eq!(sha.name(), b"EVALSHA");
        assert_eq!(sha.args[1], Script::Release.sha1().into_bytes());
        assert_eq!(sha.args[2..], cmd.args[2..]);
        assert_eq!(Script::of_command(&sha), Some(Script::Release));
        assert_eq!(Script::of_command(&cmd), Some(Script::Release));
        assert_eq!(Script::of_command(&RedisCommand::new("GET").arg("x")), None);
        assert!(is_noscript(&RedisValue::Error("NOSCRIPT No matching script. Please use EVAL.".into())));
        assert!(!is_noscript(&RedisValue::Error("ERR x".into())));
        for (i, s) in Script::ALL.into_iter().enumerate() {
            assert_eq!(s.index(), i);
        }
    }

    #[test]
    fn parses_replies() {
        assert_eq!(parse_acquire(&ints(&[1, 7, 0])), Ok(AcquireReply::Granted { fence: 7 }));
        assert_eq!(parse_acquire(&ints(&[0, 7, 900])), Ok(AcquireReply::Held { fence: 7, pttl: Some(900) }));
        assert_eq!(parse_acquire(&ints(&[0, 7, -1])), Ok(AcquireReply::Held { fence: 7, pttl: None }));
        assert_eq!(parse_acquire(&ints(&[0, 7, -2])), Ok(AcquireReply::Held { fence: 7, pttl: Some(0) }));
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
            Ok(StatusReply { exists: true, mine: true, pttl: Some(50), fence: 3 })
        );
        assert_eq!(
            parse_status(&ints(&[0, 0, -2, 3])),
            Ok(StatusReply { exists: false, mine: false, pttl: None, fence: 3 })
        );
        assert!(parse_status(&ints(&[1, 1, 50])).is_err());
    }
}
