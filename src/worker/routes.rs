//! The HTTP API and the cron job, on plain data: a request's method, path,
//! query and body in, a status and a JSON body out. Every lock decision is
//! the core's; this only converts arguments and results.
//!
//! - `POST /jobs/:name/run` — acquire (`waitMs`, `ifAvailable`, `ttlMs`,
//!   `jobMs`, `limit` from the query or a JSON body), run the demo job with the fencing
//!   token, release. 200 with the token; 409 `BUSY` when `ifAvailable` found
//!   it held; 504 `TIMEOUT`; 503 `BUDGET`; 502 for backend failures; 409
//!   `FENCED` if the resource refused the token.
//!   `runs=N` (2..=[`MAX_RUNS`]) makes N runs of the job at once inside this
//!   one invocation, on one lock client (they queue on the lock as waiters
//!   of one client do: one connection per `redis://` node, subscriber
//!   connections within `max_subscriptions`); the reply lists each run's
//!   reply under `runs`, with the first failed run's status.
//!   "At most N at once": `limit` (or the job's entry in
//!   `EDGELOCK_JOB_LIMITS`) takes one of N permits of a semaphore instead of
//!   the exclusive lock; the reply then has `mode: "permit"`, `limit` and the
//!   permit's `slot`, and the job writes to the resource `name.slot`. A
//!   `limit` that contradicts the configured one is 400.
//! - `POST /jobs/:name/start` — acquire and answer the lock's handle without
//!   releasing (the first half of a job that spans two invocations);
//!   `POST /jobs/:name/finish` with that handle as body — resume, run the
//!   job, release.
//! - `GET /locks/:name` — holder, fencing token, expiry and waiters where the
//!   backend can tell; `limit`, `holders` and `queued` with modes and slots.
//! - `GET /leaders/:name` — the leader of the election `name`: `{ name,
//!   leader: { value, fencingToken } | null }`. With `EDGELOCK_CRON_ELECT`
//!   the cron job runs only in the invocation that wins the election named
//!   after the job ([`run_elected`]); the others answer 409 `NOT_LEADER`.
//!
//! Every route first checks the caller's `Authorization: Bearer <token>`
//! against the deployment's tokens and the route's lock name (see
//! [`super::auth`]): 401 `UNAUTHORIZED`, 403 `FORBIDDEN` (a token for
//! other names) or 403 `NOT_CONFIGURED` (no token set: fails closed), before
//! anything else is looked at.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use serde::Deserialize;
use serde_json::{json, Value};

use super::client::{Acquired, LockClient};
use super::config::{Config, MAX_WAIT_MS};
use super::job::{self, JOB_SUBREQUESTS};
use crate::core::{
    AcquireOptions, Holder, Leadership, LockError, LockHandle, LockInfo, LockKind, Wait,
};
use crate::js::args::{limit_of, mode_name};

pub struct Reply {
    pub status: u16,
    pub body: Value,
}

impl Reply {
    fn ok(body: Value) -> Reply {
        Reply { status: 200, body }
    }

    fn coded(status: u16, code: &str, message: impl Into<String>) -> Reply {
        Reply {
            status,
            body: json!({ "error": message.into(), "code": code }),
        }
    }

    pub fn lock_error(e: &LockError) -> Reply {
        Reply::coded(status_of(e), e.code(), e.to_string())
    }

    fn with(mut self, key: &str, value: Value) -> Reply {
        if let Value::Object(map) = &mut self.body {
            map.insert(key.to_string(), value);
        }
        self
    }
}

/// The HTTP status for a lock error.
pub fn status_of(e: &LockError) -> u16 {
    match e.code() {
        "INVALID_ARGUMENT" => 400,
        "LOST" | "NOT_HELD" => 409,
        "BUDGET" => 503,
        "TIMEOUT" => 504,
        "BACKEND" | "TRANSPORT" | "NO_QUORUM" => 502,
        _ => 500,
    }
}

/// Options of a job run, from the query string and/or a JSON body.
#[derive(Deserialize, Default, Debug)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunOptions {
    pub wait_ms: Option<u64>,
    pub if_available: Option<bool>,
    pub ttl_ms: Option<u64>,
    pub job_ms: Option<u64>,
    /// At most this many runs of the job at once (a semaphore's permits).
    pub limit: Option<u64>,
    /// `/run` only: this many runs of the job inside this invocation.
    pub runs: Option<u64>,
}

