//! Inspect: one range of the name's keys (oldest first) tells who holds it
//! and who waits (a semaphore's or a read-write lock's holders too); a
//! second request reads the oldest holder's lease TTL for `remaining_ms`.

use super::super::{election, permits, shared, EtcdMachine, Failure};
use super::{Next, Reply};
use crate::core::etcd::gateway::{self as gw, KeyValue, LeaseTtl, RangeResponse};
use crate::core::runtime::small_sort;
use crate::core::{LockStatus, OpId, Outcome};

pub(in super::super) enum InspectOp {
    /// The range of the name's keys is in flight.
    Reading { name: String },
    /// The holder's lease TTL is in flight; `status` is all else.
    HolderLease { status: LockStatus },
}

impl InspectOp {
    /// The range of `name`'s keys, oldest first.
    pub(in super::super) fn start(m: &EtcdMachine, name: &str) -> Next {
        let body = gw::range_prefix_ascending(&m.lock_prefix(name));
        let state = InspectOp::Reading {
            name: name.to_string(),
        };
        Next::send(state, "/v3/kv/range", body)
    }

    /// The name inspected, if the state still knows it.
    pub(in super::super) fn name(&self) -> &str {
        match self {
            InspectOp::Reading { name } => name,
            InspectOp::HolderLease { status } => &status.name,
        }
    }

    pub(in super::super) fn step(self, m: &mut EtcdMachine, op: OpId, reply: Reply) -> Next {
        match self {
            InspectOp::Reading { name } => on_range(m, op, name, reply),
            InspectOp::HolderLease { mut status } => {
                if let Ok((s, b)) = reply.result {
                    if let Ok(t) = gw::parse::<LeaseTtl>(s, &b) {
                        status.remaining_ms =
                            (t.TTL > 0).then(|| (t.TTL as u64).saturating_mul(1000));
                    }
                }
                m.rt.out.complete(op, Ok(Outcome::Inspected(status)));
                Next::Done
            }
        }
    }
}

fn on_range(m: &mut EtcdMachine, op: OpId, name: String, reply: Reply) -> Next {
    let parsed = reply
        .result
        .and_then(|(s, b)| gw::parse::<RangeResponse>(s, &b).map_err(Failure::Gateway));
    let mut kvs = match parsed {
        Ok(r) => r.kvs,
        Err(f) => {
            let error = m.backend_error(&name, f);
            m.rt.out.fail(op, error);
            return Next::Done;
        }
    };
    small_sort::sort_by_key(&mut kvs, |kv| kv.create_revision);
    let (status, holder) = status_of(&name, &m.lock_prefix(&name), &kvs);
    match holder {
        Some(h) if h.lease != 0 => {
            let body = gw::lease_id(h.lease);
            Next::send(
                InspectOp::HolderLease { status },
                "/v3/lease/timetolive",
                body,
            )
        }
        _ => {
            m.rt.out.complete(op, Ok(Outcome::Inspected(status)));
            Next::Done
        }
    }
}

/// The name's status from its keys (oldest first), and the key whose lease
/// tells how long the status lasts.
fn status_of(name: &str, lock_prefix: &[u8], kvs: &[KeyValue]) -> (LockStatus, Option<KeyValue>) {
    match permits::semaphore_status(name, lock_prefix, kvs) {
        Some(st) => {
            let oldest = st
                .holders
                .first()
                .and_then(|h| kvs.iter().find(|kv| kv.key == h.id.as_bytes()).cloned());
            (st, oldest)
        }
        None => {
            // An exclusive holder, or the readers ahead of the oldest writer.
            let st = shared::rw_status(name, lock_prefix, kvs, election::is_leader_value);
            (st, kvs.first().cloned())
        }
    }
}
