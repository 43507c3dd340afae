//! `MultiLock` around a machine that takes whole sets atomically (etcd,
//! `Capabilities::atomic_sets`) with scripted etcd answers: the atomic try
//! first, the one-by-one recipe as its fallback.

use serde_json::{json, Value};

use super::*;
use crate::core::etcd::{EtcdConfig, EtcdMachine};
use crate::core::types::{RequestId, TransportError};
use crate::core::{b64, LockMachineExt, SeededEntropy};

const LEASE: &str = "31"; // 0x1f

struct Harness {
    m: MultiLock<EtcdMachine>,
    now: Millis,
    events: Vec<Event>,
}

fn harness() -> Harness {
    let inner = EtcdMachine::new(
        EtcdConfig::new(vec!["http://127.0.0.1:2379".into()]),
        Box::new(SeededEntropy::new(3)),
    )
    .unwrap();
    Harness {
        m: MultiLock::new(inner),
        now: 1_000,
        events: Vec::new(),
    }
}

fn all(names: &[&str], wait: Wait) -> Operation {
    Operation::AcquireAll {
        names: names.iter().map(|n| n.to_string()).collect(),
        options: AcquireOptions { wait, ttl_ms: None },
    }
}

fn unb64(v: &Value) -> String {
    String::from_utf8(b64::decode(v.as_str().unwrap_or_default().as_bytes()).unwrap()).unwrap()
}

/// A request as (path, body).
struct Sent {
    id: RequestId,
    path: String,
    body: Value,
}

