//! Sending requests, retrying them on the next endpoint, and routing their answers.

use serde_json::Value;

use crate::core::json_stream::JsonObjectSplitter;

use super::{EtcdMachine, Failure, Pending, Purpose, BACKEND};
use crate::core::{HttpRequest, LockError, Method, Millis, OpId, RequestId, Target};

impl EtcdMachine {
    // ---- requests ---------------------------------------------------------

    pub(super) fn send(
        &mut self,
        now: Millis,
        purpose: Purpose,
        path: &'static str,
        body: Value,
        stream: bool,
    ) -> RequestId {
        let body = serde_json::to_vec(&body).unwrap_or_default();
        self.send_raw(now, purpose, path, body, stream, 1)
    }

    pub(super) fn send_raw(
        &mut self,
        now: Millis,
        purpose: Purpose,
        path: &'static str,
        body: Vec<u8>,
        stream: bool,
        attempt: u32,
    ) -> RequestId {
        let endpoint = self.current_endpoint % self.endpoints.len();
        let mut headers = vec![("content-type".to_string(), "application/json".to_string())];
        headers.extend(self.headers.iter().cloned());
        let request = HttpRequest {
            id: RequestId(0),
            method: Method::Post,
            target: Target::Url(format!("{}{}", self.endpoints[endpoint], path)),
            headers,
            body: body.clone(),
            timeout_ms: Some(self.request_timeout_ms),
            stream,
        };
        let pending = Pending {
            purpose,
            path,
            body,
            endpoint,
            attempt,
            sent_at: now,
            splitter: stream.then(JsonObjectSplitter::new),
        };
        match self.rt.send(now, pending, |id| {
            Ok::<_, std::convert::Infallible>(HttpRequest { id, ..request })
        }) {
            Ok(id) => id,
            Err(never) => match never {},
        }
    }

    pub(super) fn cancel_request(&mut self, id: Option<RequestId>) {
        if let Some(p) = id.and_then(|id| self.rt.cancel(id)) {
            self.note_unknown_outcome(&p);
        }
    }

    /// An operation's txn whose answer we will not see may still apply.
    fn note_unknown_outcome(&mut self, p: &Pending) {
        if p.path == "/v3/kv/txn" && matches!(p.purpose, Purpose::Op(_)) {
            self.ghost_risk = true;
        }
    }

    /// A request failed: retry it on the next endpoint when that can help,
    /// otherwise hand the failure to its purpose.
    pub(super) fn on_failure(&mut self, now: Millis, id: RequestId, p: Pending, f: Failure) {
        self.note_unknown_outcome(&p);
        if f.retryable() && p.endpoint == self.current_endpoint % self.endpoints.len() {
            self.current_endpoint = (p.endpoint + 1) % self.endpoints.len();
            if self.endpoints.len() > 1 {
                self.restart_watches_on(now, p.endpoint, id);
            }
        }
        let is_stream = p.splitter.is_some();
        if f.retryable()
            && !is_stream
            && p.attempt < self.max_attempts()
            && !self.rt.closing.drained()
        {
            let new_id = self.send_raw(now, p.purpose, p.path, p.body, false, p.attempt + 1);
            self.retarget(p.purpose, id, new_id);
            return;
        }
        self.dispatch(now, id, p, Err(f));
    }

    /// Watch streams on an endpoint that just failed a request may be as dead
    /// as it, and a silent stream never says so: re-check their predecessors
    /// (on the next endpoint) and watch again.
    fn restart_watches_on(&mut self, now: Millis, endpoint: usize, failed: RequestId) {
        let watches: Vec<(RequestId, OpId)> = self
            .rt
            .requests
            .iter()
            .filter(|(id, p)| *id != failed && p.endpoint == endpoint && p.splitter.is_some())
            .filter_map(|(id, p)| match p.purpose {
                Purpose::Op(op) => Some((id, op)),
                _ => None,
            })
            .collect();
        for (id, op) in watches {
            self.watch_broken(now, id, op);
        }
    }

    /// After a retry, the purpose's bookkeeping must point at the new request.
    pub(super) fn retarget(&mut self, purpose: Purpose, old: RequestId, new: RequestId) {
        let swap = |slot: &mut Option<RequestId>| {
            if *slot == Some(old) {
                *slot = Some(new);
            }
        };
        match purpose {
            Purpose::Grant => swap(&mut self.grant),
            Purpose::KeepAlive { lease } => {
                if let Some(l) = self.leases.get_mut(&lease) {
                    swap(&mut l.keepalive)
                }
            }
            Purpose::KeyCheck { lease } => {
                if let Some(l) = self.leases.get_mut(&lease) {
                    swap(&mut l.check)
                }
            }
            Purpose::Sweep { lease } => {
                if let Some(l) = self.leases.get_mut(&lease) {
                    swap(&mut l.sweep)
                }
            }
            Purpose::Op(op) => {
                if let Some(o) = self.ops.get_mut(&op) {
                    swap(&mut o.req)
                }
            }
            Purpose::Orphan => {
                for o in &mut self.orphans {
                    swap(&mut o.req)
                }
            }
            Purpose::Revoke | Purpose::CloseStep => {}
        }
    }

    pub(super) fn dispatch(
        &mut self,
        now: Millis,
        id: RequestId,
        p: Pending,
        result: Result<(u16, Vec<u8>), Failure>,
    ) {
        match p.purpose {
            Purpose::Grant => self.on_grant(now, id, p.sent_at, result),
            Purpose::KeepAlive { lease } => self.on_keepalive(now, id, lease, p.sent_at, result),
            Purpose::KeyCheck { lease } => self.on_key_check(now, id, lease, result),
            Purpose::Sweep { lease } => self.on_sweep(now, id, lease, result),
            Purpose::Revoke => {}
            Purpose::Orphan => self.on_orphan(now, id, result),
            Purpose::CloseStep => self.maybe_closed(),
            Purpose::Op(op) => {
                if self
                    .ops
                    .get(&op)
                    .map(|o| o.req == Some(id))
                    .unwrap_or(false)
                {
                    if let Some(o) = self.ops.get_mut(&op) {
                        o.req = None;
                    }
                    self.on_op_reply(now, op, p.sent_at, result);
                }
            }
        }
    }

    pub(super) fn backend_error(&self, name: &str, f: Failure) -> LockError {
        // A backend (or a proxy) may echo our headers back, in a body or in
        // what a driver reports about a broken reply: never let a configured
        // header value reach an error message.
        let secrets: Vec<&str> = self
            .headers
            .iter()
            .flat_map(|(_, v)| std::iter::once(v.as_str()).chain(v.split_whitespace()))
            .collect();
        match f {
            Failure::Transport(t) => {
                let message = crate::core::error::sanitize_detail(&t.to_string(), &secrets);
                LockError::Transport {
                    backend: BACKEND,
                    name: name.to_string(),
                    message,
                }
            }
            Failure::Gateway(g) => {
                let message = crate::core::error::sanitize_detail(&g.message(), &secrets);
                LockError::Backend {
                    backend: BACKEND,
                    name: name.to_string(),
                    status: g.status(),
                    message,
                }
            }
        }
    }
}
