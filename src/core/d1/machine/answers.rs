//! What d1's answers do, besides the waiting acquire's (`acquire`):
//! releases, resumes and inspects, each read strictly by the codec and
//! turned into outcomes.

use super::super::codec;
use super::{Core, Req, D1};
use crate::core::lease::{Answer, Held};
use crate::core::{Holder, LockHandle, LockStatus, Millis, OpId, Outcome};

impl D1 {
    /// The answer of a user's release (of `lock`).
    pub(super) fn on_release(
        &mut self,
        core: &mut Core,
        op: Option<OpId>,
        lock: Option<Held>,
        input: Answer,
    ) {
        let (Some(op), Some(h)) = (op, lock) else {
            return;
        };
        let answer = self.read(core, (&h.name, &h.owner), &input, codec::parse_release);
        core.released(op, h, answer);
    }

    /// The answer of a resume: the lock held again, if the row is still
    /// the handle's.
    pub(super) fn on_resume(
        &mut self,
        core: &mut Core,
        now: Millis,
        op: OpId,
        handle: LockHandle,
        sent_at: Millis,
        input: Answer,
    ) {
        let answer = self.read(
            core,
            (&handle.name, &handle.owner),
            &input,
            codec::parse_resume,
        );
        let validity = codec::lease_validity;
        core.resumed(now, op, handle, sent_at, answer, validity);
    }

    /// The answer of an inspect: the row's holder, if any.
    pub(super) fn on_inspect(&mut self, core: &mut Core, op: OpId, name: String, input: Answer) {
        match self.read(core, (&name, ""), &input, codec::parse_inspect) {
            Ok(a) => {
                let held = a.pttl_ms.is_some();
                let holders = if held {
                    vec![Holder {
                        fencing_token: a.version,
                        ..Holder::default()
                    }]
                } else {
                    Vec::new()
                };
                let status = LockStatus {
                    name,
                    held,
                    holder: None,
                    fencing_token: a.version,
                    remaining_ms: a.pttl_ms,
                    waiters: Vec::new(),
                    limit: None,
                    holders,
                    queued: Vec::new(),
                };
                core.rt.out.complete(op, Ok(Outcome::Inspected(status)));
            }
            Err(e) => core.rt.out.fail(op, e),
        }
    }

    /// Routes the answer of one of d1's own batches.
    pub(super) fn dispatch(&mut self, core: &mut Core, now: Millis, owner: Req, input: Answer) {
        match owner {
            Req::Acquire { op, sent_at } => self.on_acquire(core, (now, sent_at), op, input),
            Req::Release { op, lock } => self.on_release(core, op, lock, input),
            Req::Leave { op, name } => self.on_leave(core, op, name),
            Req::Resume {
                op,
                handle,
                sent_at,
            } => self.on_resume(core, now, op, handle, sent_at, input),
            Req::Inspect { op, name } => self.on_inspect(core, op, name, input),
        }
    }
}
