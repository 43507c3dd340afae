//! Inspect: read the name's state on every node (held on a quorum, the
//! quorum's remaining time, the highest fencing counter). A name with a
//! semaphore's limit record is read a second time with its slots declared
//! (see [`semaphore`](super::super::semaphore)): the permits held on a
//! quorum are listed by slot, never with their tokens. The live readers of
//! a read-write lock (see [`rwlock`](super::super::rwlock)) are listed as
//! shared holders, by count only.

use super::super::context::Context;
use super::super::keys::{limit_key, permit_keys};
use super::super::quorum::kth_largest;
use super::super::round::Round;
use super::super::scripts::{self, InspectReply};
use super::super::task::{Next, Task};
use crate::core::names::validate_name;
use crate::core::*;

/// Shared holders listed at most (a count from a node is not trusted to
/// size an allocation).
const MAX_LISTED_READERS: u32 = 10_000;

pub(in super::super) struct InspectTask {
    op: OpId,
    name: String,
    key: String,
    fence_key: String,
    /// Slots the round in flight declares (`None`: not sent yet).
    declared: Option<u32>,
}

impl InspectTask {
    pub(in super::super) fn new(cx: &mut Context, name: &str) -> Result<Self, LockError> {
        validate_name(name)?;
        let (key, fence_key) = cx.keys_for(name);
        Ok(InspectTask {
            op: cx.rt.out.op_id(),
            name: name.to_string(),
            key,
            fence_key,
            declared: None,
        })
    }

    fn round(mut self, cx: &Context, slots: u32) -> Next {
        let cmd = scripts::inspect(
            &self.key,
            &self.fence_key,
            &limit_key(&self.key),
            &permit_keys(&self.key, slots),
        );
        self.declared = Some(slots);
        let targets = cx.all_nodes();
        Next::round(self, cmd, targets)
    }
}

impl Task for InspectTask {
    fn op(&self) -> Option<OpId> {
        Some(self.op)
    }

    fn step(self: Box<Self>, cx: &mut Context, round: Option<Round>, _now: Millis) -> Next {
        let (Some(round), Some(declared)) = (round, self.declared) else {
            if self.declared.is_some() {
                cx.rt.out.fail(
                    self.op,
                    LockError::internal("an inspect was stepped without its round"),
                );
                return Next::Done;
            }
            return self.round(cx, 0);
        };
        let parsed = round.parsed(|v| scripts::parse_inspect(v, declared as usize));
        let answers: Vec<InspectReply> = parsed
            .iter()
            .filter_map(|(_, r)| r.as_ref().ok().cloned())
            .collect();
        let q = cx.quorum_size();
        if answers.len() < q {
            let error = cx.round_error(&self.name, Round::first_error(&parsed), answers.len());
            cx.rt.out.fail(self.op, error);
            return Next::Done;
        }
        // A semaphore whose slots this round did not declare: read them.
        let limit = answers.iter().filter_map(|a| a.limit).max();
        if let Some(limit) = limit.filter(|l| *l > declared) {
            return self.round(cx, limit);
        }
        cx.rt.out.complete(
            self.op,
            Ok(Outcome::Inspected(status(self.name, &answers, q, limit))),
        );
        Next::Done
    }
}

/// The name's status from a quorum's (or more) answers: a key counts as
/// held when a quorum has it, its remaining time is what a quorum has left.
fn status(name: String, answers: &[InspectReply], q: usize, limit: Option<u32>) -> LockStatus {
    let held_for = |pttls: Vec<Option<u64>>| -> Option<Option<u64>> {
        let existing: Vec<u64> = pttls.into_iter().flatten().collect();
        (existing.len() >= q).then(|| kth_largest(existing, q))
    };
    let lock = held_for(
        answers
            .iter()
            .map(|a| a.exists.then_some(a.pttl.unwrap_or(u64::MAX)))
            .collect(),
    );
    let mut holders = Vec::new();
    let mut remaining: Option<u64> = lock.flatten();
    if lock.is_some() {
        // Redis does not reveal who holds (the token is the owner credential).
        holders.push(Holder::default());
    }
    // Readers (one node: Redlock never grants them, and a quorum's count
    // would be a guess): as many shared holders as the fewest answers saw.
    let readers = answers
        .iter()
        .map(|a| a.readers)
        .min()
        .unwrap_or(0)
        .min(MAX_LISTED_READERS);
    for _ in 0..readers {
        holders.push(Holder {
            id: String::new(),
            kind: LockKind::Shared,
            slot: None,
            fencing_token: None,
        });
    }
    if readers > 0 {
        // A read-write lock's remaining time: until its last reader leaves.
        let left = answers.iter().filter_map(|a| a.readers_left).min();
        remaining = match (remaining, left) {
            (Some(r), Some(l)) => Some(r.max(l)),
            (r, l) => r.or(l),
        };
    }
    let mut permit_limit = None;
    if let Some(limit) = limit {
        for slot in 0..limit {
            let pttls = answers
                .iter()
                .map(|a| a.slots.get(slot as usize).copied().flatten())
                .collect();
            let Some(left) = held_for(pttls) else {
                continue;
            };
            permit_limit = Some(limit);
            holders.push(Holder {
                id: String::new(),
                kind: LockKind::Permits { limit },
                slot: Some(slot),
                fencing_token: None,
            });
            // A semaphore's remaining time: until its first permit frees itself.
            remaining = match (remaining, left.filter(|l| *l != u64::MAX)) {
                (Some(r), Some(l)) => Some(r.min(l)),
                (r, l) => r.or(l),
            };
        }
    }
    LockStatus {
        name,
        held: !holders.is_empty(),
        holder: None,
        fencing_token: answers.iter().map(|a| a.fence).max(),
        remaining_ms: remaining.filter(|r| *r != u64::MAX),
        waiters: Vec::new(),
        limit: permit_limit,
        holders,
        queued: Vec::new(),
    }
}
