//! The JS driver and the exported `RawLocks` class, compiled to wasm32 and run
//! by wasm-bindgen-test in Node (`wasm-pack test --node`) and in headless
//! Chromium (`WASM_BINDGEN_USE_BROWSER=1 wasm-pack test --headless --chrome`),
//! against a real etcd whose URL scripts/test-js.sh bakes in at compile time
//! (`EDGELOCK_WASM_TEST_ETCD`; etcd runs with `--cors '*'` for the browser).
#![cfg(target_arch = "wasm32")]

use std::cell::RefCell;
use std::rc::Rc;

use base64::Engine;
use edgelock::core::etcd::{EtcdConfig, EtcdMachine};
use edgelock::js::bindings::RawLocks;
use edgelock::core::{Operation, Outcome};
use edgelock::js::{Driver, JsEntropy, LockNotice};
use edgelock::{AcquireOptions, LockError, LockInfo, Wait};
use js_sys::{Function, Object, Promise, Reflect};
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use wasm_bindgen_test::wasm_bindgen_test;

fn etcd_url() -> String {
    match option_env!("EDGELOCK_WASM_TEST_ETCD") {
        Some(url) => url.to_string(),
        None => panic!(
            "build with EDGELOCK_WASM_TEST_ETCD=http://127.0.0.1:PORT (scripts/test-js.sh does)"
        ),
    }
}

fn driver() -> Driver {
    let mut cfg = EtcdConfig::new(vec![etcd_url()]);
    cfg.prefix = "wasm".into();
    cfg.session_ttl_ms = 3000;
    cfg.request_timeout_ms = 1000;
    let machine =
        EtcdMachine::new(cfg, Box::new(JsEntropy::new().expect("crypto"))).expect("config");
    Driver::new(Box::new(machine), None, None, None).expect("driver")
}

fn unique(base: &str) -> String {
    format!("{base}-{}", (js_sys::Math::random() * 1e12) as u64)
}

async fn sleep(ms: u32) {
    let p = Promise::new(&mut |resolve, _| {
        let set: Function = Reflect::get(&js_sys::global(), &"setTimeout".into())
            .unwrap()
            .unchecked_into();
        set.call2(&JsValue::UNDEFINED, &resolve, &ms.into())
            .unwrap();
    });
    JsFuture::from(p).await.unwrap();
}

const WAIT: AcquireOptions = AcquireOptions {
    wait: Wait::For(10_000),
    ttl_ms: None,
};
const TRY: AcquireOptions = AcquireOptions {
    wait: Wait::Try,
    ttl_ms: None,
};

async fn acquired(d: &Driver, name: &str, opts: &AcquireOptions) -> LockInfo {
    match d.start(Operation::acquire(name, *opts)).expect("valid").1.await {
        Ok(Outcome::Acquired(lock)) => lock,
        other => panic!("expected Acquired, got {other:?}"),
    }
}

async fn released(d: &Driver, lock: &LockInfo) -> bool {
    match d.start(Operation::Release { lock: lock.id }).expect("valid").1.await {
        Ok(Outcome::Released { held_until_release, .. }) => held_until_release,
        other => panic!("expected Released, got {other:?}"),
    }
}

async fn closed(d: &Driver) {
    assert_eq!(d.close().expect("close").await, Ok(Outcome::Closed));
    assert_eq!(d.live_count(), 0, "something is still alive after close");
}

/// POSTs JSON to etcd's gateway with the runtime's fetch, bypassing edgelock.
async fn gateway(path: &str, body: serde_json::Value) -> serde_json::Value {
    let init = Object::new();
    Reflect::set(&init, &"method".into(), &"POST".into()).unwrap();
    Reflect::set(&init, &"body".into(), &body.to_string().into()).unwrap();
    let fetch: Function = Reflect::get(&js_sys::global(), &"fetch".into())
        .unwrap()
        .unchecked_into();
    let url = format!("{}{path}", etcd_url());
    let resp = JsFuture::from(
        fetch
            .call2(&js_sys::global(), &url.into(), &init)
            .unwrap()
            .unchecked_into::<Promise>(),
    )
    .await
    .unwrap();
    let text_fn: Function = Reflect::get(&resp, &"text".into())
        .unwrap()
        .unchecked_into();
    let text = JsFuture::from(text_fn.call0(&resp).unwrap().unchecked_into::<Promise>())
        .await
        .unwrap();
    serde_json::from_str(&text.as_string().unwrap()).unwrap()
}

