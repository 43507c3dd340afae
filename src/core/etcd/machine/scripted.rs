//! Test support: an [`EtcdMachine`] driven by hand, its requests read as
//! JSON and hand-written etcd replies fed back (the permits' and the
//! read-write lock's machine tests).

use super::EtcdMachine;
use crate::core::etcd::EtcdConfig;
use crate::core::{
    AcquireOptions, Event, Input, LockError, LockKind, LockMachine, Millis, Operation, Outcome,
    RequestId, SeededEntropy, Transmit, Wait,
};

use serde_json::{json, Value};

/// The session lease every scripted machine is granted.
pub(super) const LEASE: i64 = 0x1f;

pub(super) struct Script {
    pub(super) m: EtcdMachine,
    pub(super) now: Millis,
}

impl Script {
    /// A machine whose acquire of `name` (`kind`, `wait`) has sent its txn
    /// on session lease [`LEASE`]; returns it, the txn's id and body.
    pub(super) fn acquiring(name: &str, kind: LockKind, wait: Wait) -> (Script, RequestId, Value) {
        let mut m = EtcdMachine::new(
            EtcdConfig::new(vec!["http://127.0.0.1:2379".into()]),
            Box::new(SeededEntropy::new(3)),
        )
        .unwrap();
        m.start(
            1_000,
            Operation::Acquire {
                name: name.into(),
                kind,
                options: AcquireOptions { wait, ttl_ms: None },
            },
        )
        .unwrap();
        let mut s = Script { m, now: 1_000 };
        let grant = s.sent("/v3/lease/grant");
        s.reply(grant.0, json!({ "ID": LEASE.to_string(), "TTL": "10" }));
        let (id, txn) = s.sent("/v3/kv/txn");
        (s, id, txn)
    }

    /// A fresh machine (nothing sent yet) at time 1000.
    pub(super) fn fresh() -> Script {
        let m = EtcdMachine::new(
            EtcdConfig::new(vec!["http://127.0.0.1:2379".into()]),
            Box::new(SeededEntropy::new(3)),
        )
        .unwrap();
        Script { m, now: 1_000 }
    }

    /// A machine whose campaign for `name` (announcing `value`) has sent
    /// its txn on session lease [`LEASE`]; returns it, the txn's id and body.
    pub(super) fn campaigning(name: &str, value: &str, wait: Wait) -> (Script, RequestId, Value) {
        let mut s = Script::fresh();
        s.m.start(
            s.now,
            Operation::Campaign {
                name: name.into(),
                value: value.into(),
                options: AcquireOptions { wait, ttl_ms: None },
            },
        )
        .unwrap();
        let grant = s.sent("/v3/lease/grant");
        s.reply(grant.0, json!({ "ID": LEASE.to_string(), "TTL": "10" }));
        let (id, txn) = s.sent("/v3/kv/txn");
        (s, id, txn)
    }

    /// The next request sent, which must go to `path`: its id and body.
    pub(super) fn sent(&mut self, path: &str) -> (RequestId, Value) {
        loop {
            match self.m.poll_transmit() {
                Some(Transmit::Send(r)) => {
                    assert!(
                        r.target.to_string().ends_with(path),
                        "expected {path}, sent {}",
                        r.target
                    );
                    return (r.id, serde_json::from_slice(&r.body).unwrap());
                }
                Some(t @ (Transmit::Open(_) | Transmit::Write { .. })) => {
                    panic!("an HTTP machine opened a byte stream: {t:?}")
                }
                Some(Transmit::Cancel(_)) => continue,
                None => panic!("nothing sent (expected {path})"),
            }
        }
    }

    pub(super) fn reply(&mut self, id: RequestId, body: Value) {
        self.now += 5;
        self.m.handle_input(
            self.now,
            Input::Response {
                id,
                status: 200,
                body: serde_json::to_vec(&body).unwrap(),
            },
        );
    }

    pub(super) fn txn_reply(
        &mut self,
        id: RequestId,
        revision: i64,
        succeeded: bool,
        responses: Vec<Value>,
    ) {
        self.reply(id, json!({ "header": { "revision": revision.to_string() }, "succeeded": succeeded, "responses": responses }));
    }

    pub(super) fn completed(&mut self) -> Result<Outcome, LockError> {
        loop {
            match self.m.poll_event() {
                Some(Event::Completed { result, .. }) => return result,
                Some(_) => continue,
                None => panic!("the operation did not complete"),
            }
        }
    }

    pub(super) fn nothing_completed(&mut self) {
        assert!(
            !std::iter::from_fn(|| self.m.poll_event())
                .any(|e| matches!(e, Event::Completed { .. })),
            "completed too early"
        );
    }
}

/// A txn response's range of `kvs`.
pub(super) fn range(kvs: Vec<Value>) -> Value {
    json!({ "response_range": { "header": {}, "kvs": kvs } })
}
