//! An acquire that gives up (not acquired, an error, a cancel, its wait
//! bound) removes the key it may have put, then reports; a key whose
//! removal fails goes to the orphans (deleted in the background).

use super::super::super::{EtcdMachine, Failure, Orphan, ORPHAN_RETRY_MS};
use super::super::Next;
use super::{permits, AcqPhase, Acquire, Ending};
use crate::core::etcd::gateway::{self as gw, TxnResponse};
use crate::core::{Millis, OpId, RequestId};

impl Acquire {
    /// Remove our key (if it may exist), then report `ending`. `req` is the
    /// request in flight, if any (none when an answer is being handled).
    pub(in crate::core::etcd::machine) fn cleanup(
        mut self,
        m: &mut EtcdMachine,
        now: Millis,
        op: OpId,
        req: Option<RequestId>,
        ending: Ending,
    ) -> Next {
        m.set_recheck(op, None);
        if matches!(
            self.phase,
            AcqPhase::Txn | AcqPhase::RemoveStale | AcqPhase::Claim
        ) && req.is_some()
        {
            // The txn in flight may still apply after anything we send now:
            // wait for its answer, which tells exactly which key to delete.
            self.ending = Some(ending);
            return Next::keep(self, req);
        }
        if self.phase == AcqPhase::Claim {
            // The claim's answer was an error: its slot key may exist.
            self.phase = AcqPhase::Watch;
            self.forget_unanswered_claim(m, now);
        }
        let has_key = matches!(
            self.phase,
            AcqPhase::Txn | AcqPhase::Predecessor | AcqPhase::Watch
        );
        if !has_key || self.lease.is_none() {
            m.cancel_request(req);
            return self.finish(m, now, op, None, ending);
        }
        self.phase = AcqPhase::Cleanup;
        self.ending = Some(ending);
        let (path, body) = self.delete_body();
        m.cancel_request(req);
        Next::send(self, path, body)
    }

    /// The request that deletes our key (and a slot a claim got): exactly
    /// that incarnation when its revision is known, else whatever is there.
    fn delete_body(&self) -> (&'static str, serde_json::Value) {
        let claimed = self
            .kind
            .permit()
            .and_then(|p| p.claimed)
            .map(|(slot, rev)| (permits::slot_key(&self.lock_prefix, slot), rev));
        match claimed {
            Some((slot_key, rev)) if self.my_rev > 0 => (
                "/v3/kv/txn",
                gw::delete_all_if_revisions(&[(&self.key, self.my_rev), (&slot_key, rev)]),
            ),
            _ if self.my_rev > 0 => ("/v3/kv/txn", gw::delete_if_revision(&self.key, self.my_rev)),
            _ => ("/v3/kv/deleterange", gw::delete_key(&self.key)),
        }
    }

    /// The answer to the txn that was in flight when the acquire was cancelled:
    /// learn our key's revision from it (if it applied) and delete exactly that.
    pub(in crate::core::etcd::machine) fn cleanup_after_txn(
        mut self,
        m: &mut EtcdMachine,
        now: Millis,
        op: OpId,
        phase: AcqPhase,
        ending: Ending,
        result: Result<(u16, Vec<u8>), Failure>,
    ) -> Next {
        let txn = result
            .ok()
            .and_then(|(s, b)| gw::parse::<TxnResponse>(s, &b).ok());
        if phase == AcqPhase::RemoveStale {
            // Nothing of this attempt was created.
            self.phase = AcqPhase::NeedLease;
            return self.finish(m, now, op, None, ending);
        }
        if phase == AcqPhase::Claim {
            self.claim_answered(m, now, txn);
            return self.cleanup(m, now, op, None, ending);
        }
        match txn {
            Some(t) if t.succeeded && t.header.revision > 0 => self.my_rev = t.header.revision,
            Some(t) => match t
                .range(0)
                .and_then(|r| r.kvs.iter().find(|kv| kv.key == self.key))
            {
                // 0 = unknown revision: cleanup deletes whatever is there.
                Some(kv) => self.my_rev = kv.create_revision.max(0),
                None => {
                    // Definitely nothing created.
                    self.phase = AcqPhase::NeedLease;
                    return self.finish(m, now, op, None, ending);
                }
            },
            None => self.my_rev = 0, // unknown outcome: delete whatever is there
        }
        self.phase = AcqPhase::Watch; // "may have a key": cleanup deletes it
        self.cleanup(m, now, op, None, ending)
    }

