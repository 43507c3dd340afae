//! Machine-level tests with scripted answers of the binding (the SQL itself
//! runs in D1 in the Worker suite, tests/worker/d1.test.mjs).

use super::*;
use crate::core::*;

struct Harness {
    m: Box<dyn LockMachine + Send>,
    now: Millis,
    sent: Vec<HttpRequest>,
    cancelled: Vec<RequestId>,
    events: Vec<Event>,
}

impl Harness {
    fn new(cfg: D1Config) -> Self {
        let m = D1Machine::new(cfg, Box::new(SeededEntropy::new(7))).unwrap();
        Harness {
            m: Box::new(m),
            now: 1_000,
            sent: Vec::new(),
            cancelled: Vec::new(),
            events: Vec::new(),
        }
    }

    fn drain(&mut self) {
        while let Some(t) = self.m.poll_transmit() {
            match t {
                Transmit::Send(r) => self.sent.push(r),
                t @ (Transmit::Open(_) | Transmit::Write { .. }) => {
                    panic!("an HTTP machine opened a byte stream: {t:?}")
                }
                Transmit::Cancel(id) => self.cancelled.push(id),
            }
        }
        while let Some(e) = self.m.poll_event() {
            self.events.push(e);
        }
    }

    fn take(&mut self) -> Vec<HttpRequest> {
        self.drain();
        std::mem::take(&mut self.sent)
    }

    fn one(&mut self) -> HttpRequest {
        let mut sent = self.take();
        assert_eq!(sent.len(), 1, "{sent:?}");
        sent.remove(0)
    }

    fn respond(&mut self, req: &HttpRequest, status: u16, body: &str) {
        self.m.handle_input(
            self.now,
            Input::Response {
                id: req.id,
                status,
                body: body.as_bytes().to_vec(),
            },
        );
        self.drain();
    }

    fn answer(&mut self, req: &HttpRequest, body: &str) {
        self.respond(req, 200, body);
    }

    fn advance_to(&mut self, t: Millis) {
        self.now = t;
        self.m.handle_timeout(t);
        self.drain();
    }

    fn take_events(&mut self) -> Vec<Event> {
        self.drain();
        std::mem::take(&mut self.events)
    }

    fn completed(&mut self, op: OpId) -> Result<Outcome, LockError> {
        let events = self.take_events();
        let mut found = None;
        for e in events {
            match e {
                Event::Completed { op: o, result } if o == op => found = Some(result),
                other => self.events.push(other),
            }
        }
        found.unwrap_or_else(|| panic!("{op:?} did not complete; events: {:?}", self.events))
    }

    fn acquire(&mut self, name: &str, wait: Wait) -> OpId {
        self.m
            .acquire(self.now, name, &AcquireOptions { wait, ttl_ms: None })
            .unwrap()
    }

    fn hold(&mut self, name: &str, token: u64) -> LockInfo {
        let op = self.acquire(name, Wait::Try);
        let req = self.one();
        self.answer(&req, &granted(token, 10_000));
        self.completed(op)
            .unwrap()
            .into_acquired()
            .unwrap()
            .unwrap()
    }
}

fn granted(version: u64, pttl: u64) -> String {
    format!(
        r#"{{"results":[{{"rows":[],"changes":0}},{{"rows":[],"changes":1}},{{"rows":[{{"mine":1,"version":{version},"pttl":{pttl}}}],"changes":0}}]}}"#
    )
}

fn busy(version: u64, pttl: u64) -> String {
    format!(
        r#"{{"results":[{{"rows":[],"changes":0}},{{"rows":[],"changes":0}},{{"rows":[{{"mine":0,"version":{version},"pttl":{pttl}}}],"changes":0}}]}}"#
    )
}

fn changes(n: u64) -> String {
    format!(r#"{{"results":[{{"rows":[],"changes":0}},{{"rows":[],"changes":{n}}}]}}"#)
}

fn rows(rows: &str) -> String {
    format!(r#"{{"results":[{{"rows":[],"changes":0}},{{"rows":{rows},"changes":0}}]}}"#)
}

fn statements(req: &HttpRequest) -> Vec<(String, Vec<serde_json::Value>)> {
    let v: serde_json::Value = serde_json::from_slice(&req.body).unwrap();
    v["statements"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["sql"].as_str().unwrap().to_string(),
                s["params"].as_array().unwrap().clone(),
            )
        })
        .collect()
}

