//! Judges a run: the clients' histories against the fenced resource's log.
//!
//! - **Overlapping holds (believed)**: two clients each believed they held
//!   the same lock at the same instant. A hold runs from the end of a
//!   successful acquire to the first of: the start of its release, the
//!   moment the client learned it was lost, the end of the history. This is
//!   what a client *thought*; a lock service can only promise it when clocks
//!   and pauses stay within its assumptions, which is why the resource
//!   checks tokens.
//! - **Stale writes accepted** (must be 0): an accepted write whose token is
//!   below one the resource had already accepted for that resource, or equal
//!   to one accepted earlier from a *different* client (two holders handed
//!   the same token: fencing would not separate them).
//!   Also an accepted write from a holder whose grant ended before another
//!   holder's grant began, once that later holder's write was accepted: the
//!   later holder must have had a *lower* token for that to get through
//!   (the resource log alone looks well ordered then; the histories' grant
//!   times show it).
//! - **Token inversions**: a grant that began after another grant of the
//!   same lock had completed, yet got a token no higher than it.
//! - **Stale writes rejected**: writes the resource refused (the fence at work).
//! - **Acknowledged writes lost**: writes a client saw acknowledged that the
//!   resource's log does not hold as accepted.
//! - **Most concurrent holders per name** (believed): for a semaphore, the
//!   largest number of clients that believed at one instant that they held
//!   a permit of it (at most its limit when no fault breaks the lease's
//!   assumptions). Holds are recorded per slot (`<name>#slot<k>`, see
//!   `workload::hold_name`), so every check above applies per slot: a
//!   permit's token is promised to increase across successive holders of
//!   the same slot.
//!
//! Elections and multi-resource locks need no rule of their own: a
//! leadership is recorded as an exclusive hold of the election's name (one
//! leader at a time = no overlap; the leader's writes fenced under its
//! token), and every lock of a set as an exclusive hold of its own name.
//! Two additions:
//!
//! - [`held_through_failed_acquire`]: a name a client's history shows as
//!   held across one of its own failed acquires of that name (a failed
//!   `acquire_all` must leave nothing held);
//! - [`check_observer`]: what an election observer reported, against the
//!   grants and, once the run quiesced, against `Client::leader`.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use crate::history::{Op, OpKind, Outcome};
use crate::workload::{base_name, ObserverOutcome, SHARED};