    /// A claim answered while the acquire was giving up. Our key exists at
    /// `my_rev`. A claim that applied is undone with it in one txn; one
    /// whose outcome is unknown is deleted in the background (comparing
    /// the value: a slot we did not get is left alone).
    fn claim_answered(&mut self, m: &mut EtcdMachine, now: Millis, txn: Option<TxnResponse>) {
        self.phase = AcqPhase::Watch;
        match txn {
            Some(t) if t.succeeded && t.header.revision > 0 => {
                if let Some(p) = self.kind.permit_mut() {
                    p.claimed = p.claiming.take().map(|slot| (slot, t.header.revision));
                }
            }
            Some(_) => {
                if let Some(p) = self.kind.permit_mut() {
                    p.claiming = None;
                }
            }
            None => self.forget_unanswered_claim(m, now),
        }
    }

    /// Our key's deletion answered: report; a failed one leaves the key
    /// (and a claimed slot) to the orphans, the name busy meanwhile.
    pub(in crate::core::etcd::machine) fn on_cleanup_reply(
        self,
        m: &mut EtcdMachine,
        now: Millis,
        op: OpId,
        result: Result<(u16, Vec<u8>), Failure>,
    ) -> Next {
        let ending = self.ending.clone().unwrap_or(Ending::NotAcquired);
        if matches!(&result, Ok((s, _)) if (200..300).contains(s)) {
            return self.finish(m, now, op, None, ending);
        }
        // Keep the name busy and retry in the background; report now.
        let orphan = Orphan {
            name: self.name.clone(),
            key: self.key.clone(),
            rev: (self.my_rev > 0).then_some(self.my_rev),
            value: None,
            holds_name: self.claims_name(),
            lease: self.lease.unwrap_or(0),
            retry_at: now + ORPHAN_RETRY_MS,
            req: None,
        };
        if let Some((slot, rev)) = self.kind.permit().and_then(|p| p.claimed) {
            m.orphans.push(Orphan {
                name: orphan.name.clone(),
                key: permits::slot_key(&self.lock_prefix, slot),
                rev: Some(rev),
                value: None,
                holds_name: false,
                lease: orphan.lease,
                retry_at: orphan.retry_at,
                req: None,
            });
        }
        m.orphans.push(orphan);
        m.arm_orphans();
        m.report_ending(op, &self.name, ending);
        Next::Done
    }

    /// Ends the acquire without a hold: its timers, its request (`req`, if
    /// one is in flight), its report, and its name (the next local waiter's).
    pub(in crate::core::etcd::machine) fn finish(
        self,
        m: &mut EtcdMachine,
        now: Millis,
        op: OpId,
        req: Option<RequestId>,
        ending: Ending,
    ) -> Next {
        m.clear_acquire_timers(op);
        m.cancel_request(req);
        m.report_ending(op, &self.name, ending);
        if !self.claims_name() {
            // Permits and shared holds never claim their name locally.
        } else if self.phase == AcqPhase::LocalQueue {
            m.unqueue_local(&self.name, op);
        } else {
            m.free_name(now, &self.name);
        }
        Next::Done
    }

    /// A permit acquire is giving up while a claim's outcome is unknown:
    /// the slot key it may have created (with our value) is deleted in the
    /// background, like any key whose deletion is not confirmed yet.
    pub(in crate::core::etcd::machine) fn forget_unanswered_claim(
        &mut self,
        m: &mut EtcdMachine,
        now: Millis,
    ) {
        let Some(p) = self.kind.permit_mut() else {
            return;
        };
        let Some(slot) = p.claiming.take() else {
            return;
        };
        let orphan = Orphan {
            name: self.name.clone(),
            key: permits::slot_key(&self.lock_prefix, slot),
            rev: None,
            value: Some(self.nonce.clone()),
            holds_name: false,
            lease: self.lease.unwrap_or(0),
            retry_at: now,
            req: None,
        };
        m.orphans.push(orphan);
        m.arm_orphans();
    }
}
