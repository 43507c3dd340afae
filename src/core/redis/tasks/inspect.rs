//! Inspect: read the lock's state on every node (held on a quorum, the
//! quorum's remaining time, the highest fencing counter).

use super::super::context::Context;
use super::super::quorum::kth_largest;
use super::super::round::Round;
use super::super::scripts::{self, StatusReply};
use super::super::task::{Next, Task};
use crate::core::names::validate_name;
use crate::core::*;

pub(in super::super) struct InspectTask {
    op: OpId,
    name: String,
    cmd: Option<super::super::value::RedisCommand>,
}

impl InspectTask {
    pub(in super::super) fn new(cx: &mut Context, name: &str) -> Result<Self, LockError> {
        validate_name(name)?;
        let (key, fence_key) = cx.keys_for(name);
        let cmd = scripts::status(&key, &fence_key, None);
        Ok(InspectTask { op: cx.rt.out.op_id(), name: name.to_string(), cmd: Some(cmd) })
    }
}

impl Task for InspectTask {
    fn op(&self) -> Option<OpId> {
        Some(self.op)
    }

    fn step(self: Box<Self>, cx: &mut Context, round: Option<Round>, _now: Millis) -> Next {
        let InspectTask { op, name, cmd } = *self;
        let Some(round) = round else {
            return match cmd {
                Some(cmd) => Next::round(InspectTask { op, name, cmd: None }, cmd, cx.all_nodes()),
                None => {
                    cx.rt.out.fail(op, LockError::internal("an inspect was stepped without its round"));
                    Next::Done
                }
            };
        };
        let parsed = round.parsed(scripts::parse_status);
        let answers: Vec<StatusReply> = parsed.iter().filter_map(|(_, r)| r.as_ref().ok().copied()).collect();
        let q = cx.quorum_size();
        if answers.len() < q {
            let error = cx.round_error(&name, Round::first_error(&parsed), answers.len());
            cx.rt.out.fail(op, error);
            return Next::Done;
        }
        let existing: Vec<&StatusReply> = answers.iter().filter(|s| s.exists).collect();
        let held = existing.len() >= q;
        let remaining_ms = if held { kth_largest(existing.iter().filter_map(|s| s.pttl).collect(), q) } else { None };
        let status = LockStatus {
            name,
            held,
            holder: None,
            fencing_token: answers.iter().map(|s| s.fence).max(),
            remaining_ms,
            waiters: Vec::new(),
            // Redis does not reveal who holds (the token is the owner credential).
            holders: if held { vec![Holder::default()] } else { Vec::new() },
            ..Default::default()
        };
        cx.rt.out.complete(op, Ok(Outcome::Inspected(status)));
        Next::Done
    }
}
