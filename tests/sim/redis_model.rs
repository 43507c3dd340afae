//! An in-memory Redis node speaking either HTTP protocol edgelock uses:
//! the Upstash REST protocol or Webdis 0.1.9's, each implemented here from
//! the protocol's own rules (not with edgelock's codecs), so that an encoding
//! mistake in the client shows up as a wrong key or a refused request.
//!
//! - Keys expire by the node's **own** clock ([`NodeClock`]: offset, rate
//!   error in ppm, and jumps at given global instants), like Redis, which
//!   stores an absolute expiry time and compares it with its wall clock.
//! - `EVAL` runs edgelock's Lua scripts atomically (the lock's, the
//!   semaphore's permit acquire, cleanup and the inspect script, and the
//!   read-write lock's reader scripts; a reader set is kept as members with
//!   their lease ends on the node's clock, the writer intent as a key). The model does not
//!   interpret Lua: it recognises each script by a hash of its text and
//!   applies that script's semantics natively (an unknown script is an
//!   error, so a changed script cannot go unnoticed). Plain GET, SET (with NX
//!   and PX), DEL, INCR and PTTL are there for tests.
//! - `crash_restart` loses everything (Redis without persistence); the clock
//!   keeps running.
//! - Every grant, raise and restart is logged with the global time and the
//!   client, for the simulation's fencing and validity checks.
//! - Pub/sub: a subscription request opens a stream (see "Pub/sub" below);
//!   the release script's `PUBLISH` (and a plain `PUBLISH`) delivers the
//!   message on every open subscription of the channel on this node, as the
//!   stream's next chunk. A restart ends every subscription (the world
//!   breaks the streams when the node goes down).
//!
//! Webdis details reproduced (Debian's 0.1.9, checked with curl): the command
//! is the POST body `NAME/arg/...`; a `?` ends it (query string); a `.ext`
//! suffix on the last segment selects an output format (`.json` is stripped,
//! other known formats are refused here: edgelock never asks for them);
//! arguments are split on `/` first, then `%XX` and `+` (space) are decoded;
//! replies are `{"NAME": value}`, statuses `[true,"OK"]`, errors
//! `[false,"ERR ..."]`, a non-UTF-8 string makes the reply `{}` and is dropped
//! from arrays, a NUL truncates a string, a nested array becomes `null`.
//!
//! Pub/sub, as the real servers frame it:
//! - Upstash REST (framed like the local gateway, tools/devtools/src/gateway/
//!   subscribe.rs, which `@upstash/redis` reads): authorization first (401),
//!   then `GET|POST /subscribe/<channel>[/<channel>...]` (segments
//!   percent-decoded, body ignored; no channel: 400) answers a 200 event
//!   stream: `data: subscribe,<channel>,<count>` per channel, then
//!   `data: message,<channel>,<payload>` per publish, each event followed by
//!   a blank line (a line break in a field starts a new `data: ` line).
//! - Webdis 0.1.9: the command comes from the URL path of a GET (the POST
//!   body otherwise, as above); `SUBSCRIBE/<channel>[/...]` (name in any
//!   case, at least one channel) answers a 200 chunked stream of
//!   `{"<name as sent>":["subscribe","<channel>",<count>]}` and then
//!   `{"<name>":["message","<channel>","<payload>"]}`, not separated (the
//!   strings as jansson sees them: cut at NUL, dropped unless UTF-8).
//! - `PSUBSCRIBE` is not modelled (edgelock never sends it): 501.

#![allow(dead_code)]

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};

use base64::Engine;
use edgelock::core::{HttpRequest, Method, Millis, RequestId};
use edgelock::internals::redis::scripts::{Script, SET_KEYS_PER_NAME};
use serde_json::{json, Value};

use super::net::{Reply, SimServer, CLIENT_HEADER};

#[path = "redis_resp.rs"]
mod resp;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    Upstash,
    Webdis,
    /// Redis' own protocol on byte streams (tests/sim/redis_resp.rs); HTTP
    /// requests are refused. `token` is then the `requirepass` password.
    Resp,
}

/// A node's wall clock as a function of the world's global time.
#[derive(Clone, Debug, Default)]
pub struct NodeClock {
    pub offset: u64,
    /// Rate error in parts per million (> -100_000).
    pub ppm: i64,
    /// (global instant, ms added to the clock from then on; negative = back).
    pub jumps: Vec<(Millis, i64)>,
}

impl NodeClock {
    fn base(&self, g: Millis) -> i128 {
        self.offset as i128 + g as i128 + (g as i128 * self.ppm as i128) / 1_000_000
    }

    fn jumped(&self, g: Millis) -> i128 {
        self.jumps
            .iter()
            .filter(|(at, _)| *at <= g)
            .map(|(_, d)| *d as i128)
            .sum()
    }

    pub fn local(&self, g: Millis) -> u64 {
        (self.base(g) + self.jumped(g)).max(0) as u64
    }

    /// The first global instant ≥ `from` at which the clock reads ≥ `local`
    /// (`None` if never before `from + horizon`).
    pub fn to_global(&self, local: u64, from: Millis) -> Option<Millis> {
        if self.local(from) >= local {
            return Some(from);
        }
        // Piecewise: between jumps the clock is increasing.
        let mut cuts: Vec<Millis> = self
            .jumps
            .iter()
            .map(|(a, _)| *a)
            .filter(|a| *a > from)
            .collect();
        cuts.sort_unstable();
        let horizon = from + 1_000_000_000;
        let mut start = from;
        for end in cuts.into_iter().chain(std::iter::once(horizon)) {
            // Search [start, end) for the first g with local(g) >= local.
            if end > start && self.local(end - 1) >= local {
                let (mut lo, mut hi) = (start, end - 1);
                while lo < hi {
                    let mid = lo + (hi - lo) / 2;
                    if self.local(mid) >= local {
                        hi = mid;
                    } else {
                        lo = mid + 1;
                    }
                }
                return Some(lo);
            }
            start = end;
        }
        None
    }
}

#[derive(Clone, Debug)]
pub struct Entry {
    pub value: Vec<u8>,
    /// Absolute expiry on the node's clock.
    pub expires_local: Option<u64>,
    /// The first global instant at which the node's clock reaches it.
    pub expires_global: Option<Millis>,
}

/// What the checks need to know about script runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rec {
    /// The acquire script's SET took the key for `owner`; `fence` = counter
    /// after INCR. A reader's grant names the readers' set as `key`.
    Granted {
        key: Vec<u8>,
        owner: Vec<u8>,
        client: Option<usize>,
        t: Millis,
        fence: u64,
    },
    /// An extend (`renew`) or release script raised the counter to ≥
    /// `floor` and found the key holding `owner` (`ours`), or not.
    Raised {
        key: Vec<u8>,
        owner: Vec<u8>,
        client: Option<usize>,
        t: Millis,
        floor: u64,
        ours: bool,
        renew: bool,
    },
}

#[derive(Clone, Debug)]
enum MValue {
    Nil,
    Int(i64),
    Bulk(Vec<u8>),
    Status(String),
    Arr(Vec<MValue>),
    Err(String),
}

/// An election's leader record (`election::RECORD`): owner token,
/// fencing token, value as stored (`=` + the value).
type LeaderRecord = (Vec<u8>, Vec<u8>, Vec<u8>);

/// One open subscription (a streaming response).
#[derive(Clone, Debug)]
struct Subscription {
    /// Webdis: the command name as the client wrote it (the JSON key).
    webdis_verb: Option<String>,
    channels: Vec<Vec<u8>>,
}

