//! What the lock service's answers do, besides the waiting acquire's
//! (`acquire`): releases, resumes and inspects, each read strictly by the
//! codec and turned into outcomes.

use super::super::codec;
use super::{Core, Durable, Req, BACKEND};
use crate::core::lease::{Answer, Held};
use crate::core::{Holder, LockError, LockHandle, LockKind, LockStatus, Millis, OpId, Outcome};

impl Durable {
    /// The answer of a release: a user's release (of `lock`) is answered;
    /// a cancelled acquire's (`abort`: its name) ends `Aborted`.
    pub(super) fn on_release(
        &mut self,
        core: &mut Core,
        op: Option<OpId>,
        lock: Option<Held>,
        abort: Option<String>,
        input: Answer,
    ) {
        if let Some(name) = abort {
            // A cancelled acquire: it ends `Aborted` whatever the answer.
            if let Some(op) = op {
                core.rt.out.fail(
                    op,
                    LockError::Aborted {
                        backend: BACKEND,
                        name,
                    },
                );
            }
            return;
        }
        let (Some(op), Some(h)) = (op, lock) else {
            return;
        };
        let answer = self.read(core, (&h.name, &h.owner), &input, codec::parse_release);
        core.released(op, h, answer);
    }

    /// The answer of a resume: the lock held again, if the service still
    /// holds it for the handle's owner, as the handle's kind and slot.
    pub(super) fn on_resume(
        &mut self,
        core: &mut Core,
        now: Millis,
        op: OpId,
        handle: LockHandle,
        sent_at: Millis,
        input: Answer,
    ) {
        let answer = self
            .read(
                core,
                (&handle.name, &handle.owner),
                &input,
                codec::parse_resume,
            )
            .and_then(|r| match r {
                None => Ok(None),
                // A service that does not say the kind holds exclusive locks only.
                Some(r) if r.kind.unwrap_or(LockKind::Exclusive) != handle.kind => {
                    Err(LockError::invalid(format!(
                        "the handle is of a {} hold, the lock service holds it as a {}",
                        handle.kind.describe(),
                        r.kind.unwrap_or(LockKind::Exclusive).describe()
                    )))
                }
                Some(r) if r.slot != handle.slot => Err(LockError::invalid(
                    "the handle's slot is not the one the lock service holds",
                )),
                Some(r) => Ok(Some(r.pttl_ms)),
            });
        let validity = codec::lease_validity;
        core.resumed(now, op, handle, sent_at, answer, validity);
    }

    /// The answer of an inspect: the holders and the queue's length.
    pub(super) fn on_inspect(&mut self, core: &mut Core, op: OpId, name: String, input: Answer) {
        match self.read(core, (&name, ""), &input, codec::parse_inspect) {
            Ok(a) => {
                let holders = if !a.holders.is_empty() {
                    a.holders
                        .iter()
                        .map(|h| Holder {
                            kind: h.kind,
                            slot: h.slot,
                            fencing_token: Some(h.token),
                            ..Holder::default()
                        })
                        .collect()
                } else if a.held {
                    vec![Holder {
                        fencing_token: a.token,
                        ..Holder::default()
                    }]
                } else {
                    Vec::new()
                };
                let queued = (0..a.waiters).map(|_| Holder::default()).collect();
                let status = LockStatus {
                    name,
                    held: a.held,
                    holder: None,
                    fencing_token: a.token,
                    remaining_ms: if a.held { a.pttl_ms } else { None },
                    waiters: Vec::new(),
                    limit: a.limit,
                    holders,
                    queued,
                };
                core.rt.out.complete(op, Ok(Outcome::Inspected(status)));
            }
            Err(e) => core.rt.out.fail(op, e),
        }
    }

    /// Routes the answer of one of the service's own requests.
    pub(super) fn dispatch(&mut self, core: &mut Core, now: Millis, owner: Req, input: Answer) {
        match owner {
            Req::Acquire { op, sent_at } => self.on_acquire(core, now, op, sent_at, input),
            Req::Confirm {
                op,
                token,
                slot,
                sent_at,
            } => self.on_confirm(core, (now, sent_at), op, (token, slot), input),
            Req::Release { op, lock, abort } => self.on_release(core, op, lock, abort, input),
            Req::Leave { op, name, owner } => self.on_leave(core, now, (op, name, owner), input),
            Req::Resume {
                op,
                handle,
                sent_at,
            } => self.on_resume(core, now, op, handle, sent_at, input),
            Req::Inspect { op, name } => self.on_inspect(core, op, name, input),
        }
    }
}