/// What a hold excludes: a read-write lock's shared holds (`<name>#shared`)
/// and exclusive holds (`<name>`) are one group; a permit's slot its own.
fn group(lock: &str) -> &str {
    lock.strip_suffix(SHARED).unwrap_or(lock)
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Verdict {
    pub acquisitions: usize,
    pub overlaps_believed: usize,
    pub writes_accepted: usize,
    pub stale_accepted: usize,
    pub token_inversions: usize,
    pub stale_rejected: usize,
    pub acked_lost: usize,
    /// Operations whose outcome the client could not know.
    pub unknown: usize,
    /// Errors by code (acquire/write/release/extend failures).
    pub errors: HashMap<String, usize>,
    /// Lost-lock signals received.
    pub lost_signals: usize,
    /// Per lock or semaphore name: the most holders believed at one instant.
    pub max_holders: HashMap<String, usize>,
}

impl Verdict {
    /// The most concurrent holders believed of any one name.
    pub fn max_holders_of_any(&self) -> usize {
        self.max_holders.values().copied().max().unwrap_or(0)
    }

    /// Errors other than the listed codes (expected by the scenario).
    pub fn unexpected_errors(&self, expected: &[&str]) -> usize {
        self.errors
            .iter()
            .filter(|(k, _)| !expected.contains(&k.as_str()))
            .map(|(_, v)| v)
            .sum()
    }

    pub fn errors_text(&self) -> String {
        if self.errors.is_empty() {
            return "none".into();
        }
        let mut v: Vec<_> = self.errors.iter().collect();
        v.sort();
        v.iter()
            .map(|(k, n)| format!("{k}×{n}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// One believed hold.
#[derive(Clone, Debug, PartialEq)]
pub struct Hold {
    pub client: String,
    pub lock: String,
    pub token: Option<u64>,
    pub from: f64,
    pub to: f64,
}

/// The holds each client believed it had (see the module docs).
pub fn holds(ops: &[Op]) -> Vec<Hold> {
    let mut by_client: HashMap<(&str, &str), Vec<&Op>> = HashMap::new();
    for op in ops {
        by_client
            .entry((op.client.as_str(), op.lock.as_str()))
            .or_default()
            .push(op);
    }
    let history_end = ops.iter().map(|o| o.end).fold(0.0, f64::max);
    let mut out = Vec::new();
    for ((client, lock), mut list) in by_client {
        list.sort_by(|a, b| a.start.total_cmp(&b.start));
        let mut open: Option<Hold> = None;
        for op in list {
            match (op.kind, &op.outcome) {
                (OpKind::Acquire, Outcome::Ok) => {
                    if let Some(h) = open.take() {
                        out.push(Hold {
                            to: h.to.min(op.start),
                            ..h
                        });
                    }
                    open = Some(Hold {
                        client: client.into(),
                        lock: lock.into(),
                        token: op.token,
                        from: op.end,
                        to: history_end,
                    });
                }
                (OpKind::Release, _) | (OpKind::Lost, _) => {
                    if let Some(h) = open.take() {
                        out.push(Hold {
                            to: op.start.max(h.from),
                            ..h
                        });
                    }
                }
                _ => {}
            }
        }
        out.extend(open);
    }
    out.sort_by(|a, b| a.from.total_cmp(&b.from));
    out
}

/// Pairs of holds of one lock by different clients that intersect.
pub fn overlapping_holds(holds: &[Hold]) -> Vec<(Hold, Hold)> {
    let mut pairs = Vec::new();
    for (i, a) in holds.iter().enumerate() {
        for b in &holds[i + 1..] {
            if b.from >= a.to {
                // `holds` is sorted by start, but an earlier, longer hold may
                // still reach past this one: keep scanning only while starts
                // are before a's end.
                break;
            }
            // Readers share; a reader beside a writer, or two writers, clash.
            let both_shared = a.lock.ends_with(SHARED) && b.lock.ends_with(SHARED);
            if group(&a.lock) == group(&b.lock)
                && !both_shared
                && a.client != b.client
                && b.from < a.to
                && a.from < b.to
            {
                pairs.push((a.clone(), b.clone()));
            }
        }
    }
    pairs
}

/// Per name (the slot suffix dropped): the most holds that intersect at one
/// instant. Holds are half-open `[from, to)`: one that ends exactly when
/// another begins does not count twice.
pub fn max_concurrent_holders(holds: &[Hold]) -> HashMap<String, usize> {
    let mut edges: HashMap<&str, Vec<(f64, i32)>> = HashMap::new();
    for h in holds.iter().filter(|h| h.to > h.from) {
        let e = edges.entry(base_name(&h.lock)).or_default();
        e.push((h.from, 1));
        e.push((h.to, -1));
    }
    edges
        .into_iter()
        .map(|(name, mut e)| {
            // Ends before starts at the same instant (-1 sorts first).
            e.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            let (mut now, mut most) = (0i32, 0i32);
            for (_, d) in e {
                now += d;
                most = most.max(now);
            }
            (name.to_string(), most.max(0) as usize)
        })
        .collect()
}

/// The two checks every fenced run makes: no stale write accepted by the
/// resource, no two holders believed at once.
pub fn check_fenced(r: &mut crate::report::ScenarioReport, v: &Verdict) {
    r.check(
        "0 stale writes accepted",
        v.stale_accepted == 0,
        format!(
            "{} accepted, {} rejected",
            v.stale_accepted, v.stale_rejected
        ),
    );
    r.check(
        "0 overlapping holds",
        v.overlaps_believed == 0,
        v.overlaps_believed,
    );
}

/// Applies the checks to `ops` and the resource log (`GET /log`'s JSON).
pub fn check(ops: &[Op], resource_log: &Value) -> Verdict {
    let mut v = Verdict::default();
    let hs = holds(ops);
    v.acquisitions = hs.len();
    v.overlaps_believed = overlapping_holds(&hs).len();
    v.max_holders = max_concurrent_holders(&hs);
    for op in ops {
        match &op.outcome {
            Outcome::Unknown(_) => v.unknown += 1,
            Outcome::Fail(code) if op.kind != OpKind::Lost => {
                *v.errors.entry(code.clone()).or_default() += 1
            }
            _ => {}
        }
        if op.kind == OpKind::Lost {
            v.lost_signals += 1;
        }
    }

    v.token_inversions = token_inversions(ops);
    // (client, token) → (acquire start, acquire end) of the grant, and the
    // same per (client, name, token): one client's locks of different names
    // (a lock set; Redis counts tokens per name) may carry equal tokens, so
    // a write is matched to the grant of the resource it wrote to first.
    let granted = || {
        ops.iter()
            .filter(|o| o.kind == OpKind::Acquire && o.is_ok())
            .filter_map(|o| Some((o, o.token?)))
    };
    let grants: HashMap<(&str, u64), (f64, f64)> = granted()
        .map(|(o, t)| ((o.client.as_str(), t), (o.start, o.end)))
        .collect();
    let grants_by_name: HashMap<(&str, &str, u64), (f64, f64)> = granted()
        .map(|(o, t)| ((o.client.as_str(), o.lock.as_str(), t), (o.start, o.end)))
        .collect();
    // Per resource: the latest grant start among writes accepted so far.
    let mut newest_writer_grant: HashMap<String, f64> = HashMap::new();
    let entries = resource_log
        .get("entries")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut highest: HashMap<String, u64> = HashMap::new();
    let mut token_owner: HashMap<(String, u64), String> = HashMap::new();
    let mut accepted_ids = HashSet::new();
    for e in &entries {
        let resource = e
            .get("resource")
            .and_then(Value::as_str)
            .unwrap_or("default")
            .to_string();
        // The resource logs tokens as decimal strings (u64 does not fit a JS number).
        let token = match e.get("token") {
            Some(Value::String(t)) => t.parse().unwrap_or(0),
            Some(t) => t.as_u64().unwrap_or(0),
            None => 0,
        };
        let accepted = e.get("accepted").and_then(Value::as_bool).unwrap_or(false);
        let record = e.get("record").cloned().unwrap_or(Value::Null);
        let client = record
            .get("client")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        if !accepted {
            v.stale_rejected += 1;
            continue;
        }
        v.writes_accepted += 1;
        if let Some(id) = record.get("write_id").and_then(Value::as_str) {
            accepted_ids.insert(id.to_string());
        }
        let high = highest.entry(resource.clone()).or_insert(0);
        let below = token < *high;
        *high = (*high).max(token);
        let reused = match token_owner.get(&(resource.clone(), token)) {
            Some(owner) => owner != &client,
            None => {
                token_owner.insert((resource.clone(), token), client.clone());
                false
            }
        };
        let grant = grants_by_name
            .get(&(client.as_str(), resource.as_str(), token))
            .or_else(|| grants.get(&(client.as_str(), token)))
            .copied();
        let superseded = match (grant, newest_writer_grant.get(&resource)) {
            (Some((_, granted)), Some(&newer_start)) => newer_start > granted,
            _ => false,
        };
        if let Some((start, _)) = grant {
            let e = newest_writer_grant.entry(resource.clone()).or_insert(start);
            *e = e.max(start);
        }
        if below || reused || superseded {
            v.stale_accepted += 1;
        }
    }
    // The resource keeps its newest entries only; an id older than its log
    // cannot be judged, so only writes at or after its oldest entry count.
    let oldest_seq_kept = entries
        .first()
        .and_then(|e| e.get("seq"))
        .and_then(Value::as_u64)
        .unwrap_or(0);
    let truncated = oldest_seq_kept > 1;
    for op in ops {
        if op.kind == OpKind::Write && op.is_ok() {
            if let Some(id) = &op.write_id {
                if !accepted_ids.contains(id) && !truncated {
                    v.acked_lost += 1;
                }
            }
        }
    }
    v
}

/// Failed acquires (e.g. the per-name records of a failed `acquire_all`)
/// during which the same client's history shows a hold of that name: a
/// failed `acquire_all` must leave none of its names held.
pub fn held_through_failed_acquire(ops: &[Op]) -> usize {
    let hs = holds(ops);
    ops.iter()
        .filter(|o| o.kind == OpKind::Acquire && matches!(o.outcome, Outcome::Fail(_)))
        .filter(|o| {
            hs.iter().any(|h| {
                h.client == o.client && h.lock == o.lock && h.from < o.end && o.start < h.to
            })
        })
        .count()
}

/// What an election observer's reports show (see [`check_observer`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ObserverVerdict {
    pub reports: usize,
    /// Reports of a leader (not "nobody").
    pub leaders_reported: usize,
    /// Distinct leadership tokens reported.
    pub distinct_leaders: usize,
    /// Reports whose value does not belong to the leadership whose token
    /// they carry: `<id>#<n>` with n ≠ the token, or a token granted to a
    /// client other than the value's `<id>` (a value of one leader paired
    /// with another's token).
    pub mismatched: usize,
    /// Reports whose token no recorded grant carries (a campaign that was
    /// granted on the backend while its client gave up, or not in the
    /// histories given): a figure, not a fault by itself.
    pub unrecorded: usize,
    /// Reports of a leader whose token is below one reported earlier.
    pub token_regressions: usize,
    /// The observer's last report equals `Client::leader` after the run.
    pub final_matches: bool,
    /// `Client::leader` after the run reports nobody.
    pub final_is_none: bool,
    /// The final `Client::leader` failed (its code).
    pub error: Option<String>,
    /// Errors the observer's iterators ended with (it then started again),
    /// by code.
    pub observe_errors: HashMap<String, usize>,
}

/// Judges an observer of the election `name` against the grants in `ops`
/// (contenders campaign with their id as value and proclaim
/// `<id>#<token>`, see `workload`) and the final leader state.
pub fn check_observer(ops: &[Op], name: &str, seen: &ObserverOutcome) -> ObserverVerdict {
    // token → the clients granted a leadership of `name` with it.
    let mut owners: HashMap<u64, HashSet<&str>> = HashMap::new();
    for o in ops
        .iter()
        .filter(|o| o.kind == OpKind::Acquire && o.is_ok() && o.lock == name)
    {
        if let Some(t) = o.token {
            owners.entry(t).or_default().insert(o.client.as_str());
        }
    }
    let mut v = ObserverVerdict {
        reports: seen.reports.len(),
        ..ObserverVerdict::default()
    };
    let mut tokens = HashSet::new();
    let mut highest: Option<u64> = None;
    for l in seen.reports.iter().filter_map(|r| r.leader.as_ref()) {
        v.leaders_reported += 1;
        tokens.insert(l.fencing_token);
        if highest.is_some_and(|h| l.fencing_token < h) {
            v.token_regressions += 1;
        }
        highest = Some(highest.map_or(l.fencing_token, |h| h.max(l.fencing_token)));
        let (id, suffix) = match l.value.split_once('#') {
            Some((id, n)) => (id, Some(n)),
            None => (l.value.as_str(), None),
        };
        let suffix_wrong = suffix.is_some_and(|n| n != l.fencing_token.to_string());
        let owner_wrong = match owners.get(&l.fencing_token) {
            Some(clients) => !clients.contains(id),
            None => {
                v.unrecorded += 1;
                false
            }
        };
        if suffix_wrong || owner_wrong {
            v.mismatched += 1;
        }
    }
    v.distinct_leaders = tokens.len();
    let last = seen.reports.last().map(|r| &r.leader);
    match &seen.final_leader {
        Ok(now) => {
            v.final_matches = last == Some(now);
            v.final_is_none = now.is_none();
        }
        Err(code) => v.error = Some(format!("leader: {code}")),
    }
    for e in &seen.errors {
        *v.observe_errors.entry(e.clone()).or_default() += 1;
    }
    v
}

/// Grants (per lock) that began after another grant had completed but got a
/// token no higher than it.
pub fn token_inversions(ops: &[Op]) -> usize {
    let mut by_lock: HashMap<&str, Vec<(f64, f64, u64)>> = HashMap::new();
    for o in ops
        .iter()
        .filter(|o| o.kind == OpKind::Acquire && o.is_ok())
    {
        if let Some(t) = o.token {
            by_lock
                .entry(group(&o.lock))
                .or_default()
                .push((o.start, o.end, t));
        }
    }
    let mut count = 0;
    for grants in by_lock.values() {
        let mut by_start = grants.clone();
        by_start.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut by_end = grants.clone();
        by_end.sort_by(|a, b| a.1.total_cmp(&b.1));
        let (mut i, mut max_done) = (0, None::<u64>);
        for g in &by_start {
            while i < by_end.len() && by_end[i].1 < g.0 {
                max_done = Some(max_done.map_or(by_end[i].2, |m| m.max(by_end[i].2)));
                i += 1;
            }
            if max_done.is_some_and(|m| g.2 <= m) {
                count += 1;
            }
        }
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn op(client: &str, kind: OpKind, start: f64, end: f64, token: Option<u64>) -> Op {
        Op {
            client: client.into(),
            lock: "l".into(),
            kind,
            start,
            end,
            outcome: Outcome::Ok,
            token,
            write_id: None,
        }
    }

    #[test]
    fn sequential_holds_do_not_overlap_and_interleaved_ones_do() {
        let seq = vec![
            op("a", OpKind::Acquire, 0.0, 1.0, Some(1)),
            op("a", OpKind::Release, 5.0, 6.0, Some(1)),
            op("b", OpKind::Acquire, 2.0, 5.5, Some(2)),
            op("b", OpKind::Release, 9.0, 9.5, Some(2)),
        ];
        assert_eq!(check(&seq, &json!({"entries": []})).overlaps_believed, 0);
        let bad = vec![
            op("a", OpKind::Acquire, 0.0, 1.0, Some(1)),
            op("a", OpKind::Release, 5.0, 6.0, Some(1)),
            op("b", OpKind::Acquire, 2.0, 3.0, Some(2)),
            op("b", OpKind::Lost, 4.0, 4.0, Some(2)),
        ];
        let v = check(&bad, &json!({"entries": []}));
        assert_eq!(
            (v.acquisitions, v.overlaps_believed, v.lost_signals),
            (2, 1, 1)
        );
    }

    #[test]
    fn a_long_hold_overlapping_a_later_one_is_found_past_a_short_one() {
        let ops = vec![
            op("a", OpKind::Acquire, 0.0, 1.0, Some(1)),
            op("b", OpKind::Acquire, 1.0, 2.0, Some(2)),
            op("b", OpKind::Release, 2.5, 3.0, Some(2)),
            op("c", OpKind::Acquire, 4.0, 5.0, Some(3)),
            op("c", OpKind::Write, 6.0, 7.0, Some(3)),
        ];
        // a never releases: it overlaps both b and c.
        assert_eq!(check(&ops, &json!({"entries": []})).overlaps_believed, 2);
    }

    #[test]
    fn a_later_grant_with_a_lower_token_is_an_inversion_and_the_old_holders_late_write_is_stale() {
        let ops = vec![
            op("a", OpKind::Acquire, 0.0, 1.0, Some(10)),
            op("b", OpKind::Acquire, 2.0, 3.0, Some(2)),
            op("c", OpKind::Acquire, 2.5, 9.0, Some(11)),
        ];
        assert_eq!(token_inversions(&ops), 1);
        // b (granted after a) writes first with 2, then a's late write with 10 is accepted.
        let log = json!({"entries": [
            {"seq": 1, "resource": "l", "token": "2", "accepted": true, "record": {"client": "b"}},
            {"seq": 2, "resource": "l", "token": "10", "accepted": true, "record": {"client": "a"}},
        ]});
        let v = check(&ops, &log);
        assert_eq!((v.token_inversions, v.stale_accepted), (1, 1));
        // In grant order the same writes are fine.
        let log = json!({"entries": [
            {"seq": 1, "resource": "l", "token": "10", "accepted": true, "record": {"client": "a"}},
            {"seq": 2, "resource": "l", "token": "11", "accepted": true, "record": {"client": "c"}},
        ]});
        assert_eq!(check(&ops, &log).stale_accepted, 0);
    }

    #[test]
    fn permits_are_judged_per_slot_and_counted_per_name() {
        let at = |client: &str, lock: &str, kind, start, end, token| Op {
            lock: lock.into(),
            ..op(client, kind, start, end, token)
        };
        // Three permits of `s` at once (slots 0, 1, 2), then slot 1 passes
        // from b to d: no overlap per slot, three concurrent holders.
        let ops = vec![
            at("a", "s#slot0", OpKind::Acquire, 0.0, 1.0, Some(1)),
            at("b", "s#slot1", OpKind::Acquire, 0.0, 1.0, Some(2)),
            at("c", "s#slot2", OpKind::Acquire, 0.5, 2.0, Some(3)),
            at("b", "s#slot1", OpKind::Release, 4.0, 5.0, Some(2)),
            at("d", "s#slot1", OpKind::Acquire, 4.5, 6.0, Some(4)),
            at("e", "other", OpKind::Acquire, 0.0, 1.0, Some(1)),
        ];
        let v = check(&ops, &json!({"entries": []}));
        assert_eq!((v.overlaps_believed, v.token_inversions), (0, 0));
        assert_eq!(v.max_holders.get("s"), Some(&3));
        assert_eq!(v.max_holders.get("other"), Some(&1));
        assert_eq!(v.max_holders_of_any(), 3);
        // A fourth client believing it holds slot 0 alongside a is both an
        // overlap on that slot and a fourth concurrent holder of `s`.
        let mut bad = ops.clone();
        bad.push(at("f", "s#slot0", OpKind::Acquire, 1.5, 3.0, Some(5)));
        let v = check(&bad, &json!({"entries": []}));
        assert_eq!(
            (v.overlaps_believed, v.max_holders.get("s").copied()),
            (1, Some(4))
        );
        // Writes are fenced per slot: slot 1's token 2 after slot 0's 5 is fine.
        let log = json!({"entries": [
            {"seq": 1, "resource": "s#slot0", "token": "5", "accepted": true, "record": {"client": "f"}},
            {"seq": 2, "resource": "s#slot1", "token": "2", "accepted": true, "record": {"client": "b"}},
        ]});
        assert_eq!(check(&bad, &log).stale_accepted, 0);
    }

    #[test]
    fn readers_share_and_writers_exclude_them() {
        let at = |client: &str, lock: &str, kind, start, end, token| Op {
            lock: lock.into(),
            ..op(client, kind, start, end, token)
        };
        // Two readers at once, then a writer after both: fine.
        let ops = vec![
            at("r1", "rw#shared", OpKind::Acquire, 0.0, 1.0, Some(1)),
            at("r2", "rw#shared", OpKind::Acquire, 0.5, 1.5, Some(2)),
            at("r1", "rw#shared", OpKind::Release, 3.0, 3.5, Some(1)),
            at("r2", "rw#shared", OpKind::Release, 3.2, 3.6, Some(2)),
            at("w", "rw", OpKind::Acquire, 2.0, 4.0, Some(3)),
        ];
        let v = check(&ops, &json!({"entries": []}));
        assert_eq!(
            (
                v.overlaps_believed,
                v.token_inversions,
                v.max_holders.get("rw").copied()
            ),
            (0, 0, Some(2))
        );
        // A writer granted while a reader still holds clashes; a writer
        // granted after a reader with a lower token is an inversion.
        let mut bad = ops.clone();
        bad.push(at("w2", "rw", OpKind::Acquire, 0.2, 1.2, Some(4)));
        assert_eq!(check(&bad, &json!({"entries": []})).overlaps_believed, 2);
        let mut inv = ops.clone();
        inv.push(at("w3", "rw", OpKind::Acquire, 5.0, 6.0, Some(2)));
        assert_eq!(check(&inv, &json!({"entries": []})).token_inversions, 1);
    }

    fn at(client: &str, lock: &str, kind: OpKind, start: f64, end: f64, token: Option<u64>) -> Op {
        Op {
            lock: lock.into(),
            ..op(client, kind, start, end, token)
        }
    }

    #[test]
    fn a_lock_set_is_judged_per_name_with_equal_tokens_on_different_names() {
        // a holds {x, y} (tokens 5 and 5: per-name counters), then b holds
        // {y, x} (6, 6), then a takes z, also with token 5: each write is
        // matched to the grant of the name it wrote to (matched by client
        // and token alone, a's x write would look granted at 6.0, after b's
        // grant, and b's x write superseded).
        let ops = vec![
            at("a", "x", OpKind::Acquire, 0.0, 1.0, Some(5)),
            at("a", "y", OpKind::Acquire, 0.0, 1.0, Some(5)),
            at("a", "x", OpKind::Release, 3.0, 3.5, Some(5)),
            at("a", "y", OpKind::Release, 3.0, 3.5, Some(5)),
            at("b", "y", OpKind::Acquire, 2.0, 4.0, Some(6)),
            at("b", "x", OpKind::Acquire, 2.0, 4.0, Some(6)),
            at("b", "y", OpKind::Release, 5.0, 5.5, Some(6)),
            at("b", "x", OpKind::Release, 5.0, 5.5, Some(6)),
            at("a", "z", OpKind::Acquire, 6.0, 7.0, Some(5)),
        ];
        let log = json!({"entries": [
            {"seq": 1, "resource": "x", "token": "5", "accepted": true, "record": {"client": "a"}},
            {"seq": 2, "resource": "y", "token": "5", "accepted": true, "record": {"client": "a"}},
            {"seq": 3, "resource": "y", "token": "6", "accepted": true, "record": {"client": "b"}},
            {"seq": 4, "resource": "x", "token": "6", "accepted": true, "record": {"client": "b"}},
            {"seq": 5, "resource": "z", "token": "5", "accepted": true, "record": {"client": "a"}},
        ]});
        let v = check(&ops, &log);
        assert_eq!(
            (
                v.overlaps_believed,
                v.stale_accepted,
                v.token_inversions,
                v.acquisitions
            ),
            (0, 0, 0, 5)
        );
        // b's set granted while a still held x: an overlap on x (and on y).
        let mut bad = ops.clone();
        bad[2].start = 4.5;
        bad[3].start = 4.5;
        assert_eq!(check(&bad, &log).overlaps_believed, 2);
    }

    #[test]
    fn a_name_held_across_a_failed_acquire_is_counted() {
        let fail = |client: &str, lock: &str, start, end| Op {
            outcome: Outcome::Fail("TIMEOUT".into()),
            ..at(client, lock, OpKind::Acquire, start, end, None)
        };
        // c's set {x, y} failed at 2..3 and c held nothing then: fine.
        let ok = vec![
            at("c", "x", OpKind::Acquire, 0.0, 0.5, Some(1)),
            at("c", "x", OpKind::Release, 1.0, 1.5, Some(1)),
            fail("c", "x", 2.0, 3.0),
            fail("c", "y", 2.0, 3.0),
        ];
        assert_eq!(held_through_failed_acquire(&ok), 0);
        // Without the release, x is still held when the set fails.
        let bad: Vec<Op> = ok
            .iter()
            .filter(|o| o.kind != OpKind::Release)
            .cloned()
            .collect();
        assert_eq!(held_through_failed_acquire(&bad), 1);
    }

    fn seen(reports: &[Option<(&str, u64)>], now: Option<(&str, u64)>) -> ObserverOutcome {
        use crate::workload::Observed;
        use edgelock::core::Leadership;
        let l = |x: &Option<(&str, u64)>| {
            x.map(|(v, t)| Leadership {
                value: v.into(),
                fencing_token: t,
            })
        };
        ObserverOutcome {
            reports: reports
                .iter()
                .enumerate()
                .map(|(i, r)| Observed {
                    at: i as f64,
                    leader: l(r),
                })
                .collect(),
            final_leader: Ok(l(&now)),
            errors: Vec::new(),
        }
    }

    #[test]
    fn an_observer_is_judged_against_grants_and_the_final_state() {
        let ops = vec![
            at("e0", "el", OpKind::Acquire, 0.0, 1.0, Some(3)),
            at("e0", "el", OpKind::Release, 2.0, 2.5, Some(3)),
            at("e1", "el", OpKind::Acquire, 1.0, 2.6, Some(4)),
            at("e1", "el", OpKind::Release, 4.0, 4.5, Some(4)),
        ];
        let good = seen(
            &[
                None,
                Some(("e0", 3)),
                Some(("e0#3", 3)),
                Some(("e1", 4)),
                Some(("e1#4", 4)),
                None,
            ],
            None,
        );
        let v = check_observer(&ops, "el", &good);
        assert_eq!(
            (
                v.reports,
                v.leaders_reported,
                v.distinct_leaders,
                v.mismatched,
                v.unrecorded,
                v.token_regressions
            ),
            (6, 4, 2, 0, 0, 0)
        );
        assert!(v.final_matches && v.final_is_none && v.error.is_none());
        // e0's proclaimed value under e1's token, e1's value under e0's
        // token, a token going back, a token nobody was granted, and a last
        // report that still names a leader after everyone resigned.
        let bad = seen(
            &[
                Some(("e1", 4)),
                Some(("e0#3", 4)),
                Some(("e1", 3)),
                Some(("e9", 8)),
            ],
            None,
        );
        let v = check_observer(&ops, "el", &bad);
        assert_eq!((v.mismatched, v.token_regressions, v.unrecorded), (2, 1, 1));
        assert!(!v.final_matches && v.final_is_none);
        // An observer that never reported does not match either.
        assert!(!check_observer(&ops, "el", &seen(&[], None)).final_matches);
        // Grants of another name do not vouch for a report.
        let other = seen(&[Some(("e0", 3))], Some(("e0", 3)));
        let mut renamed = ops.clone();
        for o in &mut renamed {
            o.lock = "other".into();
        }
        let v = check_observer(&renamed, "el", &other);
        assert_eq!(
            (v.unrecorded, v.final_matches, v.final_is_none),
            (1, true, false)
        );
    }

    #[test]
    fn stale_and_reused_tokens_are_counted_and_acks_matched() {
        let log = json!({"entries": [
            {"seq": 1, "resource": "r", "token": 5, "accepted": true, "record": {"client": "a", "write_id": "w1"}},
            {"seq": 2, "resource": "r", "token": 4, "accepted": false, "record": {"client": "b", "write_id": "w2"}},
            {"seq": 3, "resource": "r", "token": 5, "accepted": true, "record": {"client": "a", "write_id": "w3"}},
            {"seq": 4, "resource": "r", "token": 5, "accepted": true, "record": {"client": "c", "write_id": "w4"}},
            {"seq": 5, "resource": "r", "token": "3", "accepted": true, "record": {"client": "d", "write_id": "w5"}},
        ]});
        let mut w = op("a", OpKind::Write, 0.0, 1.0, Some(5));
        w.write_id = Some("w9".into());
        let v = check(&[w], &log);
        assert_eq!(
            (
                v.writes_accepted,
                v.stale_rejected,
                v.stale_accepted,
                v.acked_lost
            ),
            (4, 1, 2, 1)
        );
    }
}