pub struct RedisModel {
    pub proto: Proto,
    /// Upstash bearer token required (None: no auth).
    pub token: Option<String>,
    pub clock: NodeClock,
    data: HashMap<Vec<u8>, Entry>,
    /// The waiters' queue under its queue key (`KEYS[3]` of the queued
    /// scripts and the release; the leases, `KEYS[4]`, are kept beside each
    /// waiter), in arrival order: waiter id and lease end on the node's clock.
    queues: HashMap<Vec<u8>, Vec<(Vec<u8>, u64)>>,
    /// Read-write locks' readers under their set's key: owner token and
    /// lease end on the node's clock (the scripts' `TIME`-scored sorted set).
    readers: HashMap<Vec<u8>, Vec<(Vec<u8>, u64)>>,
    /// Elections' leader records (the hash `<lock key>:leader`): owner
    /// token, fencing token, value as stored (`=` + the value).
    records: HashMap<Vec<u8>, LeaderRecord>,
    pub log: Vec<Rec>,
    pub restarts: Vec<Millis>,
    /// HTTP requests answered.
    pub requests: u64,
    scripts: HashMap<u64, Script>,
    /// Scripts in this node's script cache (`EVAL` adds, a restart empties it).
    cached: std::collections::HashSet<Script>,
    /// The latest global instant the model has seen (expiry searches start there).
    last_seen: Millis,
    /// Open subscriptions by wire id (ordered: deliveries are deterministic).
    subs: BTreeMap<u64, Subscription>,
    /// Stream bytes not yet handed to the world.
    out: Vec<(RequestId, Vec<u8>)>,
    /// Byte-stream connections (`Proto::Resp`) by wire id: authentication
    /// and subscribed channels.
    resp_conns: BTreeMap<u64, resp::RespConn>,
    /// Subscription streams opened (confirmed) so far.
    pub subscriptions: u64,
    /// PUBLISHes run (by the release script or directly).
    pub publishes: u64,
    /// Messages queued on subscription streams.
    pub deliveries: u64,
    /// Of those, `released:0`: what an acquire attempt's cleanup (an
    /// owner-checked delete of its own key, fencing floor 0) publishes.
    pub cleanup_deliveries: u64,
    /// Runs of the acquire script (attempts reaching this node).
    pub acquire_evals: u64,
    /// Runs of the set script (`ACQUIRE_SET`), and those that took their set.
    pub set_evals: u64,
    pub set_grants: u64,
}

fn text_hash(b: &[u8]) -> u64 {
    let mut h = DefaultHasher::new();
    b.hash(&mut h);
    h.finish()
}

fn err(m: &str) -> MValue {
    MValue::Err(m.to_string())
}

fn parse_u64(b: &[u8]) -> Option<u64> {
    std::str::from_utf8(b).ok()?.parse().ok()
}

/// How many keys an edgelock script call names, if right for the script:
/// the lock and its fencing counter; with the waiters' queue and its leases
/// (release, the queued acquire, leave); the permit acquire's counter,
/// limit record, queue, leases and at least one slot; the cleanup's slots;
/// inspect's lock key, counter, limit record, readers and any slots; the
/// writer's acquire scripts also name the readers and the writer intent.
fn script_keys(s: Script, numkeys: &[u8], rest: &[Vec<u8>]) -> Option<usize> {
    let ok = |n: usize| match s {
        Script::Status | Script::ExtendShared | Script::StatusShared => n == 2,
        // v3: also the hold count, renewed with the lock.
        Script::Extend => n == 3,
        Script::AcquireShared => n == 4,
        // v4: also the waiters' queue, its leases and the bypass record.
        Script::Acquire => n == 7,
        // v4: also the hold count (reentrant holds).
        Script::Release => n == 5,
        Script::Reenter => n == 2,
        Script::ReleaseShared => n == 5,
        // v3: also the bypass record.
        Script::Leave => n == 6,
        // v4: also the bypass record.
        Script::AcquireQueued => n == 7,
        Script::AcquirePermit => n >= 5,
        Script::PermitCleanup => n >= 1,
        Script::Inspect => n >= 4,
        Script::LeaderRecord | Script::Leader => n == 2,
        Script::AcquireSet => n >= SET_KEYS_PER_NAME && n % SET_KEYS_PER_NAME == 0,
    };
    parse_u64(numkeys)
        .map(|n| n as usize)
        .filter(|n| ok(*n) && rest.len() >= *n)
}

/// The members of a set of holds as the model stores it (newline-separated).
fn set_members(v: &[u8]) -> Vec<Vec<u8>> {
    v.split(|b| *b == b'\n').map(<[u8]>::to_vec).collect()
}

fn parse_i64(b: &[u8]) -> Option<i64> {
    std::str::from_utf8(b).ok()?.parse().ok()
}

impl RedisModel {
    pub fn new(proto: Proto, token: Option<String>, clock: NodeClock) -> Self {
        let scripts = Script::ALL
            .iter()
            .map(|s| (text_hash(s.text().as_bytes()), *s))
            .collect();
        RedisModel {
            proto,
            token,
            clock,
            data: HashMap::new(),
            queues: HashMap::new(),
            readers: HashMap::new(),
            records: HashMap::new(),
            log: Vec::new(),
            restarts: Vec::new(),
            requests: 0,
            scripts,
            cached: Default::default(),
            last_seen: 0,
            subs: BTreeMap::new(),
            out: Vec::new(),
            resp_conns: BTreeMap::new(),
            subscriptions: 0,
            publishes: 0,
            deliveries: 0,
            cleanup_deliveries: 0,
            acquire_evals: 0,
            set_evals: 0,
            set_grants: 0,
        }
    }

    // ------------------------------------------------------------ elections

    /// `election::RECORD` and `election::LEADER` (see their Lua).
    fn election_script(
        &mut self,
        s: Script,
        keys: &[Vec<u8>],
        argv: &[Vec<u8>],
        g: Millis,
    ) -> MValue {
        let (Some(key), Some(rec)) = (keys.first(), keys.get(1)) else {
            return err("ERR bad election keys");
        };
        let holder = self.get(key, g);
        match s {
            Script::LeaderRecord => {
                let [owner, fence, value, channel] = argv else {
                    return err("ERR bad record arguments");
                };
                if holder.as_deref() != Some(owner.as_slice()) {
                    return MValue::Int(0);
                }
                self.records
                    .insert(rec.clone(), (owner.clone(), fence.clone(), value.clone()));
                let payload = [b"leader:".as_slice(), fence].concat();
                self.publish(channel, &payload);
                MValue::Int(1)
            }
            _ => {
                let pttl = self.pttl_int(key, g);
                match (holder, self.records.get(rec)) {
                    (Some(o), Some((owner, fence, value))) if o == *owner => MValue::Arr(vec![
                        MValue::Int(1),
                        MValue::Int(parse_i64(fence).unwrap_or(-1)),
                        MValue::Int(pttl),
                        MValue::Bulk(value.clone()),
                    ]),
                    _ => MValue::Arr(vec![MValue::Int(0), MValue::Int(0), MValue::Int(pttl)]),
                }
            }
        }
    }

    // ------------------------------------------------------------ the store

    /// Whether this node knows hold `hold` of `owner`'s lock: a member of
    /// the owner's set of holds at `holds_key`, or without such a set the
    /// outer hold `+` (EXTEND v4, RELEASE v5).
    fn knows_hold(
        &self,
        holds_key: Option<&Vec<u8>>,
        owner: &[u8],
        hold: &[u8],
        g: Millis,
    ) -> bool {
        let mark = [b"=".as_slice(), owner].concat();
        match holds_key
            .and_then(|k| self.alive(k, g))
            .map(|e| set_members(&e.value))
        {
            Some(members) if members.contains(&mark) => members.iter().any(|m| m == hold),
            _ => hold == b"+",
        }
    }

    fn now_local(&self, g: Millis) -> u64 {
        self.clock.local(g)
    }

    fn alive(&self, key: &[u8], g: Millis) -> Option<&Entry> {
        self.data
            .get(key)
            .filter(|e| e.expires_global.map_or(true, |x| x > g))
    }

    fn purge(&mut self, g: Millis) {
        self.data
            .retain(|_, e| e.expires_global.map_or(true, |x| x > g));
    }

    fn entry(&self, value: Vec<u8>, px: Option<u64>, g: Millis) -> Entry {
        let expires_local = px.map(|p| self.now_local(g) + p);
        let expires_global =
            expires_local.map(|x| self.clock.to_global(x, g).unwrap_or(Millis::MAX));
        Entry {
            value,
            expires_local,
            expires_global,
        }
    }

    pub fn get(&self, key: &[u8], g: Millis) -> Option<Vec<u8>> {
        self.alive(key, g).map(|e| e.value.clone())
    }

    /// Remaining ms on the node's clock (None: absent; Some(None): no expiry).
    pub fn pttl(&self, key: &[u8], g: Millis) -> Option<Option<u64>> {
        let l = self.now_local(g);
        self.alive(key, g)
            .map(|e| e.expires_local.map(|x| x.saturating_sub(l)))
    }

