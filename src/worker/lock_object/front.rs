//! The Worker's front for the lock service: `POST /lock/v1/<op>?name=<name>`.
//!
//! Checks the bearer token exactly as every other route does
//! ([`AccessPolicy`]: a prefix-scoped token reaches only names under its
//! prefix; 401/403 otherwise), then the path, method, name and body size —
//! all before any object is touched — and forwards the request, path
//! rewritten to `/v1/<op>?name=…` and body unchanged (the `Authorization`
//! header is not forwarded), to the object `EDGELOCK_LOCKS.idFromName(name)`.

use serde_json::json;
use wasm_bindgen::JsValue;
use worker::{Env, Headers, Method, Request, RequestInit, Response};

use super::protocol::{self, Refusal, MAX_BODY_BYTES};
use crate::worker::auth::AccessPolicy;
use crate::worker::binding;

/// The Durable Object namespace binding (wrangler.toml).
pub const BINDING: &str = "EDGELOCK_LOCKS";
/// The path prefix the front answers under.
pub const PREFIX: &str = "/lock";

/// Whether `path` is the lock service's.
pub fn is_lock_path(path: &str) -> bool {
    path == PREFIX || path.starts_with("/lock/")
}

fn coded(status: u16, code: &str, message: &str) -> worker::Result<Response> {
    Ok(Response::from_json(&json!({ "error": message, "code": code }))?.with_status(status))
}

fn refuse(r: &Refusal) -> worker::Result<Response> {
    Ok(Response::from_json(&r.body())?.with_status(r.status))
}

pub async fn handle(mut req: Request, env: &Env) -> worker::Result<Response> {
    let url = req.url()?;
    let query = url.query().unwrap_or("").to_string();
    let path = url.path().strip_prefix(PREFIX).unwrap_or("").to_string();
    let vars: &JsValue = env;
    let access = match AccessPolicy::from_secrets(
        binding(vars, "EDGELOCK_API_TOKEN").as_deref(),
        binding(vars, "EDGELOCK_API_TOKENS").as_deref(),
    ) {
        Ok(a) => a,
        // Names the secret, never its value.
        Err(e) => return coded(500, e.code(), &e.to_string()),
    };
    let authorization = req.headers().get("Authorization").ok().flatten();
    let name = protocol::name_of_query(&query).ok();
    if let Err(r) = access.authorize(authorization.as_deref(), name.as_deref()) {
        return coded(r.status, r.code, &r.message);
    }
    let method = req.method().to_string();
    let (op, name) = match protocol::check_head(&method, &path, &query) {
        Ok(x) => x,
        Err(r) => return refuse(&r),
    };
    let body = req.bytes().await.unwrap_or_default();
    if body.len() > MAX_BODY_BYTES {
        return refuse(&Refusal::new(
            413,
            format!("the body is over {MAX_BODY_BYTES} bytes"),
        ));
    }
    let stub = match env.durable_object(BINDING) {
        Ok(ns) => ns.id_from_name(&name)?.get_stub()?,
        Err(_) => {
            return coded(
                500,
                "NOT_CONFIGURED",
                "the Durable Object binding EDGELOCK_LOCKS is missing (wrangler.toml)",
            )
        }
    };
    let headers = Headers::new();
    headers.set("content-type", "application/json")?;
    let mut init = RequestInit::new();
    init.with_method(Method::Post)
        .with_headers(headers)
        .with_body(Some(js_sys::Uint8Array::from(body.as_slice()).into()));
    let forwarded = Request::new_with_init(&format!("https://lock-object/v1/{op}?{query}"), &init)?;
    stub.fetch_with_request(forwarded).await
}
