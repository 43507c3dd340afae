//! Raw calls to etcd's JSON gateway, as another etcd user (or an operator)
//! would make them: to look behind a client's back in real-etcd tests.

use std::time::Duration;

use base64::Engine;
use edgelock_devtools::EtcdServer;
use serde_json::{json, Value};

pub fn b64(s: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// A raw gateway call, as another etcd user (or an operator) would make it.
pub fn raw(etcd: &EtcdServer, path: &str, body: Value) -> Value {
    let http = edgelock::native::http::HttpClient::new();
    let url = format!("{}{}", etcd.url(), path);
    let body = serde_json::to_vec(&body).unwrap();
    let headers = vec![("content-type".to_string(), "application/json".to_string())];
    let req = edgelock::native::http::Request {
        method: "POST",
        url: &url,
        headers: &headers,
        body: &body,
        timeout: Some(Duration::from_secs(5)),
    };
    let resp = http
        .send(&req, &edgelock::native::http::CancelHandle::new())
        .expect("raw etcd call");
    serde_json::from_slice(&resp.body).expect("json")
}

/// Every key under the client's prefix for `name`.
pub fn keys_of(etcd: &EtcdServer, name: &str) -> Vec<String> {
    let prefix = format!("edgelock/{name}/");
    let end = format!("edgelock/{name}0");
    let v = raw(
        etcd,
        "/v3/kv/range",
        json!({"key": b64(prefix.as_bytes()), "range_end": b64(end.as_bytes())}),
    );
    v["kvs"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|kv| {
            let k = base64::engine::general_purpose::STANDARD
                .decode(kv["key"].as_str().unwrap())
                .unwrap();
            String::from_utf8(k).unwrap()
        })
        .collect()
}
