//! The Cloudflare Worker job coordinator (feature `worker`, wasm32 only,
//! built by `scripts/build-worker.sh` with `worker-build`; see
//! `wrangler.toml`).
//!
//! What edge functions use edgelock for: however many invocations fire at
//! once, a job runs in one of them at a time, and the fencing token it gets
//! lets the resource it writes to refuse a stale holder.
//!
//! - [`config`]: backend and limits from the Worker's vars and secrets;
//! - [`auth`]: the bearer tokens every route requires;
//! - [`client`]: one lock client per invocation (the npm package's JS driver,
//!   the core machine wrapped in a subrequest [`Budgeted`](crate::core::budget::Budgeted));
//! - [`d1`]: the `d1` backend's adapter over the D1 binding `EDGELOCK_D1`;
//! - [`routes`]: the HTTP API and the job runs, on plain data;
//! - [`sockets`]: the `connect()` socket factory of `redis://` nodes, counted;
//! - [`job`]: the demo job writing to the fenced resource;
//! - [`lock_object`]: the Durable Object lock service (`LockObject`,
//!   bound as `EDGELOCK_LOCKS`) and its front, `POST /lock/v1/<op>`;
//! - here: the two entry points, `fetch` and `scheduled`.

// The Worker is an entry point, not a library surface: its `pub` items are
// shared between its own modules and need no API documentation.
#![allow(missing_docs, unreachable_pub)]

pub mod auth;
pub mod client;
pub mod config;
pub mod d1;
pub mod job;
pub mod lock_object;
pub mod routes;
pub mod sockets;

use js_sys::Reflect;
use wasm_bindgen::prelude::wasm_bindgen;
use wasm_bindgen::JsValue;
use worker::{event, Context, Env, Request, Response};

use crate::core::random_hex;
use crate::js::JsEntropy;
use config::Config;
use routes::{Reply, RunOptions};

/// A binding as a string: string vars and secrets as they are, numbers and
/// booleans (TOML vars) in their JSON form.
fn binding(env: &JsValue, name: &str) -> Option<String> {
    let v = Reflect::get(env, &JsValue::from_str(name)).ok()?;
    if let Some(s) = v.as_string() {
        return Some(s);
    }
    if let Some(n) = v.as_f64() {
        return Some(if n.fract() == 0.0 && n.abs() < 9.0e15 {
            format!("{}", n as i64)
        } else {
            n.to_string()
        });
    }
    v.as_bool().map(|b| b.to_string())
}

fn config(env: &Env) -> Result<Config, crate::core::LockError> {
    let env: &JsValue = env;
    Config::from_vars(&|name| binding(env, name))
}

/// A short random id to tell invocations apart in the resource's log.
fn invocation_id() -> String {
    match JsEntropy::new() {
        Ok(mut e) => random_hex(&mut e, 6),
        Err(_) => String::from("unknown"),
    }
}

fn respond(reply: Reply) -> worker::Result<Response> {
    Ok(Response::from_json(&reply.body)?.with_status(reply.status))
}

#[event(fetch)]
async fn main(mut req: Request, env: Env, _ctx: Context) -> worker::Result<Response> {
    // The lock service needs no backend configuration, only the tokens.
    if lock_object::front::is_lock_path(req.path().as_str()) {
        return lock_object::front::handle(req, &env).await;
    }
    let cfg = match config(&env) {
        Ok(c) => c,
        // A configuration error names the binding, never its value.
        Err(e) => return respond(Reply::lock_error(&e)),
    };
    let url = req.url()?;
    let query = url.query().unwrap_or("").to_string();
    let body = if req.method() == worker::Method::Post {
        req.bytes().await.unwrap_or_default()
    } else {
        Vec::new()
    };
    let method = req.method().to_string();
    let authorization = req.headers().get("Authorization").ok().flatten();
    let call = routes::Call {
        method: &method,
        path: url.path(),
        query: &query,
        body: &body,
        authorization: authorization.as_deref(),
    };
    let reply = routes::handle(&cfg, &call, &invocation_id()).await;
    respond(reply)
}

/// The cron trigger: runs the configured job under the lock — or, with
/// `EDGELOCK_CRON_ELECT`, only in the invocation elected leader of the
/// election named after the job. Skipped when another invocation holds it
/// or leads (unless `EDGELOCK_CRON_WAIT_MS` lets it wait); rejects — so that the runtime records a failed run — when the
/// lock or the job failed.
#[wasm_bindgen]
pub async fn scheduled(
    event: worker::worker_sys::ScheduledEvent,
    env: Env,
    _ctx: worker::worker_sys::ScheduleContext,
) -> Result<JsValue, JsValue> {
    let cfg = config(&env).map_err(|e| JsValue::from(js_sys::Error::new(&e.to_string())))?;
    let opts = RunOptions {
        wait_ms: Some(cfg.cron_wait_ms),
        if_available: Some(cfg.cron_wait_ms == 0),
        ..RunOptions::default()
    };
    let cron = event.cron().unwrap_or_default();
    let reply = if cfg.cron_elect {
        routes::run_elected(&cfg, &cfg.cron_job, &opts, &invocation_id()).await
    } else {
        routes::run_job(&cfg, &cfg.cron_job, &opts, &invocation_id()).await
    };
    let summary = format!(
        "edgelock cron {cron:?}: job {:?} -> {} {}",
        cfg.cron_job, reply.status, reply.body
    );
    match reply.status {
        200 | 409 if reply.body.get("code").and_then(|c| c.as_str()) != Some("FENCED") => {
            worker::console_log!("{summary}");
            Ok(JsValue::UNDEFINED)
        }
        _ => {
            worker::console_error!("{summary}");
            Err(js_sys::Error::new(&summary).into())
        }
    }
}