#[test]
fn an_acquire_is_one_batch_and_the_grant_token_is_the_row_version() {
    let mut h = Harness::new(D1Config::new("DB"));
    let op = h.acquire("jobs/a \"b\"", Wait::Try);
    let req = h.one();
    assert_eq!(
        req.target,
        Target::Binding {
            name: "DB".into(),
            path: "/d1/batch".into()
        }
    );
    assert_eq!(req.method, Method::Post);
    let st = statements(&req);
    assert_eq!(st.len(), 3);
    assert!(st[0]
        .0
        .starts_with("CREATE TABLE IF NOT EXISTS edgelock_locks "));
    assert!(
        st[1].0.starts_with("INSERT INTO edgelock_locks"),
        "{}",
        st[1].0
    );
    assert!(st[1].0.contains("version = edgelock_locks.version + 1"));
    assert!(st[1].0.contains("julianday('now')"));
    assert_eq!(st[1].1[0], "jobs/a \"b\"");
    let owner = st[1].1[1].as_str().unwrap().to_string();
    assert_eq!(owner.len(), 32);
    assert_eq!(st[1].1[2], 10_000);
    assert!(st[2].0.starts_with("SELECT"));
    assert!(!st[2].0.contains("SELECT owner"));
    h.answer(&req, &granted(7, 10_000));
    let info = h.completed(op).unwrap().into_acquired().unwrap().unwrap();
    assert_eq!(info.fencing_token, 7);
    assert_eq!(info.expires_at, 1_000 + 10_000 - 102);
    assert_eq!(info.handle.backend, BackendKind::D1);
    assert_eq!(info.handle.owner, owner);
    let json = serde_json::to_string(&info.handle).unwrap();
    assert!(json.contains(r#""backend":"d1""#), "{json}");
    assert_eq!(LockHandle::from_json(&json).unwrap(), info.handle);
}

#[test]
fn a_try_on_a_held_lock_is_not_acquired() {
    let mut h = Harness::new(D1Config::new("DB"));
    let op = h.acquire("a", Wait::Try);
    let req = h.one();
    h.answer(&req, &busy(3, 4_000));
    assert_eq!(h.completed(op).unwrap(), Outcome::NotAcquired);
    assert!(h.take().is_empty());
    assert_eq!(h.m.live_count(), 0);
}

#[test]
fn a_waiter_polls_after_the_holders_remaining_lease_capped_with_jitter() {
    let mut cfg = D1Config::new("DB");
    cfg.retry_delay_ms = 1_000;
    cfg.retry_jitter_ms = 0;
    let mut h = Harness::new(cfg);
    let op = h.acquire("a", Wait::For(5_000));
    let req = h.one();
    let owner = statements(&req)[1].1[1].clone();
    h.answer(&req, &busy(3, 300));
    assert_eq!(h.m.poll_timeout(), Some(1_300));
    h.advance_to(1_300);
    let req = h.one();
    assert_eq!(statements(&req)[1].1[1], owner, "the same owner re-tries");
    h.answer(&req, &busy(3, 60_000));
    assert_eq!(h.m.poll_timeout(), Some(2_300), "capped at retry_delay_ms");
    h.advance_to(2_300);
    let req = h.one();
    h.answer(&req, &granted(4, 10_000));
    let info = h.completed(op).unwrap().into_acquired().unwrap().unwrap();
    assert_eq!(info.fencing_token, 4);
}

#[test]
fn a_wait_that_runs_out_times_out_after_a_last_attempt_at_its_deadline() {
    let mut h = Harness::new(D1Config::new("DB"));
    let op = h.acquire("a", Wait::For(400));
    let req = h.one();
    h.answer(&req, &busy(3, 60_000));
    let t = h.m.poll_timeout().unwrap();
    assert!((1_250..=1_350).contains(&t), "{t}");
    h.advance_to(t);
    let req = h.one();
    h.answer(&req, &busy(3, 60_000));
    assert_eq!(h.m.poll_timeout(), Some(1_400));
    h.advance_to(1_400);
    let req = h.one();
    h.answer(&req, &busy(3, 60_000));
    assert!(matches!(h.completed(op), Err(LockError::Timeout { .. })));
    assert_eq!(h.m.live_count(), 0);
}

#[test]
fn release_and_extend_are_owner_and_version_checked() {
    let mut h = Harness::new(D1Config::new("DB"));
    let info = h.hold("a", 9);
    let owner = info.handle.owner.clone();
    let op = h.m.extend(h.now, info.id, Some(20_000)).unwrap();
    let req = h.one();
    let st = statements(&req);
    assert!(st[1].0.starts_with("UPDATE edgelock_locks SET expires_at"));
    assert!(st[1]
        .0
        .contains("owner = ?2 AND version = ?3 AND expires_at >"));
    assert_eq!(
        st[1].1,
        vec![
            serde_json::json!("a"),
            serde_json::json!(owner),
            serde_json::json!(9),
            serde_json::json!(20_000)
        ]
    );
    h.answer(&req, &changes(1));
    assert!(matches!(h.completed(op), Ok(Outcome::Extended { .. })));
    let op = h.m.release(h.now, info.id).unwrap();
    let req = h.one();
    let st = statements(&req);
    assert!(st[1]
        .0
        .starts_with("UPDATE edgelock_locks SET owner = NULL"));
    assert!(!st[1].0.contains("DELETE"));
    assert_eq!(
        st[1].1,
        vec![
            serde_json::json!("a"),
            serde_json::json!(owner),
            serde_json::json!(9)
        ]
    );
    h.answer(&req, &changes(1));
    assert_eq!(
        h.completed(op).unwrap(),
        Outcome::Released {
            lock: info.id,
            held_until_release: true
        }
    );
    assert_eq!(h.m.live_count(), 0);
}

#[test]
fn a_release_that_changes_nothing_reports_the_lock_was_not_held() {
    let mut h = Harness::new(D1Config::new("DB"));
    let info = h.hold("a", 2);
    let op = h.m.release(h.now, info.id).unwrap();
    let req = h.one();
    h.answer(&req, &changes(0));
    assert_eq!(
        h.completed(op).unwrap(),
        Outcome::Released {
            lock: info.id,
            held_until_release: false
        }
    );
}

#[test]
fn a_renewal_that_changes_nothing_is_a_loss() {
    let mut h = Harness::new(D1Config::new("DB"));
    let info = h.hold("a", 2);
    // Renewal at TTL/3 from the send time.
    assert_eq!(h.m.poll_timeout(), Some(1_000 + 3_333));
    h.advance_to(4_333);
    let req = h.one();
    h.answer(&req, &changes(0));
    let events = h.take_events();
    assert!(
        events.iter().any(|e| matches!(e, Event::Lost { lock, reason: LostReason::KeyGone, .. } if *lock == info.id)),
        "{events:?}"
    );
    assert!(h.take().is_empty(), "nothing to release: it is not ours");
    assert_eq!(h.m.live_count(), 0);
}

#[test]
fn a_lease_that_runs_out_without_renewal_is_lost_and_released() {
    let mut cfg = D1Config::new("DB");
    cfg.auto_extend = false;
    let mut h = Harness::new(cfg);
    let info = h.hold("a", 2);
    h.advance_to(info.expires_at);
    let events = h.take_events();
    assert!(events.iter().any(|e| matches!(
        e,
        Event::Lost {
            reason: LostReason::Expired,
            ..
        }
    )));
    let req = h.one();
    assert!(statements(&req)[1]
        .0
        .starts_with("UPDATE edgelock_locks SET owner = NULL"));
}

#[test]
fn resume_checks_owner_and_version_and_inspect_never_reads_the_owner() {
    let mut h = Harness::new(D1Config::new("DB"));
    let info = h.hold("a", 5);
    let handle = info.handle.clone();
    let mut h2 = Harness::new(D1Config::new("DB"));
    let op = h2.m.resume(h2.now, &handle).unwrap();
    let req = h2.one();
    let st = statements(&req);
    assert!(st[1].0.contains("owner = ?2 AND version = ?3"));
    assert_eq!(st[1].1[2], 5);
    h2.answer(&req, &rows(r#"[{"pttl":8000}]"#));
    let r = h2.completed(op).unwrap().into_acquired().unwrap().unwrap();
    assert_eq!(r.fencing_token, 5);
    assert_eq!(r.expires_at, 1_000 + 8_000 - 82);
    let op = h2.m.resume(h2.now, &handle).unwrap();
    let req = h2.one();
    h2.answer(&req, &rows("[]"));
    assert!(matches!(h2.completed(op), Err(LockError::Lost { .. })));
    let mut other = handle;
    other.backend = BackendKind::DurableObject;
    assert!(h2.m.resume(h2.now, &other).is_err());

    let op = h.m.inspect(h.now, "a").unwrap();
    let req = h.one();
    let st = statements(&req);
    assert!(!st[1].0.contains("SELECT owner") && !st[1].0.contains(", owner"));
    h.answer(&req, &rows(r#"[{"version":5,"pttl":7000}]"#));
    let Outcome::Inspected(s) = h.completed(op).unwrap() else {
        panic!()
    };
    assert!(s.held);
    assert_eq!((s.fencing_token, s.remaining_ms), (Some(5), Some(7_000)));
    let op = h.m.inspect(h.now, "free").unwrap();
    let req = h.one();
    h.answer(&req, &rows(r#"[{"version":5,"pttl":null}]"#));
    let Outcome::Inspected(s) = h.completed(op).unwrap() else {
        panic!()
    };
    assert!(!s.held);
    assert_eq!(s.fencing_token, Some(5));
}

#[test]
fn a_retried_grant_of_the_same_owner_reads_back_the_same_version() {
    // The take leaves a row held by this owner alone (changes 0), the probe
    // still says it is ours: granted, same version.
    let mut h = Harness::new(D1Config::new("DB"));
    let op = h.acquire("a", Wait::Try);
    let req = h.one();
    h.answer(
        &req,
        r#"{"results":[{"rows":[],"changes":0},{"rows":[],"changes":0},{"rows":[{"mine":1,"version":3,"pttl":9000}],"changes":0}]}"#,
    );
    let info = h.completed(op).unwrap().into_acquired().unwrap().unwrap();
    assert_eq!(info.fencing_token, 3);
    assert_eq!(info.expires_at, 1_000 + 9_000 - 92);
}

#[test]
fn hostile_answers_are_errors_that_never_repeat_the_owner() {
    let hostile = [
        (200, "not json".to_string()),
        (200, "[]".into()),
        (200, r#"{"results":[]}"#.into()),
        (200, r#"{"results":[{"rows":[],"changes":0},{"rows":[],"changes":1}]}"#.into()),
        (200, r#"{"results":[{"rows":[],"changes":0},{"rows":[],"changes":1},{"rows":[],"changes":0}]}"#.into()),
        (200, r#"{"results":[{"rows":[],"changes":0},{"rows":[],"changes":1},{"rows":[{"mine":1,"version":0,"pttl":5}],"changes":0}]}"#.into()),
        (200, r#"{"results":[{"rows":[],"changes":0},{"rows":[],"changes":1},{"rows":[{"mine":1,"version":-3,"pttl":5}],"changes":0}]}"#.into()),
        (200, r#"{"results":[{"rows":[],"changes":0},{"rows":[],"changes":1},{"rows":[{"mine":1,"version":1.5,"pttl":5}],"changes":0}]}"#.into()),
        (200, r#"{"results":[{"rows":[],"changes":0},{"rows":[],"changes":1},{"rows":[{"mine":"yes","version":1,"pttl":5}],"changes":0}]}"#.into()),
        (200, r#"{"results":[{"rows":[],"changes":0},{"rows":[],"changes":1},{"rows":[{"mine":1,"version":1,"pttl":null}],"changes":0}]}"#.into()),
        (200, r#"{"results":[{"rows":[],"changes":0},{"rows":[],"changes":1},{"rows":[{"mine":1,"version":1,"pttl":1e300}],"changes":0}]}"#.into()),
        (200, r#"{"results":[{"rows":[],"changes":0},{"rows":[],"changes":2},{"rows":[{"mine":1,"version":1,"pttl":5}],"changes":0}]}"#.into()),
        (200, r#"{"results":[{"rows":[],"changes":0},{"rows":[],"changes":1},{"rows":[{"mine":1,"version":1,"pttl":5},{"mine":1,"version":1,"pttl":5}],"changes":0}]}"#.into()),
        (200, "x".repeat(100_000)),
        (500, r#"{"error":"OWNER"}"#.into()),
        (404, "".into()),
    ];
    for (status, body) in hostile {
        let mut h = Harness::new(D1Config::new("DB"));
        let op = h.acquire("a", Wait::Forever);
        let req = h.one();
        let owner = statements(&req)[1].1[1].as_str().unwrap().to_string();
        let body = body.replace("OWNER", &owner);
        h.respond(&req, status, &body);
        let e = h.completed(op).unwrap_err();
        assert!(matches!(e, LockError::Backend { .. }), "{body:.200}: {e:?}");
        assert!(!e.to_string().contains(&owner), "{e}");
        // The batch may have committed: the row is freed if it is ours.
        let leave = h.one();
        let st = statements(&leave);
        assert!(st[1]
            .0
            .starts_with("UPDATE edgelock_locks SET owner = NULL WHERE name = ?1 AND owner = ?2"));
        assert_eq!(st[1].1[1], owner);
    }
}

/// Regression (reliability 9c, seed 0xf542dfadc1bac22d): a driver's
/// transport message that quotes the request (its owner) was copied into
/// the error as it came.
#[test]
fn a_transport_failure_quoting_the_request_does_not_repeat_the_owner() {
    let mut h = Harness::new(D1Config::new("DB"));
    let op = h.acquire("a", Wait::Forever);
    let req = h.one();
    let owner = statements(&req)[1].1[1].as_str().unwrap().to_string();
    h.m.handle_input(
        h.now,
        Input::Failed {
            id: req.id,
            error: TransportError::Connect(format!(
                "content-type: application/json\r\nowner={owner}"
            )),
        },
    );
    h.drain();
    let e = h.completed(op).unwrap_err();
    assert!(matches!(e, LockError::Transport { .. }), "{e:?}");
    let text = format!("{e} {e:?}");
    assert!(!text.contains(&owner), "{text}");
    assert!(text.contains("<redacted>"), "{text}");
}

#[test]
fn cancel_frees_an_attempt_in_flight_and_close_ends_everything() {
    let mut h = Harness::new(D1Config::new("DB"));
    // Regression (tests/sim_d1.rs, seed 2898 on a calm network): the leave
    // was sent beside the attempt, ran first, and the attempt's take then
    // held the row for a whole lease. Now the attempt finishes first.
    let op = h.acquire("a", Wait::Forever);
    let req = h.one();
    h.m.cancel(h.now, op);
    assert!(h.take().is_empty(), "no leave beside the attempt");
    assert!(h.cancelled.is_empty(), "the attempt is not abandoned");
    assert_eq!(h.m.live_count(), 1);
    h.answer(&req, &granted(1, 10_000));
    let leave = h.one();
    let st = statements(&leave);
    assert_eq!(st[1].0, sql::leave("edgelock_locks"));
    assert!(h.take_events().is_empty(), "Aborted after the leave");
    h.answer(&leave, &changes(1));
    assert!(matches!(h.completed(op), Err(LockError::Aborted { .. })));
    assert_eq!(h.m.live_count(), 0);

    // An attempt that times out after the cancel: freed too.
    let op = h.acquire("a", Wait::Forever);
    let _req = h.one();
    h.m.cancel(h.now, op);
    h.advance_to(h.now + 5_001);
    let leave = h.one();
    assert_eq!(statements(&leave)[1].0, sql::leave("edgelock_locks"));
    h.answer(&leave, &changes(0));
    assert!(matches!(h.completed(op), Err(LockError::Aborted { .. })));

    // An attempt refused after the cancel: nothing to free.
    let op = h.acquire("a", Wait::Forever);
    let req = h.one();
    h.m.cancel(h.now, op);
    h.answer(&req, &busy(3, 500));
    assert!(h.take().is_empty());
    assert!(matches!(h.completed(op), Err(LockError::Aborted { .. })));

    // Pausing between attempts: nothing to free.
    let op = h.acquire("b", Wait::Forever);
    let req = h.one();
    h.answer(&req, &busy(1, 500));
    h.m.cancel(h.now, op);
    assert!(matches!(h.completed(op), Err(LockError::Aborted { .. })));
    assert!(h.take().is_empty());

    let _info = h.hold("c", 1);
    let close = h.m.close(h.now);
    let release = h.one();
    h.answer(&release, &changes(1));
    let events = h.take_events();
    assert!(events.iter().any(|e| matches!(
        e,
        Event::Lost {
            reason: LostReason::ClientClosed,
            ..
        }
    )));
    assert!(events
        .iter()
        .any(|e| matches!(e, Event::Completed { op, .. } if *op == close)));
}

#[test]
fn close_frees_an_attempt_in_flight_after_its_answer() {
    let mut h = Harness::new(D1Config::new("DB"));
    let op = h.acquire("a", Wait::Forever);
    let req = h.one();
    let close = h.m.close(h.now);
    assert!(matches!(h.completed(op), Err(LockError::Closed { .. })));
    assert!(h.take().is_empty() && h.cancelled.is_empty());
    h.answer(&req, &granted(4, 10_000));
    let leave = h.one();
    assert_eq!(statements(&leave)[1].0, sql::leave("edgelock_locks"));
    assert!(!h
        .take_events()
        .iter()
        .any(|e| matches!(e, Event::Completed { op, .. } if *op == close)));
    h.answer(&leave, &changes(1));
    assert!(h
        .take_events()
        .iter()
        .any(|e| matches!(e, Event::Completed { op, .. } if *op == close)));
    assert_eq!(h.m.live_count(), 0);
}

#[test]
fn other_kinds_and_bad_options_are_refused() {
    let mut h = Harness::new(D1Config::new("DB"));
    let e =
        h.m.start_operation(
            h.now,
            Operation::Acquire {
                name: "a".into(),
                kind: LockKind::Shared,
                options: AcquireOptions::default(),
            },
        )
        .unwrap_err();
    assert_eq!(e.code(), "INVALID_ARGUMENT");
    for (json, bad) in [
        (r#"{"binding":"DB","table":"x; DROP TABLE y"}"#, "DROP"),
        (r#"{"binding":"DB","tabel":"x"}"#, "tabel"),
        (r#"{"table":"x"}"#, "binding"),
        (r#"{"binding":"a b"}"#, "a b"),
        (r#"{"binding":"DB","ttlMs":1}"#, "ttl"),
    ] {
        let r = BackendSpec::from_json(BackendKind::D1, json)
            .and_then(|s| s.build(Box::new(SeededEntropy::new(1))));
        let e = r.err().unwrap_or_else(|| panic!("{json} accepted"));
        assert_eq!(e.code(), "INVALID_ARGUMENT", "{json}");
        if bad == "DROP" || bad == "a b" {
            assert!(!e.to_string().contains(bad), "{e}");
        }
    }
    let spec = BackendSpec::from_json(
        BackendKind::D1,
        r#"{"binding":"DB","table":"my_locks","ttlMs":5000}"#,
    )
    .unwrap();
    let back = BackendSpec::from_json(BackendKind::D1, &spec.to_json()).unwrap();
    assert_eq!(back.to_json(), spec.to_json());
    assert_eq!(BackendKind::from_name("d1"), Some(BackendKind::D1));
}