    /// The global instant at which `key` expires (None: absent or never).
    pub fn expires_global(&self, key: &[u8], g: Millis) -> Option<Millis> {
        self.alive(key, g)?.expires_global
    }

    /// Live keys (for leak checks), with their values.
    pub fn keys(&self, g: Millis) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut v: Vec<_> = self
            .data
            .keys()
            .filter(|k| self.alive(k, g).is_some())
            .map(|k| (k.clone(), self.data[k].value.clone()))
            .collect();
        let now = self.now_local(g);
        v.extend(
            self.readers
                .iter()
                .filter(|(_, m)| m.iter().any(|(_, end)| *end > now))
                .map(|(k, _)| (k.clone(), b"<readers>".to_vec())),
        );
        v.sort();
        v
    }

    fn set(&mut self, key: &[u8], value: Vec<u8>, px: Option<u64>, g: Millis) {
        let e = self.entry(value, px, g);
        self.data.insert(key.to_vec(), e);
    }

    fn incr(&mut self, key: &[u8], g: Millis) -> Result<i64, MValue> {
        let cur = match self.get(key, g) {
            None => 0,
            Some(v) => {
                parse_i64(&v).ok_or_else(|| err("ERR value is not an integer or out of range"))?
            }
        };
        let next = cur
            .checked_add(1)
            .ok_or_else(|| err("ERR increment or decrement would overflow"))?;
        let value = next.to_string().into_bytes();
        match self.data.get_mut(key) {
            Some(e) => e.value = value,
            None => self.set(key, value, None, g),
        }
        Ok(next)
    }

    /// `local f = tonumber(GET fence) or 0; if f < floor then SET fence floor`.
    fn raise(&mut self, fence: &[u8], floor: u64, g: Millis) {
        let f = self.get(fence, g).and_then(|v| parse_u64(&v)).unwrap_or(0);
        if f < floor {
            self.set(fence, floor.to_string().into_bytes(), None, g);
        }
    }

    /// Drops the queue's dead heads (lease over on the node's clock) and
    /// returns the live head, as the queued acquire script does; a queue
    /// whose every lease is over is gone (its keys' PEXPIRE).
    fn prune_dead_heads(&mut self, key: &[u8], g: Millis) -> Option<Vec<u8>> {
        let now = self.now_local(g);
        let q = self.queues.get_mut(key)?;
        if q.iter().all(|(_, until)| *until <= now) {
            self.queues.remove(key);
            return None;
        }
        while q.first().is_some_and(|(_, until)| *until <= now) {
            q.remove(0);
        }
        q.first().map(|(w, _)| w.clone())
    }

    /// The release script's view: the head if its lease is live (nothing is dropped).
    fn live_head(&self, key: &[u8], g: Millis) -> Option<Vec<u8>> {
        let now = self.now_local(g);
        self.queues
            .get(key)?
            .first()
            .filter(|(_, until)| *until > now)
            .map(|(w, _)| w.clone())
    }

    fn lease_of(&self, key: &[u8], waiter: &[u8]) -> Option<u64> {
        self.queues
            .get(key)?
            .iter()
            .find(|(w, _)| w == waiter)
            .map(|(_, u)| *u)
    }

    fn leave_queue(&mut self, key: &[u8], waiter: &[u8]) {
        if let Some(q) = self.queues.get_mut(key) {
            q.retain(|(w, _)| w != waiter);
            if q.is_empty() {
                self.queues.remove(key);
            }
        }
    }

    /// Whether a key of any kind exists: a string (lock, intent, limit,
    /// slot, holds), a live waiters' queue (its leases live beside it), live
    /// readers.
    fn exists_any(&self, key: &[u8], g: Millis) -> bool {
        let now = self.now_local(g);
        self.alive(key, g).is_some()
            || self
                .queues
                .get(key)
                .is_some_and(|q| q.iter().any(|(_, until)| *until > now))
            || self
                .readers
                .get(key)
                .is_some_and(|r| r.iter().any(|(_, end)| *end > now))
    }

    /// `ACQUIRE_SET`: every name free (no key of its ten but the counter,
    /// nor a permit slot below a stored limit) → each taken as the acquire
    /// script takes one, `{1, counters...}`; else `{0}`, nothing written.
    fn acquire_set(
        &mut self,
        keys: &[Vec<u8>],
        argv: &[Vec<u8>],
        client: Option<usize>,
        g: Millis,
    ) -> MValue {
        self.set_evals += 1;
        let n = keys.len() / SET_KEYS_PER_NAME;
        if argv.len() != n + 1 {
            return err("ERR bad acquire set arguments");
        }
        let Some(ttl) = argv.first().and_then(|a| parse_u64(a)).filter(|t| *t > 0) else {
            return err("ERR invalid expire time in 'set' command");
        };
        for i in 0..n {
            let k = &keys[i * SET_KEYS_PER_NAME..(i + 1) * SET_KEYS_PER_NAME];
            self.prune_readers(&k[2], g);
            for (j, key) in k.iter().enumerate() {
                if j == 1 || !self.exists_any(key, g) {
                    continue;
                }
                if j != 6 {
                    return MValue::Arr(vec![MValue::Int(0)]);
                }
                let limit = self.get(key, g).and_then(|v| parse_i64(&v)).unwrap_or(0);
                for s in 0..limit.max(0) {
                    let slot = [k[0].as_slice(), format!(":permit:{s}").as_bytes()].concat();
                    if self.exists_any(&slot, g) {
                        return MValue::Arr(vec![MValue::Int(0)]);
                    }
                }
            }
        }
        let mut out = vec![MValue::Int(1)];
        for i in 0..n {
            let (key, fence) = (
                &keys[i * SET_KEYS_PER_NAME],
                &keys[i * SET_KEYS_PER_NAME + 1],
            );
            let token = argv[1 + i].clone();
            self.set(key, token.clone(), Some(ttl), g);
            let f = match self.incr(fence, g) {
                Ok(f) => f,
                Err(e) => return e,
            };
            self.log.push(Rec::Granted {
                key: key.to_vec(),
                owner: token,
                client,
                t: g,
                fence: f as u64,
            });
            out.push(MValue::Int(f));
        }
        self.set_grants += 1;
        MValue::Arr(out)
    }

    /// `ZREMRANGEBYSCORE readers -inf now`; the live readers' last lease end.
    fn prune_readers(&mut self, key: &[u8], g: Millis) -> Option<u64> {
        let now = self.now_local(g);
        let r = self.readers.get_mut(key)?;
        r.retain(|(_, end)| *end > now);
        if r.is_empty() {
            self.readers.remove(key);
            return None;
        }
        r.iter().map(|(_, end)| *end).max()
    }

    /// The global instant at which reader `owner` of `key` leaves (None: not a live reader).
    pub fn reader_expires_global(&self, key: &[u8], owner: &[u8], g: Millis) -> Option<Millis> {
        let now = self.now_local(g);
        let end = self
            .readers
            .get(key)?
            .iter()
            .find(|(m, end)| m == owner && *end > now)?
            .1;
        Some(self.clock.to_global(end, g).unwrap_or(Millis::MAX))
    }

    /// Live readers of `key`.
    pub fn reader_count(&self, key: &[u8], g: Millis) -> usize {
        let now = self.now_local(g);
        self.readers
            .get(key)
            .map_or(0, |r| r.iter().filter(|(_, end)| *end > now).count())
    }

    /// The wait a refused writer is told while readers hold: ms until the last lease ends.
    fn readers_wait(&self, last: Option<u64>, g: Millis) -> i64 {
        last.map_or(-2, |end| end.saturating_sub(self.now_local(g)) as i64)
    }

    fn fence_value(&self, fence: &[u8], g: Millis) -> i64 {
        self.get(fence, g).and_then(|v| parse_i64(&v)).unwrap_or(0)
    }

    fn pttl_int(&self, key: &[u8], g: Millis) -> i64 {
        match self.pttl(key, g) {
            None => -2,
            Some(None) => -1,
            Some(Some(p)) => p as i64,
        }
    }

    // ------------------------------------------------------------ commands

    fn run(&mut self, args: &[Vec<u8>], client: Option<usize>, g: Millis) -> MValue {
        self.purge(g);
        let Some(name) = args.first() else {
            return err("ERR empty command");
        };
        let name = String::from_utf8_lossy(name).to_ascii_uppercase();
        let a = &args[1..];
        match (name.as_str(), a) {
            ("EVAL", [script, numkeys, rest @ ..]) => {
                let Some(&s) = self.scripts.get(&text_hash(script)) else {
                    return err(
                        "ERR the model knows only edgelock's scripts (unknown script text)",
                    );
                };
                let Some(nk) = script_keys(s, numkeys, rest) else {
                    return err("ERR wrong number of keys for this edgelock script");
                };
                self.cached.insert(s);
                self.eval(s, &rest[..nk], &rest[nk..], client, g)
            }
            ("EVALSHA", [sha, numkeys, rest @ ..]) => {
                let Some(s) = Script::from_sha1(sha).filter(|s| self.cached.contains(s)) else {
                    return err("NOSCRIPT No matching script. Please use EVAL.");
                };
                let Some(nk) = script_keys(s, numkeys, rest) else {
                    return err("ERR wrong number of keys for this edgelock script");
                };
                self.eval(s, &rest[..nk], &rest[nk..], client, g)
            }
            ("GET", [k]) => self.get(k, g).map_or(MValue::Nil, MValue::Bulk),
            ("PTTL", [k]) => MValue::Int(self.pttl_int(k, g)),
            ("DEL", keys) if !keys.is_empty() => MValue::Int(
                keys.iter()
                    .filter(|k| self.data.remove(k.as_slice()).is_some())
                    .count() as i64,
            ),
            ("INCR", [k]) => self.incr(k, g).map_or_else(|e| e, MValue::Int),
            ("PUBLISH", [channel, message]) => MValue::Int(self.publish(channel, message) as i64),
            ("SET", [k, v, opts @ ..]) => {
                let mut nx = false;
                let mut px = None;
                let mut i = 0;
                while i < opts.len() {
                    match String::from_utf8_lossy(&opts[i])
                        .to_ascii_uppercase()
                        .as_str()
                    {
                        "NX" => nx = true,
                        "PX" => {
                            i += 1;
                            px = match opts.get(i).and_then(|p| parse_u64(p)) {
                                Some(p) if p > 0 => Some(p),
                                _ => return err("ERR invalid expire time in 'set' command"),
                            };
                        }
                        _ => return err("ERR syntax error"),
                    }
                    i += 1;
                }
                if nx && self.alive(k, g).is_some() {
                    return MValue::Nil;
                }
                self.set(k, v.clone(), px, g);
                MValue::Status("OK".into())
            }
            _ => err(&format!(
                "ERR unknown command '{name}' or wrong number of arguments"
            )),
        }
    }

    fn eval(
        &mut self,
        s: Script,
        keys: &[Vec<u8>],
        argv: &[Vec<u8>],
        client: Option<usize>,
        g: Millis,
    ) -> MValue {
        let arg = |i: usize| argv.get(i).cloned().unwrap_or_default();
        let num = |i: usize| argv.get(i).and_then(|a| parse_u64(a));
        let empty = Vec::new();
        let (key, fence) = (
            keys.first().unwrap_or(&empty).as_slice(),
            keys.get(1).unwrap_or(&empty).as_slice(),
        );
        // The queue lives under its own key (a permit's release names its
        // semaphore's queue, not its slot's).
        let qkey = keys.get(2).unwrap_or(&empty).clone();
        match s {
            Script::AcquirePermit => return self.acquire_permit(keys, argv, client, g),
            Script::AcquireSet => return self.acquire_set(keys, argv, client, g),
            Script::AcquireShared
            | Script::ExtendShared
            | Script::ReleaseShared
            | Script::StatusShared => return self.reader_script(s, keys, argv, client, g),
            Script::PermitCleanup => {
                let token = arg(0);
                let mut n = 0;
                for k in keys {
                    if self.get(k, g).as_deref() == Some(token.as_slice()) {
                        self.data.remove(k);
                        self.log.push(Rec::Raised {
                            key: k.clone(),
                            owner: token.clone(),
                            client,
                            t: g,
                            floor: 0,
                            ours: true,
                            renew: false,
                        });
                        n += 1;
                    }
                }
                return MValue::Int(n);
            }
            Script::LeaderRecord | Script::Leader => return self.election_script(s, keys, argv, g),
            Script::Inspect => {
                let limit = keys
                    .get(2)
                    .and_then(|k| self.get(k, g))
                    .and_then(|v| parse_i64(&v))
                    .unwrap_or(0);
                let rkey = keys.get(3).unwrap_or(&empty);
                let now = self.now_local(g);
                let live: Vec<u64> = self.readers.get(rkey).map_or(Vec::new(), |r| {
                    r.iter().map(|(_, e)| *e).filter(|e| *e > now).collect()
                });
                let mut out = vec![
                    MValue::Int(self.alive(key, g).is_some() as i64),
                    MValue::Int(self.pttl_int(key, g)),
                    MValue::Int(self.fence_value(fence, g)),
                    MValue::Int(limit),
                    MValue::Int(live.len() as i64),
                    MValue::Int(live.iter().max().map_or(-2, |e| (e - now) as i64)),
                ];
                out.extend(keys[4..].iter().map(|k| MValue::Int(self.pttl_int(k, g))));
                return MValue::Arr(out);
            }
            _ => {}
        }
        match s {
            Script::AcquirePermit
            | Script::AcquireSet
            | Script::PermitCleanup
            | Script::Inspect
            | Script::LeaderRecord
            | Script::Leader
            | Script::AcquireShared
            | Script::ExtendShared
            | Script::ReleaseShared
            | Script::StatusShared => err("ERR unreachable"),
            Script::Acquire => {
                self.acquire_evals += 1;
                let (Some(ttl), token) = (num(1), arg(0)) else {
                    return err("ERR bad acquire arguments");
                };
                if ttl == 0 {
                    return err("ERR invalid expire time in 'set' command");
                }
                // ARGV[3] == "1": count every attempt (Redlock), else grants only.
                let every = arg(2) == b"1";
                let (Some(rkey), Some(ikey), Some(intent)) = (keys.get(2), keys.get(3), num(3))
                else {
                    return err("ERR bad acquire arguments");
                };
                // Readers hold: refused (as if the key were there), the
                // wait being the last reader's lease end.
                let last_reader = self.prune_readers(rkey, g);
                // v4: a live queue head bypassed ARGV[5] times keeps the
                // free lock for itself.
                let (Some(q), Some(bkey), Some(limit)) = (keys.get(4), keys.get(6), num(4)) else {
                    return err("ERR bad acquire arguments");
                };
                let head = self.prune_dead_heads(q, g);
                let bypassed = head.as_ref().map_or(0, |h| self.bypasses(bkey, h, g));
                let free = self.alive(key, g).is_none()
                    && last_reader.is_none()
                    && (head.is_none() || bypassed < limit);
                let f = if every || free {
                    match self.incr(fence, g) {
                        Ok(f) => f,
                        Err(e) => return e,
                    }
                } else {
                    self.fence_value(fence, g)
                };
                if free {
                    self.set(key, token.clone(), Some(ttl), g);
                    self.data.remove(ikey.as_slice());
                    match &head {
                        Some(h) => self.record_bypass(q, bkey, h, bypassed + 1, g),
                        None => {
                            self.data.remove(bkey.as_slice());
                        }
                    }
                    self.log.push(Rec::Granted {
                        key: key.to_vec(),
                        owner: token,
                        client,
                        t: g,
                        fence: f as u64,
                    });
                    MValue::Arr(vec![MValue::Int(1), MValue::Int(f), MValue::Int(0)])
                } else {
                    if intent > 0 {
                        self.set(ikey, b"1".to_vec(), Some(intent), g);
                    }
                    let mut wait = self.pttl_int(key, g);
                    if wait == -2 {
                        wait = self.readers_wait(last_reader, g);
                    }
                    if let (-2, Some(h)) = (wait, &head) {
                        let now = self.now_local(g);
                        wait = self
                            .lease_of(q, h)
                            .map_or(0, |u| u.saturating_sub(now) as i64);
                    }
                    MValue::Arr(vec![MValue::Int(0), MValue::Int(f), MValue::Int(wait)])
                }
            }
            Script::Extend => {
                let (Some(ttl), Some(floor), token) = (num(1), num(2), arg(0)) else {
                    return err("ERR bad extend arguments");
                };
                self.raise(fence, floor, g);
                let ours = self.get(key, g).as_deref() == Some(token.as_slice());
                // v4: only where this node knows the renewing hold (ARGV[4]).
                let known = self.knows_hold(keys.get(2), &token, &arg(3), g);
                self.log.push(Rec::Raised {
                    key: key.to_vec(),
                    owner: token,
                    client,
                    t: g,
                    floor,
                    ours,
                    renew: true,
                });
                let ours = ours && known;
                if ours {
                    // `PEXPIRE` of the lock and of its hold count (if any).
                    for k in std::iter::once(key).chain(keys.get(2).map(Vec::as_slice)) {
                        if let Some(e) = self.alive(k, g) {
                            let e = self.entry(e.value.clone(), Some(ttl), g);
                            self.data.insert(k.to_vec(), e);
                        }
                    }
                }
                MValue::Arr(vec![
                    MValue::Int(ours as i64),
                    MValue::Int(self.fence_value(fence, g)),
                ])
            }
            Script::Release => {
                let (Some(floor), token) = (num(1), arg(0)) else {
                    return err("ERR bad release arguments");
                };
                self.raise(fence, floor, g);
                let ours = self.get(key, g).as_deref() == Some(token.as_slice());
                self.log.push(Rec::Raised {
                    key: key.to_vec(),
                    owner: token,
                    client,
                    t: g,
                    floor,
                    ours,
                    renew: false,
                });
                if ours {
                    // v4: the releasing hold (ARGV[4]) leaves the owner's
                    // set of holds; while others remain: 2, the key stays
                    // and nobody is woken. Any other set goes with the key.
                    // v5: a hold the node does not know changes nothing (0).
                    if !self.knows_hold(keys.get(4), &arg(0), &arg(3), g) {
                        return MValue::Int(0);
                    }
                    if let Some(holds_key) = keys.get(4) {
                        if let Some(mut e) = self.alive(holds_key, g).cloned() {
                            let mut members = set_members(&e.value);
                            if members.contains(&[b"=".as_slice(), &arg(0)].concat()) {
                                members.retain(|m| *m != arg(3));
                                if members.len() > 1 {
                                    e.value = members.join(&b'\n');
                                    self.data.insert(holds_key.to_vec(), e);
                                    return MValue::Int(2);
                                }
                            }
                            self.data.remove(holds_key.as_slice());
                        }
                    }
                    self.data.remove(key);
                    // `redis.call('PUBLISH', ARGV[3], 'released:' .. ARGV[2])`:
                    // without ARGV[3] the call fails after the DEL (a Lua error
                    // does not undo what the script already did).
                    let Some(channel) = argv.get(2) else {
                        return err(
                            "ERR Lua redis lib command arguments must be strings or integers",
                        );
                    };
                    // An attempt's cleanup (floor 0) publishes nothing; a
                    // live queue head is named (only it attempts).
                    if arg(1) != b"0" {
                        let mut payload = [b"released:".as_slice(), &arg(1)].concat();
                        if let Some(head) = self.live_head(&qkey, g) {
                            payload.push(b':');
                            payload.extend_from_slice(&head);
                        }
                        self.publish(channel, &payload);
                    }
                }
                MValue::Int(ours as i64)
            }
            Script::Reenter => {
                let (token, hold) = (arg(0), arg(1));
                if self.get(key, g).as_deref() != Some(token.as_slice()) {
                    return MValue::Arr(vec![MValue::Int(0), MValue::Int(0), MValue::Int(0)]);
                }
                // KEYS[2] is the set of holds here (`fence` names the second
                // key), kept as newline-separated members.
                let mark = [b"=".as_slice(), &token].concat();
                let mut members = self.get(fence, g).map_or(Vec::new(), |v| set_members(&v));
                if !members.contains(&mark) {
                    members = vec![mark, b"+".to_vec()];
                }
                if !members.contains(&hold) {
                    members.push(hold);
                }
                let ttl = self.pttl_int(key, g);
                let n = members.len() as i64 - 1;
                self.set(fence, members.join(&b'\n'), Some(ttl.max(1) as u64), g);
                MValue::Arr(vec![MValue::Int(1), MValue::Int(n), MValue::Int(ttl)])
            }
            Script::AcquireQueued => {
                self.acquire_evals += 1;
                let (Some(ttl), Some(lease), token, waiter) = (num(1), num(3), arg(0), arg(2))
                else {
                    return err("ERR bad queued acquire arguments");
                };
                if ttl == 0 {
                    return err("ERR invalid expire time in 'set' command");
                }
                // v4: ARGV[5] is how often others may take the free lock
                // while a live waiter heads the queue (0: the fair lock).
                let (Some(rkey), Some(ikey), Some(intent), Some(bkey), Some(limit)) =
                    (keys.get(4), keys.get(5), num(5), keys.get(6), num(4))
                else {
                    return err("ERR bad queued acquire arguments");
                };
                let now = self.now_local(g);
                let head = self.prune_dead_heads(&qkey, g);
                let last_reader = self.prune_readers(rkey, g);
                let other = head.clone().filter(|h| *h != waiter);
                let bypassed = other.as_ref().map_or(0, |h| self.bypasses(bkey, h, g));
                let may = other.is_none() || bypassed < limit;
                if may && last_reader.is_none() && self.alive(key, g).is_none() {
                    let f = match self.incr(fence, g) {
                        Ok(f) => f,
                        Err(e) => return e,
                    };
                    self.set(key, token.clone(), Some(ttl), g);
                    self.data.remove(ikey.as_slice());
                    match &other {
                        Some(h) => self.record_bypass(&qkey, bkey, h, bypassed + 1, g),
                        None => {
                            self.data.remove(bkey.as_slice());
                        }
                    }
                    self.log.push(Rec::Granted {
                        key: key.to_vec(),
                        owner: token,
                        client,
                        t: g,
                        fence: f as u64,
                    });
                    self.leave_queue(&qkey, &waiter);
                    return MValue::Arr(vec![MValue::Int(1), MValue::Int(f), MValue::Int(0)]);
                }
                let f = self.fence_value(fence, g);
                let mut head = head;
                if lease > 0 {
                    head = self.join_queue(&qkey, &waiter, now + lease);
                }
                if intent > 0 {
                    self.set(ikey, b"1".to_vec(), Some(intent), g);
                }
                let mut wait = self.pttl_int(key, g);
                if wait == -2 {
                    wait = self.readers_wait(last_reader, g);
                }
                if wait == -2 {
                    if let Some((h, until)) = head
                        .filter(|h| *h != waiter)
                        .and_then(|h| self.lease_of(&qkey, &h).map(|u| (h, u)))
                    {
                        let _ = h;
                        wait = until.saturating_sub(now) as i64;
                    }
                }
                MValue::Arr(vec![MValue::Int(0), MValue::Int(f), MValue::Int(wait)])
            }
            Script::Leave => {
                let waiter = arg(0);
                // v3: a head that leaves deletes its bypass record.
                let head = self
                    .queues
                    .get(&qkey)
                    .and_then(|q| q.first())
                    .map(|(w, _)| w.clone());
                if head.as_ref() == Some(&waiter) {
                    if let Some(bkey) = keys.get(5) {
                        self.data.remove(bkey.as_slice());
                    }
                }
                self.leave_queue(&qkey, &waiter);
                // The writer intent goes with a waiter that gives up.
                let intent = keys.get(4).is_some_and(|k| {
                    self.data
                        .remove(k.as_slice())
                        .is_some_and(|e| e.expires_global.map_or(true, |x| x > g))
                });
                if self.alive(key, g).is_none() {
                    let f = self.fence_value(fence, g);
                    match (
                        self.queues
                            .get(&qkey)
                            .and_then(|q| q.first())
                            .map(|(w, _)| w.clone()),
                        argv.get(1),
                    ) {
                        (Some(head), Some(channel)) => {
                            let payload = format!("released:{f}:")
                                .into_bytes()
                                .into_iter()
                                .chain(head)
                                .collect::<Vec<u8>>();
                            self.publish(channel, &payload);
                        }
                        (None, Some(channel)) if intent => {
                            self.publish(channel, format!("released:{f}").as_bytes());
                        }
                        _ => {}
                    }
                }
                MValue::Int(1)
            }
            Script::Status => {
                let f = self.fence_value(fence, g);
                match self.get(key, g) {
                    None => MValue::Arr(vec![
                        MValue::Int(0),
                        MValue::Int(0),
                        MValue::Int(-2),
                        MValue::Int(f),
                    ]),
                    Some(v) => MValue::Arr(vec![
                        MValue::Int(1),
                        MValue::Int((v == arg(0)) as i64),
                        MValue::Int(self.pttl_int(key, g)),
                        MValue::Int(f),
                    ]),
                }
            }
        }
    }

    /// The read-write lock's reader scripts (see their documentation in `scripts.rs`).
    fn reader_script(
        &mut self,
        s: Script,
        keys: &[Vec<u8>],
        argv: &[Vec<u8>],
        client: Option<usize>,
        g: Millis,
    ) -> MValue {
        let arg = |i: usize| argv.get(i).cloned().unwrap_or_default();
        let num = |i: usize| argv.get(i).and_then(|a| parse_u64(a));
        let ints = |v: &[i64]| MValue::Arr(v.iter().map(|i| MValue::Int(*i)).collect());
        let now = self.now_local(g);
        match (s, keys) {
            (Script::AcquireShared, [key, fence, rkey, ikey]) => {
                self.acquire_evals += 1;
                let (token, Some(ttl)) = (arg(0), num(1)) else {
                    return err("ERR bad shared acquire arguments");
                };
                self.prune_readers(rkey, g);
                let mut wait = self.pttl_int(key, g);
                if wait == -2 {
                    wait = self.pttl_int(ikey, g);
                }
                if wait != -2 {
                    return ints(&[0, self.fence_value(fence, g), wait]);
                }
                let set = self.readers.entry(rkey.clone()).or_default();
                match set.iter_mut().find(|(m, _)| *m == token) {
                    Some(e) => e.1 = now + ttl,
                    None => set.push((token.clone(), now + ttl)),
                }
                let f = match self.incr(fence, g) {
                    Ok(f) => f,
                    Err(e) => return e,
                };
                self.log.push(Rec::Granted {
                    key: rkey.clone(),
                    owner: token,
                    client,
                    t: g,
                    fence: f as u64,
                });
                ints(&[1, f, 0])
            }
            (Script::ExtendShared, [rkey, fence]) => {
                let (token, Some(ttl), Some(floor)) = (arg(0), num(1), num(2)) else {
                    return err("ERR bad shared extend arguments");
                };
                self.raise(fence, floor, g);
                self.prune_readers(rkey, g);
                let entry = self
                    .readers
                    .get_mut(rkey)
                    .and_then(|r| r.iter_mut().find(|(m, _)| *m == token));
                let ours = entry.is_some();
                if let Some(e) = entry {
                    e.1 = now + ttl;
                }
                self.log.push(Rec::Raised {
                    key: rkey.clone(),
                    owner: token,
                    client,
                    t: g,
                    floor,
                    ours,
                    renew: true,
                });
                ints(&[ours as i64, self.fence_value(fence, g)])
            }
            (Script::ReleaseShared, [key, fence, qkey, _leases, rkey]) => {
                let (token, Some(floor)) = (arg(0), num(1)) else {
                    return err("ERR bad shared release arguments");
                };
                self.raise(fence, floor, g);
                self.prune_readers(rkey, g);
                let ours = self
                    .readers
                    .get(rkey)
                    .is_some_and(|r| r.iter().any(|(m, _)| *m == token));
                self.log.push(Rec::Raised {
                    key: rkey.clone(),
                    owner: token.clone(),
                    client,
                    t: g,
                    floor,
                    ours,
                    renew: false,
                });
                if !ours {
                    return MValue::Int(0);
                }
                if let Some(r) = self.readers.get_mut(rkey) {
                    r.retain(|(m, _)| *m != token);
                    if r.is_empty() {
                        self.readers.remove(rkey);
                    }
                }
                if self.readers.contains_key(rkey) || self.alive(key, g).is_some() {
                    return MValue::Int(1);
                }
                let Some(channel) = argv.get(2) else {
                    return err("ERR Lua redis lib command arguments must be strings or integers");
                };
                let mut payload = format!("released:{}", self.fence_value(fence, g)).into_bytes();
                if let Some(head) = self.live_head(qkey, g) {
                    payload.push(b':');
                    payload.extend_from_slice(&head);
                }
                self.publish(channel, &payload);
                MValue::Int(1)
            }
            (Script::StatusShared, [rkey, fence]) => {
                let f = self.fence_value(fence, g);
                let end = self
                    .readers
                    .get(rkey)
                    .and_then(|r| r.iter().find(|(m, _)| *m == arg(0)))
                    .map(|(_, e)| *e)
                    .filter(|e| *e > now);
                match end {
                    Some(e) => ints(&[1, 1, (e - now) as i64, f]),
                    None => ints(&[0, 0, -2, f]),
                }
            }
            _ => err("ERR wrong number of keys for this edgelock script"),
        }
    }

    /// How often the free lock went to others while `head` headed the
    /// queue: the bypass record `<head>:<n>` if it is `head`'s, else 0.
    fn bypasses(&self, bkey: &[u8], head: &[u8], g: Millis) -> u64 {
        let Some(v) = self.get(bkey, g) else { return 0 };
        let Some(colon) = v.iter().rposition(|b| *b == b':') else {
            return 0;
        };
        if &v[..colon] != head {
            return 0;
        }
        parse_u64(&v[colon + 1..]).unwrap_or(0)
    }

    /// Records `n` bypasses of `head`, for as long as its queue lease.
    fn record_bypass(&mut self, qkey: &[u8], bkey: &[u8], head: &[u8], n: u64, g: Millis) {
        let now = self.now_local(g);
        let left = self
            .lease_of(qkey, head)
            .map_or(0, |u| u.saturating_sub(now));
        let value = [head, b":", n.to_string().as_bytes()].concat();
        self.set(bkey, value, Some(left.max(1)), g);
    }

    /// Adds (or renews) `waiter` in the queue under `qkey` until `until`;
    /// returns the head.
    fn join_queue(&mut self, qkey: &[u8], waiter: &[u8], until: u64) -> Option<Vec<u8>> {
        let q = self.queues.entry(qkey.to_vec()).or_default();
        match q.iter_mut().find(|(w, _)| *w == waiter) {
            Some(entry) => entry.1 = until,
            None => q.push((waiter.to_vec(), until)),
        }
        q.first().map(|(w, _)| w.clone())
    }

    /// `ACQUIRE_PERMIT` (see its documentation in `scripts.rs`).
    fn acquire_permit(
        &mut self,
        keys: &[Vec<u8>],
        argv: &[Vec<u8>],
        client: Option<usize>,
        g: Millis,
    ) -> MValue {
        self.acquire_evals += 1;
        let arg = |i: usize| argv.get(i).cloned().unwrap_or_default();
        let num = |i: usize| argv.get(i).and_then(|a| parse_u64(a));
        let ints = |v: [i64; 6]| MValue::Arr(v.into_iter().map(MValue::Int).collect());
        let [fence, limit_key, qkey, _leases, slots @ ..] = keys else {
            return err("ERR permit keys");
        };
        let (token, Some(ttl), Some(limit), Some(pref), every, waiter, Some(lease)) = (
            arg(0),
            num(1),
            num(2),
            argv.get(3).and_then(|a| parse_i64(a)),
            arg(4) == b"1",
            arg(5),
            num(6),
        ) else {
            return err("ERR bad permit acquire arguments");
        };
        let limit = limit as usize;
        if ttl == 0 {
            return err("ERR invalid expire time in 'set' command");
        }
        if limit > slots.len() {
            // Lua: `redis.call('PTTL', nil)` fails.
            return err("ERR Lua redis lib command arguments must be strings or integers");
        }
        let stored = self
            .get(limit_key, g)
            .and_then(|v| parse_u64(&v))
            .unwrap_or(0) as usize;
        if stored != limit {
            if stored > slots.len() {
                return ints([3, 0, 0, -1, stored as i64, 0]);
            }
            if slots[..stored].iter().any(|k| self.alive(k, g).is_some()) {
                return ints([2, 0, 0, -1, stored as i64, 0]);
            }
            self.set(limit_key, limit.to_string().into_bytes(), None, g);
        }
        let mut f = 0;
        if every {
            f = match self.incr(fence, g) {
                Ok(f) => f,
                Err(e) => return e,
            };
        }
        let waiting = waiter != b"-";
        if waiting {
            self.prune_dead_heads(qkey, g);
        }
        let (mut slot, mut lo, mut hi, mut wait) = (-1i64, 0i64, 0i64, -1i64);
        for (i, k) in slots[..limit].iter().enumerate() {
            let p = self.pttl_int(k, g);
            if p == -2 {
                if slot < 0 && (pref < 0 || pref == i as i64) {
                    slot = i as i64;
                } else if i < 50 {
                    lo += 1 << i;
                } else {
                    hi += 1 << (i - 50);
                }
            } else if p >= 0 && (wait < 0 || p < wait) {
                wait = p;
            }
        }
        if slot >= 0 {
            let k = slots[slot as usize].clone();
            self.set(&k, token.clone(), Some(ttl), g);
            if !every {
                f = match self.incr(fence, g) {
                    Ok(f) => f,
                    Err(e) => return e,
                };
            }
            self.log.push(Rec::Granted {
                key: k,
                owner: token,
                client,
                t: g,
                fence: f as u64,
            });
            if waiting {
                self.leave_queue(qkey, &waiter);
            }
            return ints([1, f, 0, slot, lo, hi]);
        }
        if !every {
            f = self.fence_value(fence, g);
        }
        if waiting && lease > 0 {
            let now = self.now_local(g);
            self.join_queue(qkey, &waiter, now + lease);
        }
        if lo + hi > 0 {
            wait = 0;
        }
        ints([0, f, wait, -1, lo, hi])
    }

    // ------------------------------------------------------------ protocols

    fn header<'a>(req: &'a HttpRequest, name: &str) -> Option<&'a str> {
        req.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn upstash(&mut self, req: &HttpRequest, client: Option<usize>, g: Millis) -> Reply {
        let full = |status: u16, v: Value| Reply::Full {
            status,
            body: serde_json::to_vec(&v).unwrap_or_default(),
        };
        if let Some(t) = &self.token {
            if Self::header(req, "authorization") != Some(format!("Bearer {t}").as_str()) {
                return full(401, json!({"error": "Unauthorized"}));
            }
        }
        let b64 =
            Self::header(req, "upstash-encoding").is_some_and(|v| v.eq_ignore_ascii_case("base64"));
        let path = req
            .target
            .url()
            .unwrap_or("")
            .splitn(4, '/')
            .nth(3)
            .unwrap_or("");
        if let Some(reply) = self.upstash_subscribe(req, path) {
            return reply;
        }
        let Ok(body) = serde_json::from_slice::<Value>(&req.body) else {
            return full(400, json!({"error": "ERR failed to parse command"}));
        };
        let args_of = |v: &Value| -> Option<Vec<Vec<u8>>> {
            v.as_array()?
                .iter()
                .map(|a| match a {
                    Value::String(s) => Some(s.as_bytes().to_vec()),
                    Value::Number(n) => Some(n.to_string().into_bytes()),
                    _ => None,
                })
                .collect()
        };
        match path {
            "" => {
                let Some(args) = args_of(&body) else {
                    return full(400, json!({"error": "ERR failed to parse command"}));
                };
                match self.run(&args, client, g) {
                    MValue::Err(e) => full(400, json!({ "error": e })),
                    v => full(200, json!({ "result": upstash_json(&v, b64) })),
                }
            }
            "pipeline" => {
                let Some(cmds) = body
                    .as_array()
                    .and_then(|c| c.iter().map(args_of).collect::<Option<Vec<_>>>())
                else {
                    return full(
                        400,
                        json!({"error": "ERR failed to parse pipeline request"}),
                    );
                };
                let out: Vec<Value> = cmds
                    .iter()
                    .map(|c| match self.run(c, client, g) {
                        MValue::Err(e) => json!({ "error": e }),
                        v => json!({ "result": upstash_json(&v, b64) }),
                    })
                    .collect();
                full(200, Value::Array(out))
            }
            _ => full(404, json!({"error": "Not Found"})),
        }
    }

    fn webdis(&mut self, req: &HttpRequest, client: Option<usize>, g: Millis) -> Reply {
        let path = req
            .target
            .url()
            .unwrap_or("")
            .splitn(4, '/')
            .nth(3)
            .unwrap_or("");
        // A GET carries the command in its path, a POST in its body.
        let mut body: &[u8] = match req.method {
            Method::Get => path.as_bytes(),
            Method::Post if path.is_empty() => &req.body,
            Method::Post => {
                return Reply::Full {
                    status: 500,
                    body: b"the model takes POSTed commands in the body only".to_vec(),
                };
            }
        };
        if let Some(q) = body.iter().position(|&b| b == b'?') {
            body = &body[..q];
        }
        // The extension of the last segment (raw, before decoding).
        let last_seg_start = body.iter().rposition(|&b| b == b'/').map_or(0, |i| i + 1);
        if let Some(dot) = body[last_seg_start..].iter().rposition(|&b| b == b'.') {
            let ext = &body[last_seg_start + dot + 1..];
            match ext {
                b"json" => body = &body[..last_seg_start + dot],
                b"raw" | b"msg" | b"bin" | b"txt" | b"html" | b"xhtml" | b"xml" | b"png"
                | b"jpg" | b"jpeg" | b"js" | b"css" => {
                    return Reply::Full {
                        status: 500,
                        body: b"model: an unescaped '.' selected an output format".to_vec(),
                    };
                }
                _ => {}
            }
        }
        let mut segs = body.split(|&b| b == b'/');
        let name = segs.next().unwrap_or_default().to_vec();
        if !name.is_empty() && name.iter().all(u8::is_ascii_digit) {
            return Reply::Full {
                status: 500,
                body: b"model: database selection is not modelled".to_vec(),
            };
        }
        let mut args = vec![name.clone()];
        args.extend(segs.map(webdis_decode));
        let verb = String::from_utf8_lossy(&name).to_string();
        // webdis' cmd_is_subscribe_args: the name in any case, and at least one argument.
        if args.len() >= 2 && name.eq_ignore_ascii_case(b"PSUBSCRIBE") {
            return Reply::Full {
                status: 501,
                body: b"model: PSUBSCRIBE is not modelled".to_vec(),
            };
        }
        if args.len() >= 2 && name.eq_ignore_ascii_case(b"SUBSCRIBE") {
            let channels = args[1..].to_vec();
            return self.open_subscription(
                req.id,
                Subscription {
                    webdis_verb: Some(verb),
                    channels,
                },
            );
        }
        let v = self.run(&args, client, g);
        let body = match webdis_json(&v, true) {
            Some(j) => json!({ verb: j }),
            None => json!({}),
        };
        Reply::Full {
            status: 200,
            body: serde_json::to_vec(&body).unwrap_or_default(),
        }
    }

    /// Upstash's `/subscribe/<channel>[/...]` route (after authorization),
    /// `None` for any other path.
    fn upstash_subscribe(&mut self, req: &HttpRequest, path: &str) -> Option<Reply> {
        let path = path.split('?').next().unwrap_or("");
        let (pattern, rest) = if let Some(r) = path.strip_prefix("subscribe") {
            (false, r)
        } else if let Some(r) = path.strip_prefix("psubscribe") {
            (true, r)
        } else {
            return None;
        };
        let rest = match rest {
            "" => "",
            r => r.strip_prefix('/')?,
        };
        let full = |status: u16, v: Value| Reply::Full {
            status,
            body: serde_json::to_vec(&v).unwrap_or_default(),
        };
        if pattern {
            return Some(full(
                501,
                json!({"error": "model: psubscribe is not modelled"}),
            ));
        }
        let mut segments: Vec<&str> = rest.split('/').collect();
        if segments.last() == Some(&"") {
            segments.pop();
        }
        if segments.is_empty() {
            return Some(full(
                400,
                json!({"error": "ERR wrong number of arguments for 'subscribe' command"}),
            ));
        }
        let channels = segments
            .iter()
            .map(|s| webdis_decode_percent(s.as_bytes()))
            .collect();
        Some(self.open_subscription(
            req.id,
            Subscription {
                webdis_verb: None,
                channels,
            },
        ))
    }

    /// Registers a subscription stream (`wire` is its request's wire id)
    /// and queues one confirmation per channel, counting like Redis (the
    /// connection's subscriptions so far).
    fn open_subscription(&mut self, wire: RequestId, sub: Subscription) -> Reply {
        let mut distinct: Vec<&Vec<u8>> = Vec::new();
        for ch in &sub.channels {
            if !distinct.contains(&ch) {
                distinct.push(ch);
            }
            let event = match &sub.webdis_verb {
                None => sse_event(&[b"subscribe", ch, distinct.len().to_string().as_bytes()]),
                Some(verb) => webdis_event(
                    verb,
                    &[
                        json!("subscribe"),
                        c_string(ch).map_or(Value::Null, Value::String),
                        json!(distinct.len()),
                    ],
                ),
            };
            self.out.push((wire, event));
        }
        self.subs.insert(wire.0, sub);
        self.subscriptions += 1;
        Reply::Stream { status: 200 }
    }

    /// `PUBLISH channel payload`: queued on every open subscription of
    /// `channel`; returns how many received it.
    fn publish(&mut self, channel: &[u8], payload: &[u8]) -> usize {
        self.publishes += 1;
        let mut n = 0;
        for (wire, sub) in &self.subs {
            if !sub.channels.iter().any(|c| c == channel) {
                continue;
            }
            let event = match &sub.webdis_verb {
                None => sse_event(&[b"message", channel, payload]),
                Some(verb) => {
                    // jansson drops a string it cannot hold from the array.
                    let items: Vec<Value> = [b"message".as_slice(), channel, payload]
                        .iter()
                        .filter_map(|b| c_string(b).map(Value::String))
                        .collect();
                    webdis_event(verb, &items)
                }
            };
            self.out.push((RequestId(*wire), event));
            n += 1;
        }
        n += self.resp_publish(channel, payload);
        self.deliveries += n as u64;
        if payload == b"released:0" {
            self.cleanup_deliveries += n as u64;
        }
        n
    }

    /// Subscription streams open right now.
    pub fn open_subscriptions(&self) -> usize {
        self.subs.len() + self.resp_subscribed()
    }
}