/// Most runs one `POST /jobs/:name/run?runs=N` makes inside its invocation.
pub const MAX_RUNS: u64 = 20;

impl RunOptions {
    fn parse(query: &str, body: &[u8]) -> Result<RunOptions, LockError> {
        let mut opts: RunOptions = if body.iter().all(u8::is_ascii_whitespace) {
            RunOptions::default()
        } else {
            serde_json::from_slice(body).map_err(|_| {
                LockError::invalid(
                    "the body must be a JSON object with waitMs, ifAvailable, ttlMs, jobMs, limit or runs (whole numbers)",
                )
            })?
        };
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, "true"));
            let number = || {
                v.parse::<u64>()
                    .ok()
                    .filter(|n| *n <= MAX_WAIT_MS)
                    .ok_or_else(|| {
                        LockError::invalid(format!(
                            "{k} must be a whole number of milliseconds up to {MAX_WAIT_MS}"
                        ))
                    })
            };
            match k {
                "waitMs" => opts.wait_ms = Some(number()?),
                "ttlMs" => opts.ttl_ms = Some(number()?),
                "jobMs" => opts.job_ms = Some(number()?),
                "ifAvailable" => opts.if_available = Some(matches!(v, "" | "1" | "true")),
                "limit" => {
                    opts.limit = Some(v.parse::<u64>().map_err(|_| {
                        LockError::invalid("limit must be a whole number of permits")
                    })?)
                }
                "runs" => opts.runs = Some(v.parse::<u64>().unwrap_or(0)),
                _ => {
                    return Err(LockError::invalid(
                        "unknown query parameter (waitMs, ifAvailable, ttlMs, jobMs, limit, runs)",
                    ))
                }
            }
        }
        for v in [opts.wait_ms, opts.job_ms, opts.ttl_ms]
            .into_iter()
            .flatten()
        {
            if v > MAX_WAIT_MS {
                return Err(LockError::invalid(format!(
                    "waitMs, ttlMs and jobMs must be at most {MAX_WAIT_MS}"
                )));
            }
        }
        if opts.runs.is_some_and(|n| !(1..=MAX_RUNS).contains(&n)) {
            return Err(LockError::invalid(format!(
                "runs must be a whole number from 1 to {MAX_RUNS}"
            )));
        }
        Ok(opts)
    }

    /// The kind of hold for job `name`: the request's `limit`, else the
    /// job's `EDGELOCK_JOB_LIMITS` entry, else exclusive. A request's limit
    /// must agree with a configured one (holders of one semaphore must
    /// count the same permits).
    pub fn kind(&self, cfg: &Config, name: &str) -> Result<LockKind, LockError> {
        let asked = self.limit.map(LockKind::permits).transpose()?;
        match (asked, cfg.job_kind(name)) {
            (Some(a), Some(c)) if a != c => Err(LockError::invalid(format!(
                "job {name:?} runs as a {} (EDGELOCK_JOB_LIMITS), not as a {}",
                c.describe(),
                a.describe()
            ))),
            (Some(k), _) | (None, Some(k)) => Ok(k),
            (None, None) => Ok(LockKind::Exclusive),
        }
    }

    fn acquire_options(&self, default_wait_ms: u64) -> AcquireOptions {
        let wait = if self.if_available == Some(true) {
            Wait::Try
        } else {
            Wait::For(self.wait_ms.unwrap_or(default_wait_ms))
        };
        AcquireOptions {
            wait,
            ttl_ms: self.ttl_ms,
        }
    }
}

/// One HTTP request, as the routes see it.
pub struct Call<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub query: &'a str,
    pub body: &'a [u8],
    /// The `Authorization` header, if any.
    pub authorization: Option<&'a str>,
}

/// The lock name a route is about (`None`: a route about no lock, or a
/// name that does not decode, which the route itself refuses).
fn route_name(segments: &[&str]) -> Option<String> {
    match segments {
        ["jobs", name, _] | ["locks", name] | ["leaders", name] => decode_segment(name).ok(),
        _ => None,
    }
}