impl Sent {
    /// The keys the txn puts.
    fn puts(&self) -> Vec<String> {
        self.body["success"]
            .as_array()
            .map(|ops| {
                ops.iter()
                    .filter(|o| o.get("request_put").is_some())
                    .map(|o| unb64(&o["request_put"]["key"]))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Whether this is the atomic set txn (a compare over a key range).
    fn is_set_txn(&self) -> bool {
        self.body["compare"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c.get("range_end").is_some()))
    }
}

impl Harness {
    fn sent(&mut self) -> Vec<Sent> {
        let mut out = Vec::new();
        while let Some(t) = self.m.poll_transmit() {
            if let Transmit::Send(r) = t {
                out.push(Sent {
                    id: r.id,
                    path: r.target.to_string(),
                    body: serde_json::from_slice(&r.body).unwrap(),
                });
            }
        }
        out
    }

    fn one(&mut self, path: &str) -> Sent {
        let mut s = self.sent();
        assert_eq!(
            s.len(),
            1,
            "{:?}",
            s.iter().map(|s| &s.path).collect::<Vec<_>>()
        );
        let s = s.remove(0);
        assert!(s.path.ends_with(path), "{} is not {path}", s.path);
        s
    }

    fn reply(&mut self, id: RequestId, body: Value) {
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

    fn txn(&mut self, id: RequestId, rev: i64, succeeded: bool, responses: Vec<Value>) {
        self.reply(
            id,
            json!({ "header": { "revision": rev.to_string() }, "succeeded": succeeded, "responses": responses }),
        );
    }

    fn grant(&mut self) {
        let g = self.one("/v3/lease/grant");
        self.reply(g.id, json!({ "ID": LEASE, "TTL": "10" }));
    }

    fn events(&mut self) -> Vec<Event> {
        while let Some(e) = self.m.poll_event() {
            self.events.push(e);
        }
        std::mem::take(&mut self.events)
    }

    /// The only completion so far, which must be `op`'s.
    fn completed(&mut self, op: OpId) -> Result<Outcome, LockError> {
        let events = self.events();
        assert_eq!(events.len(), 1, "{events:?}");
        match events.into_iter().next().unwrap() {
            Event::Completed { op: got, result } => {
                assert_eq!(got, op);
                result
            }
            e => panic!("{e:?}"),
        }
    }
}

fn empty_ranges(n: usize) -> Vec<Value> {
    (0..n)
        .map(|_| json!({ "response_range": { "header": {}, "kvs": [] } }))
        .collect()
}

#[test]
fn the_machine_declares_atomic_sets_and_the_layer_does_not() {
    let h = harness();
    assert!(h.m.inner().capabilities().atomic_sets);
    assert!(!h.m.capabilities().atomic_sets);
}

#[test]
fn a_free_set_is_one_txn_and_the_group_completes_with_its_locks() {
    let mut h = harness();
    let group =
        h.m.start(h.now, all(&["c", "a", "b"], Wait::Forever))
            .unwrap();
    h.grant();
    let t = h.one("/v3/kv/txn");
    assert!(t.is_set_txn());
    assert_eq!(
        t.puts(),
        ["edgelock/c/1f", "edgelock/a/1f", "edgelock/b/1f"]
    );
    h.txn(t.id, 77, true, vec![json!({ "response_put": {} }); 3]);
    let locks = h
        .completed(group)
        .unwrap()
        .into_acquired_all()
        .unwrap()
        .unwrap();
    let got: Vec<(&str, u64)> = locks
        .iter()
        .map(|l| (l.name.as_str(), l.fencing_token))
        .collect();
    assert_eq!(got, [("c", 77), ("a", 77), ("b", 77)]);
    assert!(h.sent().is_empty(), "one request in all");
    assert_eq!(h.m.groups_in_progress(), 0);
    // Each lock is released by its own id, with an id never the group's.
    let r = h.m.release(h.now, locks[0].id).unwrap();
    assert_ne!(r, group);
}

#[test]
fn a_try_against_a_held_name_is_not_acquired_with_nothing_taken() {
    let mut h = harness();
    let group = h.m.start(h.now, all(&["a", "b"], Wait::Try)).unwrap();
    h.grant();
    let t = h.one("/v3/kv/txn");
    h.txn(t.id, 9, false, empty_ranges(2));
    assert_eq!(h.completed(group), Ok(Outcome::NotAcquired));
    assert!(h.sent().is_empty(), "no acquire and no release");
    assert_eq!(h.m.live_count(), 0);
}

#[test]
fn a_waiting_set_falls_back_to_the_names_one_by_one_in_canonical_order() {
    let mut h = harness();
    let group = h.m.start(h.now, all(&["b", "a"], Wait::Forever)).unwrap();
    h.grant();
    let t = h.one("/v3/kv/txn");
    h.txn(t.id, 9, false, empty_ranges(2));
    assert!(h.events().is_empty());
    // The recipe: "a" first, as an ordinary acquire (its own txn).
    let a = h.one("/v3/kv/txn");
    assert!(!a.is_set_txn());
    assert_eq!(a.puts(), ["edgelock/a/1f"]);
    let kv = |key: &str, rev: i64| {
        json!({ "key": b64::encode(key.as_bytes()), "create_revision": rev.to_string(),
                "mod_revision": rev.to_string(), "value": "", "lease": LEASE })
    };
    let granted = |key: &str, rev: i64| {
        vec![
            json!({ "response_put": {} }),
            json!({ "response_range": { "kvs": [kv(key, rev)] } }),
            json!({ "response_range": { "kvs": [kv(key, rev)] } }),
        ]
    };
    h.txn(a.id, 10, true, granted("edgelock/a/1f", 10));
    let b = h.one("/v3/kv/txn");
    assert_eq!(b.puts(), ["edgelock/b/1f"]);
    h.txn(b.id, 11, true, granted("edgelock/b/1f", 11));
    let locks = h
        .completed(group)
        .unwrap()
        .into_acquired_all()
        .unwrap()
        .unwrap();
    let got: Vec<(&str, u64)> = locks
        .iter()
        .map(|l| (l.name.as_str(), l.fencing_token))
        .collect();
    assert_eq!(got, [("b", 11), ("a", 10)]);
}

#[test]
fn an_error_of_the_atomic_try_completes_the_group_with_it() {
    let mut h = harness();
    let group = h.m.start(h.now, all(&["a", "b"], Wait::Forever)).unwrap();
    h.grant();
    let t = h.one("/v3/kv/txn");
    for id in [t.id, RequestId(0)] {
        let id = if id == RequestId(0) {
            h.one("/v3/kv/txn").id // the retry
        } else {
            id
        };
        h.m.handle_input(
            h.now,
            Input::Failed {
                id,
                error: TransportError::Timeout,
            },
        );
    }
    // What it may have put is deleted first.
    assert!(h.events().is_empty());
    let d = h.one("/v3/kv/txn");
    h.txn(d.id, 13, false, vec![]);
    let e = h.completed(group).unwrap_err();
    assert!(matches!(e, LockError::Transport { .. }), "{e}");
    assert_eq!(h.m.groups_in_progress(), 0);
}

#[test]
fn a_cancel_during_the_atomic_try_aborts_the_group_once_with_nothing_held() {
    let mut h = harness();
    let group = h.m.start(h.now, all(&["a", "b"], Wait::Forever)).unwrap();
    h.grant();
    let t = h.one("/v3/kv/txn");
    h.m.cancel(h.now, group);
    assert!(h.events().is_empty(), "the txn's answer is awaited");
    h.txn(t.id, 12, true, vec![json!({ "response_put": {} }); 2]);
    // The keys the txn put are deleted before the group completes.
    assert!(h.events().is_empty());
    let d = h.one("/v3/kv/txn");
    h.txn(d.id, 13, true, vec![]);
    let e = h.completed(group).unwrap_err();
    assert!(matches!(e, LockError::Aborted { .. }), "{e}");
    assert_eq!(h.m.groups_in_progress(), 0);
    assert!(h.sent().is_empty());
    assert_eq!(h.m.live_count(), 0);
}
