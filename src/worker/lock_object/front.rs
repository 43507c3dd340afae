//! The Worker's front for the lock service: `POST /lock/v1/<op>?name=<name>`.
//!
//! Checks the bearer token exactly as every other route does
//! ([`AccessPolicy`]: a prefix-scoped token reaches only names under its
//! prefix; 401/403 otherwise), then the path, method, name and body size —
//! all before any object is touched — and forwards the request, path
//! rewritten to `/v1/<op>?name=…` and body unchanged (the `Authorization`
//! header is not forwarded), to the object `EDGELOCK_LOCKS.idFromName(name)`.
//!
//! **CORS** (a browser page on another origin calling the service, e.g. the
//! www demo): off unless the var `EDGELOCK_CORS_ORIGINS` lists origins,
//! comma-separated, each `scheme://host[:port]` (`https://app.example.com,
//! http://localhost:8080`), or is `*` (any origin). The bearer token stays
//! the access control: CORS only lets the browser show a listed origin's
//! page the answers it is sent (no cookies are involved, so
//! `Access-Control-Allow-Credentials` is never sent). With it set:
//! - a preflight (`OPTIONS` with `Origin` and `Access-Control-Request-Method`)
//!   needs no token and answers 204 with no body, whatever the path, name
//!   or token; from a listed origin it carries `Access-Control-Allow-Origin`
//!   (that origin), `-Methods: POST`, `-Headers: authorization,
//!   content-type` and `-Max-Age` ([`CORS_MAX_AGE_S`]); from any other
//!   origin none of them, so the browser refuses the call;
//! - every answer to a listed origin (200, 401, 403, 4xx, 5xx) carries
//!   `Access-Control-Allow-Origin`, so the page can read refusals too;
//! - every answer carries `Vary: Origin`.
//!
//! Unset or empty: no CORS header on any answer, and a preflight is 204
//! without them (deployments do not open up to pages by accident). An
//! `OPTIONS` without `Access-Control-Request-Method` is no preflight: it
//! is checked as any request (401 without a token, then 405). An
//! entry that is not an origin is a configuration error: every front
//! request answers 500 naming the var and the entry's position.

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

/// The var listing the origins whose pages may call the service (CORS).
pub const CORS_VAR: &str = "EDGELOCK_CORS_ORIGINS";
/// How long a browser may cache a granted preflight (seconds).
pub const CORS_MAX_AGE_S: u32 = 600;

/// The origins allowed to call the service from a browser.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Cors {
    /// No CORS headers at all (the default).
    Off,
    /// `*`: any origin (the answer names the caller's origin).
    Any,
    /// Exact origins, lowercased, without a trailing slash.
    Origins(Vec<String>),
}

/// `scheme://host[:port]`, lowercased, or `None` if `s` is not an origin
/// (a path, query, user info or white space is refused).
fn normalize_origin(s: &str) -> Option<String> {
    let s = s.strip_suffix('/').unwrap_or(s);
    let (scheme, rest) = s.split_once("://")?;
    let scheme_ok = !scheme.is_empty()
        && scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    let rest_ok = !rest.is_empty()
        && rest
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | ':' | '[' | ']'));
    (scheme_ok && rest_ok).then(|| s.to_ascii_lowercase())
}

impl Cors {
    /// Reads `EDGELOCK_CORS_ORIGINS`; the error names the entry's position,
    /// not its text.
    fn from_var(var: Option<&str>) -> Result<Cors, String> {
        let var = var.map(str::trim).unwrap_or("");
        if var.is_empty() {
            return Ok(Cors::Off);
        }
        if var == "*" {
            return Ok(Cors::Any);
        }
        let mut origins = Vec::new();
        for (i, entry) in var.split(',').map(str::trim).enumerate() {
            if entry.is_empty() {
                continue; // a trailing or doubled comma
            }
            match normalize_origin(entry) {
                Some(o) => origins.push(o),
                None => {
                    return Err(format!(
                        "{CORS_VAR}: entry {} is not an origin (scheme://host[:port], or the whole var `*`)",
                        i + 1
                    ))
                }
            }
        }
        Ok(Cors::Origins(origins))
    }

    /// The value of `Access-Control-Allow-Origin` for a request from
    /// `origin`, if it is allowed.
    fn allow(&self, origin: Option<&str>) -> Option<String> {
        let origin = origin?;
        match self {
            Cors::Off => None,
            Cors::Any => normalize_origin(origin).map(|_| origin.to_string()),
            Cors::Origins(list) => {
                let o = normalize_origin(origin)?;
                list.contains(&o).then(|| origin.to_string())
            }
        }
    }
}

/// `resp` with the CORS headers of a non-preflight answer (a copy of its
/// headers: a forwarded answer's own may be immutable).
fn with_cors(resp: Response, cors: &Cors, origin: Option<&str>) -> worker::Result<Response> {
    if *cors == Cors::Off {
        return Ok(resp);
    }
    let headers = Headers::new();
    for (k, v) in resp.headers().entries() {
        headers.append(&k, &v)?;
    }
    headers.append("vary", "Origin")?;
    if let Some(allowed) = cors.allow(origin) {
        headers.set("access-control-allow-origin", &allowed)?;
    }
    Ok(resp.with_headers(headers))
}

/// The answer to a preflight: 204, and the grant only for an allowed origin.
fn preflight(cors: &Cors, origin: Option<&str>) -> worker::Result<Response> {
    let headers = Headers::new();
    if *cors != Cors::Off {
        headers.set("vary", "Origin")?;
    }
    if let Some(allowed) = cors.allow(origin) {
        headers.set("access-control-allow-origin", &allowed)?;
        headers.set("access-control-allow-methods", "POST")?;
        headers.set(
            "access-control-allow-headers",
            "authorization, content-type",
        )?;
        headers.set("access-control-max-age", &CORS_MAX_AGE_S.to_string())?;
    }
    Ok(Response::empty()?.with_status(204).with_headers(headers))
}

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

pub async fn handle(req: Request, env: &Env) -> worker::Result<Response> {
    let vars: &JsValue = env;
    let cors = match Cors::from_var(binding(vars, CORS_VAR).as_deref()) {
        Ok(c) => c,
        Err(message) => return coded(500, "INVALID_ARGUMENT", &message),
    };
    let origin = req.headers().get("Origin").ok().flatten();
    let preflight_request = req.method() == Method::Options
        && req
            .headers()
            .has("Access-Control-Request-Method")
            .unwrap_or(false);
    if preflight_request {
        // Before the token: a browser never sends one with a preflight.
        return preflight(&cors, origin.as_deref());
    }
    let resp = serve(req, env).await?;
    with_cors(resp, &cors, origin.as_deref())
}

async fn serve(mut req: Request, env: &Env) -> worker::Result<Response> {
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