/// One server-sent event the way the Upstash gateway frames a push message:
/// the fields joined with `,`, one `data: ` line per line of that, a blank line.
fn sse_event(fields: &[&[u8]]) -> Vec<u8> {
    let data = fields.join(&b","[..]);
    let mut out = Vec::with_capacity(data.len() + 16);
    let mut rest = &data[..];
    loop {
        out.extend_from_slice(b"data: ");
        match rest.iter().position(|&b| b == b'\n' || b == b'\r') {
            Some(i) => {
                out.extend_from_slice(&rest[..i]);
                out.push(b'\n');
                let skip = if rest[i] == b'\r' && rest.get(i + 1) == Some(&b'\n') {
                    2
                } else {
                    1
                };
                rest = &rest[i + skip..];
            }
            None => {
                out.extend_from_slice(rest);
                out.extend_from_slice(b"\n\n");
                return out;
            }
        }
    }
}

/// One webdis push message: `{"<verb>":[items]}`.
fn webdis_event(verb: &str, items: &[Value]) -> Vec<u8> {
    serde_json::to_vec(&json!({ verb: items })).unwrap_or_default()
}

/// `%XX` decoding only (Upstash path segments; `+` stays).
fn webdis_decode_percent(seg: &[u8]) -> Vec<u8> {
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::new();
    let mut i = 0;
    while i < seg.len() {
        match (
            seg[i],
            seg.get(i + 1).copied().and_then(hex),
            seg.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push(h << 4 | l);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    out
}

fn webdis_decode(seg: &[u8]) -> Vec<u8> {
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::new();
    let mut i = 0;
    while i < seg.len() {
        match (
            seg[i],
            seg.get(i + 1).copied().and_then(hex),
            seg.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push(h << 4 | l);
                i += 3;
            }
            (b'+', _, _) => {
                out.push(b' ');
                i += 1;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    out
}

/// A string the way jansson's `json_string(str)` sees it: cut at NUL, and
/// refused (`None`) unless UTF-8.
fn c_string(b: &[u8]) -> Option<String> {
    let cut = b.iter().position(|&x| x == 0).map_or(b, |i| &b[..i]);
    String::from_utf8(cut.to_vec()).ok()
}

/// Webdis 0.1.9's JSON for a reply (`None`: the value could not be set).
fn webdis_json(v: &MValue, top: bool) -> Option<Value> {
    match v {
        MValue::Nil => Some(Value::Null),
        MValue::Int(i) => Some(json!(i)),
        MValue::Bulk(b) => c_string(b).map(Value::String),
        MValue::Status(s) if top => Some(json!([true, s])),
        MValue::Status(s) => Some(Value::String(s.clone())),
        MValue::Err(e) if top => Some(json!([false, e])),
        MValue::Err(e) => Some(Value::String(e.clone())),
        MValue::Arr(items) if top => Some(Value::Array(
            items.iter().filter_map(|i| webdis_json(i, false)).collect(),
        )),
        MValue::Arr(_) => Some(Value::Null),
    }
}

fn upstash_json(v: &MValue, b64: bool) -> Value {
    match v {
        MValue::Nil => Value::Null,
        MValue::Int(i) => json!(i),
        MValue::Status(s) => Value::String(s.clone()),
        MValue::Bulk(b) if b64 => {
            Value::String(base64::engine::general_purpose::STANDARD.encode(b))
        }
        MValue::Bulk(b) => Value::String(String::from_utf8_lossy(b).into_owned()),
        MValue::Arr(items) => Value::Array(items.iter().map(|i| upstash_json(i, b64)).collect()),
        MValue::Err(e) => Value::String(e.clone()),
    }
}

impl SimServer for RedisModel {
    fn handle(&mut self, now: Millis, req: &HttpRequest) -> Reply {
        self.requests += 1;
        self.last_seen = self.last_seen.max(now);
        let client = Self::header(req, CLIENT_HEADER).and_then(|c| c.parse().ok());
        match self.proto {
            Proto::Upstash => self.upstash(req, client, now),
            Proto::Webdis => self.webdis(req, client, now),
            Proto::Resp => Reply::Full {
                status: 400,
                body: b"model: this node speaks RESP on byte streams only".to_vec(),
            },
        }
    }

    fn accepts_streams(&self) -> bool {
        self.proto == Proto::Resp
    }

    fn stream_command(
        &mut self,
        now: Millis,
        conn: RequestId,
        client: usize,
        args: &[Vec<u8>],
    ) -> Vec<u8> {
        self.resp_command(now, conn, client, args)
    }

    fn drain_stream_chunks(&mut self, _now: Millis) -> Vec<(RequestId, Vec<u8>)> {
        std::mem::take(&mut self.out)
    }

    /// The client went away (or the connection broke): the subscription ends.
    fn stream_closed(&mut self, id: RequestId) {
        self.subs.remove(&id.0);
        self.resp_conns.remove(&id.0);
        self.out.retain(|(w, _)| *w != id);
    }

    fn advance(&mut self, now: Millis) {
        self.last_seen = self.last_seen.max(now);
        self.purge(now);
        let keys: Vec<Vec<u8>> = self.readers.keys().cloned().collect();
        for k in keys {
            self.prune_readers(&k, now);
        }
    }

    /// When the next key (or reader's lease) expires (keys without expiry never do).
    fn next_deadline(&self) -> Option<Millis> {
        let readers = self
            .readers
            .values()
            .flatten()
            .filter_map(|(_, end)| self.clock.to_global(*end, self.last_seen));
        self.data
            .values()
            .filter_map(|e| e.expires_global)
            .chain(readers)
            .min()
    }

    fn crash_restart(&mut self, now: Millis) {
        self.last_seen = self.last_seen.max(now);
        self.data.clear();
        self.queues.clear();
        self.readers.clear();
        self.records.clear();
        self.cached.clear();
        // Its streams broke when it went down (the world closed them); a
        // restarted Redis has no subscribers.
        self.subs.clear();
        self.resp_conns.clear();
        self.out.clear();
        self.restarts.push(now);
    }
}

impl RedisModel {
    pub fn fence_of(&self, fence_key: &[u8], g: Millis) -> u64 {
        self.fence_value(fence_key, g).max(0) as u64
    }

    pub fn entries(&self) -> &HashMap<Vec<u8>, Entry> {
        &self.data
    }
}

pub fn by_client(log: &[Rec]) -> BTreeMap<Option<usize>, usize> {
    let mut m = BTreeMap::new();
    for r in log {
        let c = match r {
            Rec::Granted { client, .. } | Rec::Raised { client, .. } => *client,
        };
        *m.entry(c).or_insert(0) += 1;
    }
    m
}