async fn key_count(prefix: &str) -> usize {
    let b64 = |s: &[u8]| base64::engine::general_purpose::STANDARD.encode(s);
    let mut end = prefix.as_bytes().to_vec();
    if let Some(last) = end.last_mut() {
        *last += 1;
    }
    let r = gateway("/v3/kv/range", serde_json::json!({ "key": b64(prefix.as_bytes()), "range_end": b64(&end), "count_only": true })).await;
    r.get("count")
        .and_then(|c| c.as_str())
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// Polls the key count under `prefix` until it is `want`; 20 s is a
/// must-happen bound, not a timing assumption.
async fn key_count_reaches(prefix: &str, want: usize) {
    let mut seen = 0;
    for _ in 0..400 {
        seen = key_count(prefix).await;
        if seen == want {
            return;
        }
        sleep(50).await;
    }
    panic!("{seen} keys under {prefix} after 20 s, expected {want}");
}

#[wasm_bindgen_test]
async fn exclusion_try_release_and_fencing() {
    let (a, b) = (driver(), driver());
    let name = unique("basic");
    let first = acquired(&a, &name, &WAIT).await;
    let now_epoch = js_sys::Date::now();
    let expires = a.to_epoch_ms(first.expires_at);
    assert!(
        expires > now_epoch && expires <= now_epoch + 3000.0,
        "expiresAt {expires} vs now {now_epoch}"
    );
    assert_eq!(
        b.start(Operation::acquire(&name, *&TRY)).expect("valid").1.await,
        Ok(Outcome::NotAcquired)
    );
    assert_eq!(key_count(&format!("wasm/{name}/")).await, 1);
    assert!(released(&a, &first).await);
    let second = acquired(&b, &name, &TRY).await;
    assert!(second.fencing_token > first.fencing_token);
    assert!(released(&b, &second).await);
    assert_eq!(key_count(&format!("wasm/{name}/")).await, 0);
    closed(&a).await;
    closed(&b).await;
}

/// A waiter is woken through its watch stream (a streamed fetch body).
#[wasm_bindgen_test]
async fn waiter_is_granted_after_release() {
    let (a, b) = (driver(), driver());
    let name = unique("wait");
    let held = acquired(&a, &name, &WAIT).await;
    let (_, waiting) = b.start(Operation::acquire(&name, *&WAIT)).expect("valid");
    // The waiter's key is there before the release, however slow the machine.
    key_count_reaches(&format!("wasm/{name}/"), 2).await;
    assert!(released(&a, &held).await);
    let next = match waiting.await {
        Ok(Outcome::Acquired(l)) => l,
        other => panic!("waiter: {other:?}"),
    };
    assert!(next.fencing_token > held.fencing_token);
    closed(&a).await;
    closed(&b).await;
    assert_eq!(key_count(&format!("wasm/{name}/")).await, 0);
}

#[wasm_bindgen_test]
async fn cancel_removes_the_waiting_key() {
    let (a, b) = (driver(), driver());
    let name = unique("cancel");
    let held = acquired(&a, &name, &WAIT).await;
    let (op, waiting) = b.start(Operation::acquire(&name, *&WAIT)).expect("valid");
    // Cancelled once its key is written: the cancel must delete it.
    key_count_reaches(&format!("wasm/{name}/"), 2).await;
    b.cancel(op);
    assert!(matches!(waiting.await, Err(LockError::Aborted { .. })));
    key_count_reaches(&format!("wasm/{name}/"), 1).await;
    assert!(released(&a, &held).await);
    closed(&a).await;
    closed(&b).await;
}

#[wasm_bindgen_test]
async fn deleting_the_key_reports_the_lock_lost() {
    let a = driver();
    let notices: Rc<RefCell<Vec<LockNotice>>> = Rc::default();
    let sink = notices.clone();
    a.set_lock_listener(move |n| sink.borrow_mut().push(n));
    let name = unique("lost");
    let held = acquired(&a, &name, &WAIT).await;
    let key = base64::engine::general_purpose::STANDARD.encode(held.handle.key.as_bytes());
    gateway("/v3/kv/deleterange", serde_json::json!({ "key": key })).await;
    // Polled for with a 20 s must-happen bound (the watch reports the delete).
    for _ in 0..200 {
        if notices
            .borrow()
            .iter()
            .any(|n| matches!(n, LockNotice::Lost { lock, .. } if *lock == held.id))
        {
            break;
        }
        sleep(100).await;
    }
    let lost = notices.borrow().iter().find_map(|n| match n {
        LockNotice::Lost { lock, error } if *lock == held.id => Some(error.clone()),
        _ => None,
    });
    let error = lost.expect("no Lost notice within 20 s");
    assert_eq!(error.code(), "LOST");
    assert!(error.to_string().contains(&name));
    closed(&a).await;
}

fn code_of(e: &JsValue) -> String {
    Reflect::get(e, &"code".into())
        .ok()
        .and_then(|c| c.as_string())
        .unwrap_or_default()
}

fn message_of(e: &JsValue) -> String {
    Reflect::get(e, &"message".into())
        .ok()
        .and_then(|c| c.as_string())
        .unwrap_or_default()
}

#[wasm_bindgen_test]
async fn raw_locks_round_trip_and_error_codes() {
    let bad = RawLocks::connect(
        "etcd",
        r#"{"endpoints":["http://x"],"headers":{"Authorization":7},"prefix":"s3cret-value"}"#,
        None,
        None,
        None,
    );
    let Err(e) = bad else {
        panic!("invalid options accepted")
    };
    assert_eq!(code_of(&e), "INVALID_ARGUMENT");
    assert!(!message_of(&e).contains("s3cret"), "{}", message_of(&e));
    let Err(e) = RawLocks::connect("etcd", r#"{"endpoints":[],"tll":1}"#, None, None, None) else {
        panic!("unknown field accepted")
    };
    assert_eq!(code_of(&e), "INVALID_ARGUMENT");

    let options = format!(
        r#"{{"endpoints":["{}"],"prefix":"wasm","sessionTtlMs":3000,"requestTimeoutMs":1000}}"#,
        etcd_url()
    );
    let raw = RawLocks::connect("etcd", &options, None, None, None).expect("valid options");
    assert_eq!(raw.backend(), "etcd");
    let Err(e) = raw.acquire("x".into(), false, Some(1.5), None, None) else {
        panic!("waitMs 1.5 accepted")
    };
    assert_eq!(code_of(&e), "INVALID_ARGUMENT");

    let name = unique("raw");
    let lock = JsFuture::from(
        raw.acquire(name.clone(), false, Some(5000.0), None, None)
            .expect("valid"),
    )
    .await
    .expect("acquired");
    assert_eq!(
        Reflect::get(&lock, &"name".into()).unwrap().as_string(),
        Some(name.clone())
    );
    let token = Reflect::get(&lock, &"fencingToken".into())
        .unwrap()
        .as_string()
        .unwrap();
    assert!(token.parse::<u64>().unwrap() > 0);
    let handle = Reflect::get(&lock, &"handle".into())
        .unwrap()
        .as_string()
        .unwrap();
    let id = Reflect::get(&lock, &"lockId".into())
        .unwrap()
        .as_f64()
        .unwrap();
    let held = JsFuture::from(raw.release(id).unwrap())
        .await
        .expect("released");
    assert_eq!(held.as_bool(), Some(true));
    let Err(e) = JsFuture::from(raw.resume(&handle).unwrap()).await else {
        panic!("resumed a released lock")
    };
    assert_eq!(code_of(&e), "LOST");
    JsFuture::from(raw.close().unwrap()).await.expect("closed");
    assert_eq!(raw.live_count(), 0);
}