/// Routes one HTTP request.
pub async fn handle(cfg: &Config, call: &Call<'_>, invocation: &str) -> Reply {
    let Call {
        method,
        path,
        query,
        body,
        ..
    } = *call;
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    if let Err(r) = cfg
        .access
        .authorize(call.authorization, route_name(&segments).as_deref())
    {
        return Reply::coded(r.status, r.code, r.message);
    }
    match (method, segments.as_slice()) {
        ("GET", [""]) => Reply::ok(json!({
            "service": "edgelock job coordinator",
            "backend": cfg.backend.kind().as_str(),
            "subrequestBudget": cfg.subrequest_budget,
            "maxSubscriptions": cfg.backend.config().max_subscriptions(),
            "routes": ["POST /jobs/:name/run", "POST /jobs/:name/start", "POST /jobs/:name/finish", "GET /locks/:name", "GET /leaders/:name", "POST /lock/v1/acquire|release|extend|resume|inspect?name="],
            "jobLimits": cfg.job_limits.iter().map(|(n, k)| (n.clone(), json!(limit_of(*k)))).collect::<serde_json::Map<_, _>>(),
        })),
        ("POST", ["jobs", name, action @ ("run" | "start" | "finish")]) => {
            let name = match decode_segment(name) {
                Ok(n) => n,
                Err(e) => return Reply::lock_error(&e),
            };
            match *action {
                "run" | "start" => match RunOptions::parse(query, body) {
                    Ok(opts) if *action == "run" => run_job(cfg, &name, &opts, invocation).await,
                    Ok(RunOptions { runs: Some(2..), .. }) => Reply::lock_error(
                        &LockError::invalid("runs is for POST /jobs/:name/run only"),
                    ),
                    Ok(opts) => start_job(cfg, &name, &opts).await,
                    Err(e) => Reply::lock_error(&e),
                },
                _ => finish_job(cfg, &name, body, invocation).await,
            }
        }
        ("GET", ["locks", name]) => match decode_segment(name) {
            Ok(name) => lock_status(cfg, &name).await,
            Err(e) => Reply::lock_error(&e),
        },
        ("GET", ["leaders", name]) => match decode_segment(name) {
            Ok(name) => leader_of(cfg, &name).await,
            Err(e) => Reply::lock_error(&e),
        },
        (_, ["jobs", _, "run" | "start" | "finish"]) | (_, ["locks", _]) | (_, ["leaders", _]) | (_, [""]) => {
            Reply::coded(405, "METHOD_NOT_ALLOWED", "method not allowed")
        }
        _ => Reply::coded(
            404,
            "NOT_FOUND",
            "no such route: POST /jobs/:name/run|start|finish, GET /locks/:name, GET /leaders/:name",
        ),
    }
}

fn client(cfg: &Config) -> Result<LockClient, LockError> {
    LockClient::new(cfg, cfg.subrequest_budget.saturating_sub(JOB_SUBREQUESTS))
}

fn subrequests(cfg: &Config, lock: u32, job: u32) -> Value {
    json!({ "lock": lock, "job": job, "total": lock + job, "budget": cfg.subrequest_budget })
}

/// The kind of a held lock for a reply: `mode`, and `limit` / `slot` for a permit.
fn with_kind(reply: Reply, lock: &LockInfo) -> Reply {
    match limit_of(lock.kind()) {
        Some(limit) => reply
            .with("mode", json!(mode_name(lock.kind())))
            .with("limit", json!(limit))
            .with("slot", json!(lock.slot())),
        None => reply.with("mode", json!(mode_name(lock.kind()))),
    }
}

fn busy(name: &str, kind: LockKind) -> Reply {
    let message = match limit_of(kind) {
        Some(limit) => format!("job {name:?} already runs {limit} times at once"),
        None => format!("job {name:?} is running in another invocation"),
    };
    Reply::coded(409, "BUSY", message)
}

/// Acquire, run, release: the body of `POST /jobs/:name/run` and of the cron trigger.
pub async fn run_job(cfg: &Config, name: &str, opts: &RunOptions, invocation: &str) -> Reply {
    if let Some(runs) = opts.runs.filter(|n| *n > 1) {
        return run_many(cfg, name, opts, invocation, runs as u32).await;
    }
    let kind = match opts.kind(cfg, name) {
        Ok(k) => k,
        Err(e) => return Reply::lock_error(&e),
    };
    let client = match client(cfg) {
        Ok(c) => c,
        Err(e) => return Reply::lock_error(&e),
    };
    let (reply, job_subrequests) = run_once(cfg, &client, name, kind, opts, invocation).await;
    closed(cfg, &client, reply, job_subrequests).await
}

