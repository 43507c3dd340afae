//! RedisLocks (Upstash REST through the local gateway, and Webdis) and
//! Redlock, driven through the exported `RawLocks` class in Node and headless
//! Chromium. In the browser every request is cross-origin, so the gateway and
//! Webdis must answer CORS (preflights included: the gateway gets an
//! `Authorization` header). URL lists and the gateway token are baked in at compile
//! time by scripts/test-js.sh.
#![cfg(target_arch = "wasm32")]

use edgelock::js::bindings::RawLocks;
use js_sys::Reflect;
use wasm_bindgen::JsValue;
use wasm_bindgen_futures::JsFuture;
use wasm_bindgen_test::wasm_bindgen_test;

fn baked(value: Option<&'static str>, name: &str) -> String {
    value
        .unwrap_or_else(|| panic!("build with {name} set (scripts/test-js.sh does)"))
        .to_string()
}
/// Comma-separated URLs; node `i` of the same index is the same redis-server.
fn nth(list: String, i: usize) -> String {
    list.split(',')
        .nth(i)
        .unwrap_or_else(|| panic!("fewer than {} URLs in {list}", i + 1))
        .to_string()
}
fn webdis(i: usize) -> String {
    nth(
        baked(
            option_env!("EDGELOCK_WASM_TEST_WEBDIS"),
            "EDGELOCK_WASM_TEST_WEBDIS",
        ),
        i,
    )
}
fn gateway(i: usize) -> String {
    nth(
        baked(
            option_env!("EDGELOCK_WASM_TEST_GATEWAYS"),
            "EDGELOCK_WASM_TEST_GATEWAYS",
        ),
        i,
    )
}
fn token() -> String {
    baked(
        option_env!("EDGELOCK_WASM_TEST_TOKEN"),
        "EDGELOCK_WASM_TEST_TOKEN",
    )
}

fn unique(base: &str) -> String {
    format!("{base}-{}", (js_sys::Math::random() * 1e12) as u64)
}

fn get(v: &JsValue, k: &str) -> JsValue {
    Reflect::get(v, &k.into()).unwrap_or(JsValue::UNDEFINED)
}

fn code_of(e: &JsValue) -> String {
    get(e, "code").as_string().unwrap_or_default()
}

async fn settle(p: Result<js_sys::Promise, JsValue>) -> Result<JsValue, JsValue> {
    JsFuture::from(p?).await
}

/// Two clients on the same backend: exclusion, try, release, increasing tokens.
async fn exclusion_round_trip(a: RawLocks, b: RawLocks) {
    let name = unique("w");
    let first = settle(a.acquire(name.clone(), false, Some(5000.0), None, None))
        .await
        .expect("first acquire");
    let none = settle(b.acquire(name.clone(), true, None, None, None))
        .await
        .expect("try");
    assert!(none.is_null(), "tryAcquire got a held lock");
    let t1: u64 = get(&first, "fencingToken")
        .as_string()
        .unwrap()
        .parse()
        .unwrap();
    let released = settle(a.release(get(&first, "lockId").as_f64().unwrap()))
        .await
        .expect("release");
    assert_eq!(released.as_bool(), Some(true));
    let second = settle(b.acquire(name.clone(), false, Some(5000.0), Some(3000.0), None))
        .await
        .expect("second acquire");
    let t2: u64 = get(&second, "fencingToken")
        .as_string()
        .unwrap()
        .parse()
        .unwrap();
    assert!(t2 > t1, "token {t2} after {t1}");
    settle(b.release(get(&second, "lockId").as_f64().unwrap()))
        .await
        .expect("release 2");
    settle(a.close()).await.expect("close a");
    settle(b.close()).await.expect("close b");
    assert_eq!(a.live_count() + b.live_count(), 0);
}

fn upstash_options() -> String {
    format!(
        r#"{{"url":"{}","token":"{}","ttlMs":5000,"requestTimeoutMs":2000}}"#,
        gateway(0),
        token()
    )
}

#[wasm_bindgen_test]
async fn redis_over_the_upstash_gateway() {
    let a = RawLocks::connect("redis", &upstash_options(), None, None, None).expect("options");
    let b = RawLocks::connect("redis", &upstash_options(), None, None, None).expect("options");
    exclusion_round_trip(a, b).await;
}

#[wasm_bindgen_test]
async fn redis_over_webdis() {
    let options = format!(
        r#"{{"url":"{}","protocol":"webdis","ttlMs":5000,"requestTimeoutMs":2000}}"#,
        webdis(0)
    );
    let a = RawLocks::connect("redis", &options, None, None, None).expect("options");
    let b = RawLocks::connect("redis", &options, None, None, None).expect("options");
    exclusion_round_trip(a, b).await;
}

#[wasm_bindgen_test]
async fn redlock_over_gateway_and_webdis() {
    let options = format!(
        r#"{{"nodes":[{{"url":"{g0}","token":"{t}"}},{{"url":"{g1}","token":"{t}"}},{{"url":"{w2}","protocol":"webdis"}}],"ttlMs":5000,"retryCount":3,"retryDelayMs":50}}"#,
        g0 = gateway(0),
        g1 = gateway(1),
        t = token(),
        w2 = webdis(2)
    );
    let a = RawLocks::connect("redlock", &options, None, None, None).expect("options");
    let b = RawLocks::connect("redlock", &options, None, None, None).expect("options");
    assert_eq!(a.backend(), "redlock");
    exclusion_round_trip(a, b).await;
}

#[wasm_bindgen_test]
async fn wrong_gateway_token_is_a_backend_error_without_the_token() {
    let options = format!(
        r#"{{"url":"{}","token":"not-the-token-42","requestTimeoutMs":2000}}"#,
        gateway(0)
    );
    let c = RawLocks::connect("redis", &options, None, None, None).expect("options");
    let e = settle(c.acquire(unique("auth"), false, Some(1000.0), None, None))
        .await
        .expect_err("acquired with a wrong token");
    assert_eq!(code_of(&e), "BACKEND");
    assert!(!get(&e, "message")
        .as_string()
        .unwrap_or_default()
        .contains("not-the-token-42"));
    settle(c.close()).await.expect("close");
}