/// `runs` runs of job `name` at once on one client (`?runs=N`): the
/// waiters of one invocation, sharing its connections. Each run keeps
/// [`JOB_SUBREQUESTS`] of the budget for its job.
async fn run_many(
    cfg: &Config,
    name: &str,
    opts: &RunOptions,
    invocation: &str,
    runs: u32,
) -> Reply {
    let kind = match opts.kind(cfg, name) {
        Ok(k) => k,
        Err(e) => return Reply::lock_error(&e),
    };
    let budget = cfg
        .subrequest_budget
        .saturating_sub(JOB_SUBREQUESTS.saturating_mul(runs));
    let client = match LockClient::new(cfg, budget) {
        Ok(c) => c,
        Err(e) => return Reply::lock_error(&e),
    };
    let ids: Vec<String> = (0..runs).map(|i| format!("{invocation}.{i}")).collect();
    let each: Vec<RunFuture<'_>> = ids
        .iter()
        .map(|id| Box::pin(run_once(cfg, &client, name, kind, opts, id)) as RunFuture<'_>)
        .collect();
    let results = join_all(each).await;
    let job_subrequests = results.iter().map(|(_, n)| n).sum();
    // The first failed run's status (200 when every run succeeded).
    let status = results
        .iter()
        .map(|(r, _)| r.status)
        .find(|s| *s != 200)
        .unwrap_or(200);
    let runs: Vec<Value> = results
        .into_iter()
        .map(|(r, _)| {
            let status = r.status;
            r.with("status", json!(status)).body
        })
        .collect();
    let reply = Reply {
        status,
        body: json!({ "job": name, "runs": runs, "invocation": invocation }),
    };
    closed(cfg, &client, reply, job_subrequests).await
}

/// One run's future, as [`run_many`] keeps them.
type RunFuture<'a> = Pin<Box<dyn Future<Output = (Reply, u32)> + 'a>>;

/// Polls every future on this task until all are done; their outputs in order.
async fn join_all<T>(futures: Vec<Pin<Box<dyn Future<Output = T> + '_>>>) -> Vec<T> {
    let mut pending: Vec<_> = futures.into_iter().map(Some).collect();
    let mut outputs: Vec<Option<T>> = pending.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        for (slot, out) in pending.iter_mut().zip(outputs.iter_mut()) {
            if let Some(future) = slot {
                if let Poll::Ready(v) = future.as_mut().poll(cx) {
                    *out = Some(v);
                    *slot = None;
                }
            }
        }
        if pending.iter().all(Option::is_none) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await;
    outputs.into_iter().flatten().collect()
}

/// One run on `client`: acquire, the job, release (the client stays open).
/// The reply without usage, and the job's subrequests.
async fn run_once(
    cfg: &Config,
    client: &LockClient,
    name: &str,
    kind: LockKind,
    opts: &RunOptions,
    invocation: &str,
) -> (Reply, u32) {
    let acquired = client
        .acquire(name, kind, &opts.acquire_options(cfg.default_wait_ms))
        .await;
    match acquired {
        Ok(Acquired::Held(lock)) => {
            run_and_release(cfg, client, name, lock, opts.job_ms, invocation).await
        }
        Ok(Acquired::Busy) => (busy(name, kind), 0),
        Err(e) => (Reply::lock_error(&e), 0),
    }
}

/// Closes `client`; `reply` with the subrequests (and the connections, if
/// it opened any) it used.
async fn closed(cfg: &Config, client: &LockClient, reply: Reply, job_subrequests: u32) -> Reply {
    client.close().await;
    let reply = reply.with(
        "subrequests",
        subrequests(cfg, client.subrequests(), job_subrequests),
    );
    let connections = client.connections();
    if connections.opened == 0 {
        return reply;
    }
    reply.with(
        "connections",
        json!({ "peak": connections.peak, "opened": connections.opened, "open": connections.open }),
    )
}

/// The cron job of a deployment with `EDGELOCK_CRON_ELECT`: campaigns in
/// the election `name` (announcing `cron:<invocation>`, waiting as `opts`
/// say) and runs the job only if elected, with the leadership's fencing
/// token; then resigns. 409 `NOT_LEADER` (with the leader) otherwise.
pub async fn run_elected(cfg: &Config, name: &str, opts: &RunOptions, invocation: &str) -> Reply {
    let client = match client(cfg) {
        Ok(c) => c,
        Err(e) => return Reply::lock_error(&e),
    };
    let value = format!("cron:{invocation}");
    let elected = client
        .campaign(name, &value, &opts.acquire_options(cfg.default_wait_ms))
        .await;
    let leadership = match elected {
        Ok(Acquired::Held(lock)) => lock,
        Ok(Acquired::Busy) => {
            let leader = client.leader(name).await.ok().flatten();
            client.close().await;
            return Reply::coded(
                409,
                "NOT_LEADER",
                format!("another invocation leads {name:?}"),
            )
            .with("leader", leader_json(leader.as_ref()))
            .with("subrequests", subrequests(cfg, client.subrequests(), 0));
        }
        Err(e) => {
            client.close().await;
            return Reply::lock_error(&e)
                .with("subrequests", subrequests(cfg, client.subrequests(), 0));
        }
    };
    run_held(cfg, &client, name, leadership, opts.job_ms, invocation).await
}

async fn leader_of(cfg: &Config, name: &str) -> Reply {
    let client = match LockClient::new(cfg, cfg.subrequest_budget) {
        Ok(c) => c,
        Err(e) => return Reply::lock_error(&e),
    };
    let leader = client.leader(name).await;
    client.close().await;
    match leader {
        Ok(l) => Reply::ok(json!({ "name": name, "leader": leader_json(l.as_ref()) })),
        Err(e) => Reply::lock_error(&e),
    }
}

/// `{ value, fencingToken }` (the token a decimal string), or null.
fn leader_json(l: Option<&Leadership>) -> Value {
    match l {
        Some(l) => json!({ "value": l.value, "fencingToken": l.fencing_token.to_string() }),
        None => Value::Null,
    }
}

/// Runs the job under a held lock, then releases it and closes the client.
async fn run_held(
    cfg: &Config,
    client: &LockClient,
    name: &str,
    lock: LockInfo,
    job_ms: Option<u64>,
    invocation: &str,
) -> Reply {
    let (reply, job_subrequests) =
        run_and_release(cfg, client, name, lock, job_ms, invocation).await;
    closed(cfg, client, reply, job_subrequests).await
}

/// Runs the job under a held lock, then releases it. The reply without
/// usage, and the job's subrequests.
async fn run_and_release(
    cfg: &Config,
    client: &LockClient,
    name: &str,
    lock: LockInfo,
    job_ms: Option<u64>,
    invocation: &str,
) -> (Reply, u32) {
    let token = lock.fencing_token;
    let expires_at = client.to_epoch_ms(lock.expires_at);
    let held = lock.clone();
    // A permit's runs write to the slot's own resource: concurrent holders of
    // one semaphore have no common order, each slot's successive holders do.
    let resource = match lock.slot() {
        Some(slot) => format!("{name}.{slot}"),
        None => name.to_string(),
    };
    let ran = job::run(
        cfg.fenced_url.as_deref(),
        &resource,
        token,
        job_ms.unwrap_or(cfg.job_ms),
        invocation,
    )
    .await;
    let released = client.release(lock.id).await;
    let (job_subrequests, reply) = match ran {
        Err(e) => (e.subrequests, Reply::coded(502, "RESOURCE", e.message)),
        Ok(run) => {
            let body = json!({
                "job": name,
                "token": token.to_string(),
                "started": run.started,
                "finished": run.finished,
                "accepted": run.accepted,
                "expiresAt": expires_at,
                "invocation": invocation,
            });
            let reply = if run.accepted == Some(false) {
                Reply { status: 409, body }
                    .with("code", json!("FENCED"))
                    .with("error", json!("the resource refused the fencing token"))
            } else {
                Reply::ok(body)
            };
            (run.subrequests, reply)
        }
    };
    let released = match released {
        Ok(held) => json!({ "released": true, "heldUntilRelease": held }),
        Err(e) => json!({ "released": false, "code": e.code(), "error": e.to_string() }),
    };
    let reply = with_kind(reply, &held)
        .with("token", json!(token.to_string()))
        .with("release", released);
    (reply, job_subrequests)
}

/// Acquire and hand out the handle; the lock stays held (until its lease or
/// TTL runs out) for a later invocation to resume.
async fn start_job(cfg: &Config, name: &str, opts: &RunOptions) -> Reply {
    let kind = match opts.kind(cfg, name) {
        Ok(k) => k,
        Err(e) => return Reply::lock_error(&e),
    };
    let client = match client(cfg) {
        Ok(c) => c,
        Err(e) => return Reply::lock_error(&e),
    };
    let reply = match client
        .acquire(name, kind, &opts.acquire_options(cfg.default_wait_ms))
        .await
    {
        Ok(Acquired::Held(lock)) => with_kind(
            Reply::ok(json!({
                "job": name,
                "token": lock.fencing_token.to_string(),
                "expiresAt": client.to_epoch_ms(lock.expires_at),
                "handle": serde_json::to_value(&lock.handle).unwrap_or(Value::Null),
            })),
            &lock,
        ),
        Ok(Acquired::Busy) => busy(name, kind),
        Err(e) => Reply::lock_error(&e),
    };
    // No close: closing would release the lock. Dropping the client stops
    // its timers and requests; the backend keeps the lock for its TTL.
    reply.with("subrequests", subrequests(cfg, client.subrequests(), 0))
}

/// The handle, as `POST /jobs/:name/start` returned it (`{"handle": …}`) or bare.
fn parse_handle(body: &[u8]) -> Result<LockHandle, LockError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|_| LockError::invalid("the body must be the JSON lock handle"))?;
    let handle = value.get("handle").cloned().unwrap_or(value);
    serde_json::from_value(handle)
        .map_err(|_| LockError::invalid("the body is not a lock handle (as returned by /start)"))
}

async fn finish_job(cfg: &Config, name: &str, body: &[u8], invocation: &str) -> Reply {
    let handle = match parse_handle(body) {
        Ok(h) if h.name == name => h,
        Ok(_) => return Reply::lock_error(&LockError::invalid("the handle is for another job")),
        Err(e) => return Reply::lock_error(&e),
    };
    // A job configured to run N at once is finished only with a permit of N.
    if let Some(Err(e)) = cfg.job_kind(name).map(|k| handle.check_kind(k)) {
        return Reply::lock_error(&e);
    }
    let client = match client(cfg) {
        Ok(c) => c,
        Err(e) => return Reply::lock_error(&e),
    };
    match client.resume(&handle).await {
        Ok(lock) => run_held(cfg, &client, name, lock, None, invocation).await,
        Err(e) => {
            client.close().await;
            Reply::lock_error(&e).with("subrequests", subrequests(cfg, client.subrequests(), 0))
        }
    }
}

async fn lock_status(cfg: &Config, name: &str) -> Reply {
    let client = match client(cfg) {
        Ok(c) => c,
        Err(e) => return Reply::lock_error(&e),
    };
    let status = client.inspect(name).await;
    client.close().await;
    let reply = match status {
        Ok(s) => Reply::ok(json!({
            "name": s.name,
            "backend": cfg.backend.kind().as_str(),
            "held": s.held,
            "holder": s.holder,
            "token": s.fencing_token.map(|t| t.to_string()),
            "remainingMs": s.remaining_ms,
            "expiresAt": s.remaining_ms.map(|r| js_sys::Date::now() + r as f64),
            "waiters": s.waiters,
            "limit": s.limit,
            "holders": s.holders.iter().map(holder_json).collect::<Vec<_>>(),
            "queued": s.queued.iter().map(holder_json).collect::<Vec<_>>(),
        })),
        Err(e) => Reply::lock_error(&e),
    };
    reply.with("subrequests", subrequests(cfg, client.subrequests(), 0))
}

/// `{ id, mode, limit, slot, token }` of a holder or waiter.
fn holder_json(h: &Holder) -> Value {
    json!({
        "id": h.id,
        "mode": mode_name(h.kind),
        "limit": limit_of(h.kind),
        "slot": h.slot,
        "token": h.fencing_token.map(|t| t.to_string()),
    })
}

/// A path segment, percent-decoded (lock names may contain `/` as `%2F`).
fn decode_segment(s: &str) -> Result<String, LockError> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok());
            let Some(b) = hex else {
                return Err(LockError::invalid("malformed percent-encoding in the path"));
            };
            out.push(b);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| LockError::invalid("the lock name is not UTF-8"))
}
