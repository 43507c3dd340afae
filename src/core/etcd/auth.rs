//! etcd authentication around the etcd machine, sans-IO like the machine.
//!
//! etcd with auth enabled wants a token on every request: the gateway takes
//! it in the `Authorization` header, and `/v3/auth/authenticate` turns a user
//! name and password into one. Simple tokens expire (`--auth-token-ttl`,
//! 300 s by default) and a restarted etcd forgets them, so a token can go
//! stale while a lock is held. [`Authenticated`] wraps the machine and knows
//! nothing of the lock recipe:
//!
//! - a request the machine sends while there is no token is held back, and
//!   one `authenticate` request goes out (to the endpoint the first held
//!   request was for); the token, once known, goes on every held and later
//!   request;
//! - an answer that says the token is invalid or expired (HTTP 401) is not
//!   shown to the machine: the token is dropped, the request is held back
//!   and sent again, once, after a new `authenticate` — so a renewal that
//!   meets an expired token renews instead of losing the lock;
//! - a failed `authenticate` answers every held request with its failure
//!   (wrong password: etcd's own message, a `BACKEND` error; unreachable:
//!   a transport failure the machine retries on its next endpoint);
//! - a permission error (HTTP 403) gets a message that says which user and
//!   key prefix it is about, so a role that does not cover the lock prefix
//!   reads as what it is.
//!
//! The password and the token never reach a message: the token and the
//! password are scrubbed from every answer before the machine (which builds
//! the error messages) sees it, and `Debug` shows neither.

use std::collections::VecDeque;

use crate::core::runtime::VecMap;

use serde_json::Value;

use super::EtcdAuth;
use crate::core::operation::{Capabilities, Event, Operation};
use crate::core::types::{
    BackendKind, HttpRequest, Input, Method, Millis, OpId, RequestId, Target, Transmit,
    TransportError,
};
use crate::core::{LockError, LockMachine};

/// Request ids of the wrapper's own requests count down from here, far
/// above any id the machine's outbox hands out (it counts up from 1).
const OWN_IDS_FROM: u64 = u64::MAX - 1;

/// What an `authenticate` in flight is for.
struct AuthRequest {
    id: RequestId,
    deadline: Millis,
}

/// The etcd machine `M` with etcd authentication (see the module docs).
pub struct Authenticated<M> {
    inner: M,
    auth: EtcdAuth,
    prefix: String,
    request_timeout_ms: u64,
    token: Option<String>,
    pending_auth: Option<AuthRequest>,
    /// The machine's requests held back until there is a token.
    held: Vec<HttpRequest>,
    /// Requests out with a token, kept to be sent again after a 401.
    out_with_token: VecMap<RequestId, HttpRequest>,
    /// A request sent again goes out under an id of ours: ours -> the machine's.
    alias: VecMap<RequestId, RequestId>,
    /// Requests already sent again once (by the machine's id).
    resent: Vec<RequestId>,
    transmits: VecDeque<Transmit>,
    next_own_id: u64,
    now: Millis,
}

impl<M: LockMachine> Authenticated<M> {
    /// Wraps `inner`, which sends to etcd with `prefix` as its key prefix.
    pub fn new(inner: M, auth: EtcdAuth, prefix: &str, request_timeout_ms: u64) -> Self {
        Authenticated {
            inner,
            auth,
            prefix: prefix.to_string(),
            request_timeout_ms,
            token: None,
            pending_auth: None,
            held: Vec::new(),
            out_with_token: VecMap::new(),
            alias: VecMap::new(),
            resent: Vec::new(),
            transmits: VecDeque::new(),
            next_own_id: OWN_IDS_FROM,
            now: 0,
        }
    }

    fn own_id(&mut self) -> RequestId {
        let id = RequestId(self.next_own_id);
        self.next_own_id -= 1;
        id
    }

    /// Sends `authenticate` to the base URL of `like` unless one is out.
    fn authenticate(&mut self, like: &HttpRequest) {
        if self.pending_auth.is_some() {
            return;
        }
        // etcd endpoints are always URLs (`EtcdConfig::validate`); a request
        // without one is left to its own timeout.
        let Target::Url(url) = &like.target else {
            return;
        };
        let base = url
            .find("/v3/")
            .map_or(url.as_str(), |i| &url[..i])
            .to_string();
        let body =
            serde_json::json!({ "name": self.auth.username, "password": self.auth.password });
        let id = self.own_id();
        let req = HttpRequest {
            id,
            method: Method::Post,
            target: Target::Url(format!("{base}/v3/auth/authenticate")),
            headers: vec![("content-type".into(), "application/json".into())],
            body: serde_json::to_vec(&body).unwrap_or_default(),
            timeout_ms: Some(self.request_timeout_ms),
            stream: false,
        };
        self.pending_auth = Some(AuthRequest {
            id,
            deadline: self.now.saturating_add(self.request_timeout_ms),
        });
        self.transmits.push_back(Transmit::Send(req));
    }

    /// Sends `req` with the token (under an id of ours if it is a resend).
    fn send_with_token(&mut self, mut req: HttpRequest, token: &str) {
        req.headers
            .retain(|(k, _)| !k.eq_ignore_ascii_case("authorization"));
        req.headers
            .push(("Authorization".into(), token.to_string()));
        let machine_id = req.id;
        self.out_with_token.insert(machine_id, req.clone());
        if self.resent.contains(&machine_id) {
            let ours = self.own_id();
            self.alias.insert(ours, machine_id);
            req.id = ours;
        }
        self.transmits.push_back(Transmit::Send(req));
    }

    /// The answer to `authenticate`.
    fn on_auth_answer(&mut self, now: Millis, input: Input) {
        self.pending_auth = None;
        match input {
            Input::Response { status, body, .. } if (200..300).contains(&status) => {
                let token = serde_json::from_slice::<Value>(&body)
                    .ok()
                    .and_then(|v| v.get("token").and_then(Value::as_str).map(str::to_string))
                    .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_graphic()));
                match token {
                    Some(token) => {
                        for req in std::mem::take(&mut self.held) {
                            self.send_with_token(req, &token);
                        }
                        self.token = Some(token);
                    }
                    None => {
                        let body = br#"{"error":"etcd answered authenticate without a usable token","code":2}"#.to_vec();
                        self.fail_held_at(now, |id| Input::Response {
                            id,
                            status: 502,
                            body: body.clone(),
                        });
                    }
                }
            }
            Input::Response { status, body, .. } => {
                let body = self.scrub(body);
                self.fail_held_at(now, |id| Input::Response {
                    id,
                    status,
                    body: body.clone(),
                });
            }
            Input::Failed { error, .. } => self.fail_held_at(now, |id| Input::Failed {
                id,
                error: error.clone(),
            }),
            // `authenticate` is not a stream: a chunk or an end is a broken answer.
            Input::Opened { .. } | Input::Chunk { .. } | Input::StreamEnd { .. } => self
                .fail_held_at(now, |id| Input::Failed {
                    id,
                    error: TransportError::Io("authenticate answered as a stream".into()),
                }),
        }
    }

    /// Answers every held request with `answer(id)`.
    fn fail_held_at(&mut self, now: Millis, answer: impl Fn(RequestId) -> Input) {
        for req in std::mem::take(&mut self.held) {
            self.inner.handle_input(now, answer(req.id));
        }
    }

    /// Whether an answer says the token is no good (expired, revoked, or
    /// issued by an etcd that restarted since).
    fn token_refused(status: u16, body: &[u8]) -> bool {
        let text = String::from_utf8_lossy(body);
        status == 401
            || text.contains("invalid auth token")
            || text.contains("auth token is expired")
    }

    /// Removes the password and the token from an answer's bytes.
    fn scrub(&self, mut body: Vec<u8>) -> Vec<u8> {
        let mut secrets: Vec<&str> = vec![self.auth.password.as_str()];
        if let Some(t) = &self.token {
            secrets.push(t);
        }
        for s in secrets.into_iter().filter(|s| s.len() >= 3) {
            body = replace_all(&body, s.as_bytes(), b"[redacted]");
        }
        body
    }

    /// A 403 names the user and the key prefix it lacks permission on.
    fn explain_permission(&self, body: Vec<u8>) -> Vec<u8> {
        let Ok(mut v) = serde_json::from_slice::<Value>(&body) else {
            return body;
        };
        let detail = format!(
            "etcd user {:?} lacks read/write permission on the lock keys under {:?} (grant its role readwrite on that prefix)",
            self.auth.username.chars().take(64).collect::<String>(),
            format!("{}/", self.prefix)
        );
        for field in ["error", "message"] {
            if let Some(Value::String(m)) = v.get_mut(field) {
                *m = format!("{m}: {detail}");
            }
        }
        serde_json::to_vec(&v).unwrap_or(body)
    }

    /// An answer for the machine's request `id` (already translated).
    fn on_machine_answer(&mut self, now: Millis, id: RequestId, input: Input) {
        if let Input::Response { status, body, .. } = &input {
            if Self::token_refused(*status, body) && !self.resent.contains(&id) {
                if let Some(req) = self.out_with_token.remove(&id) {
                    // The same request again, once, with a new token.
                    self.resent.push(id);
                    if self.token.as_deref()
                        == req
                            .headers
                            .iter()
                            .find(|(k, _)| k == "Authorization")
                            .map(|(_, v)| v.as_str())
                    {
                        self.token = None;
                    }
                    match self.token.clone() {
                        Some(token) => self.send_with_token(req, &token),
                        None => {
                            self.authenticate(&req);
                            self.held.push(req);
                        }
                    }
                    return;
                }
            }
        }
        if input.is_final() {
            self.out_with_token.remove(&id);
            self.resent.retain(|r| *r != id);
        }
        let input = match input {
            Input::Response { status, body, .. } => {
                let body = self.scrub(body);
                let body = if status == 403 {
                    self.explain_permission(body)
                } else {
                    body
                };
                Input::Response { id, status, body }
            }
            Input::Opened { .. } => Input::Opened { id },
            Input::Chunk { data, .. } => Input::Chunk { id, data },
            Input::StreamEnd { .. } => Input::StreamEnd { id },
            Input::Failed { error, .. } => Input::Failed { id, error },
        };
        self.inner.handle_input(now, input);
    }
}

fn replace_all(haystack: &[u8], needle: &[u8], with: &[u8]) -> Vec<u8> {
    if needle.is_empty() || haystack.len() < needle.len() {
        return haystack.to_vec();
    }
    let mut out = Vec::with_capacity(haystack.len());
    let mut i = 0;
    while i < haystack.len() {
        if haystack[i..].starts_with(needle) {
            out.extend_from_slice(with);
            i += needle.len();
        } else {
            out.push(haystack[i]);
            i += 1;
        }
    }
    out
}

impl<M: LockMachine> LockMachine for Authenticated<M> {
    fn backend(&self) -> BackendKind {
        self.inner.backend()
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    fn live_count(&self) -> usize {
        self.inner.live_count()
    }
    fn start_operation(&mut self, now: Millis, op: Operation) -> Result<OpId, LockError> {
        self.now = now;
        self.inner.start(now, op)
    }
    fn cancel(&mut self, now: Millis, op: OpId) {
        self.now = now;
        self.inner.cancel(now, op)
    }
    fn close(&mut self, now: Millis) -> OpId {
        self.now = now;
        self.inner.close(now)
    }
    fn handle_input(&mut self, now: Millis, input: Input) {
        self.now = now;
        let id = input.id();
        if self.pending_auth.as_ref().is_some_and(|a| a.id == id) {
            return self.on_auth_answer(now, input);
        }
        if id.0 > self.next_own_id && !self.alias.contains_key(&id) {
            return; // an answer to a cancelled request of ours
        }
        let machine_id = if input.is_final() {
            self.alias.remove(&id)
        } else {
            self.alias.get(&id).copied()
        }
        .unwrap_or(id);
        self.on_machine_answer(now, machine_id, input);
    }
    fn handle_timeout(&mut self, now: Millis) {
        self.now = now;
        if let Some(a) = self.pending_auth.as_ref().filter(|a| a.deadline <= now) {
            let id = a.id;
            self.transmits.push_back(Transmit::Cancel(id));
            self.on_auth_answer(
                now,
                Input::Failed {
                    id,
                    error: TransportError::Timeout,
                },
            );
        }
        self.inner.handle_timeout(now);
    }
    fn poll_transmit(&mut self) -> Option<Transmit> {
        loop {
            if let Some(t) = self.transmits.pop_front() {
                return Some(t);
            }
            match self.inner.poll_transmit()? {
                Transmit::Send(req) => match self.token.clone() {
                    Some(token) => self.send_with_token(req, &token),
                    None => {
                        self.authenticate(&req);
                        self.held.push(req);
                    }
                },
                Transmit::Cancel(id) => {
                    if let Some(i) = self.held.iter().position(|r| r.id == id) {
                        self.held.remove(i);
                        continue;
                    }
                    self.out_with_token.remove(&id);
                    self.resent.retain(|r| *r != id);
                    let ours = self.alias.iter().find(|(_, m)| **m == id).map(|(o, _)| *o);
                    if let Some(o) = ours {
                        self.alias.remove(&o);
                    }
                    return Some(Transmit::Cancel(ours.unwrap_or(id)));
                }
                // Byte streams carry no HTTP header to authenticate (etcd's
                // JSON gateway opens none; a stream protocol authenticates
                // in its own bytes).
                t @ (Transmit::Open(_) | Transmit::Write { .. }) => return Some(t),
            }
        }
    }
    fn poll_event(&mut self) -> Option<Event> {
        self.inner.poll_event()
    }
    fn poll_timeout(&self) -> Option<Millis> {
        crate::core::outbox::earliest([
            self.inner.poll_timeout(),
            self.pending_auth.as_ref().map(|a| a.deadline),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::operation::{Capabilities, Outcome};
    use crate::core::types::{AcquireOptions, Wait};

    /// A stand-in for the etcd machine: an acquire sends one request per
    /// call of `again`, and completes with what the answer said.
    #[derive(Default)]
    struct OneRequest {
        out: crate::core::outbox::Outbox,
        op: Option<OpId>,
        answers: Vec<(u16, String)>,
    }

    impl LockMachine for OneRequest {
        fn backend(&self) -> BackendKind {
            BackendKind::Etcd
        }
        fn capabilities(&self) -> Capabilities {
            Capabilities {
                kinds: Capabilities::EXCLUSIVE_ONLY,
                atomic_sets: false,
            }
        }
        fn live_count(&self) -> usize {
            self.op.is_some() as usize
        }
        fn start_operation(&mut self, _now: Millis, _op: Operation) -> Result<OpId, LockError> {
            let op = self.out.op_id();
            self.op = Some(op);
            let id = self.out.request_id();
            self.out.send(HttpRequest {
                id,
                method: Method::Post,
                target: Target::Url("http://10.0.0.1:2379/v3/kv/txn".into()),
                headers: vec![],
                body: b"{}".to_vec(),
                timeout_ms: Some(1_000),
                stream: false,
            });
            Ok(op)
        }
        fn cancel(&mut self, _now: Millis, _op: OpId) {}
        fn close(&mut self, _now: Millis) -> OpId {
            self.out.op_id()
        }
        fn handle_input(&mut self, _now: Millis, input: Input) {
            if let Input::Response { status, body, .. } = input {
                let text = String::from_utf8_lossy(&body).into_owned();
                self.answers.push((status, text.clone()));
                if let Some(op) = self.op.take() {
                    let result = if status == 200 {
                        Ok(Outcome::NotAcquired)
                    } else {
                        Err(LockError::Backend {
                            backend: "etcd",
                            name: "n".into(),
                            status: Some(status),
                            message: text,
                        })
                    };
                    self.out.complete(op, result);
                }
            }
        }
        fn handle_timeout(&mut self, _now: Millis) {}
        fn poll_transmit(&mut self) -> Option<Transmit> {
            self.out.poll_transmit()
        }
        fn poll_event(&mut self) -> Option<Event> {
            self.out.poll_event()
        }
        fn poll_timeout(&self) -> Option<Millis> {
            None
        }
    }

    fn wrapped() -> Authenticated<OneRequest> {
        let auth = EtcdAuth {
            username: "locker".into(),
            password: "pw-7731".into(),
        };
        Authenticated::new(OneRequest::default(), auth, "edgelock", 1_000)
    }

    fn sends(m: &mut Authenticated<OneRequest>) -> Vec<HttpRequest> {
        std::iter::from_fn(|| m.poll_transmit())
            .filter_map(|t| match t {
                Transmit::Send(r) => Some(r),
                t @ (Transmit::Open(_) | Transmit::Write { .. }) => {
                    panic!("an HTTP machine opened a byte stream: {t:?}")
                }
                Transmit::Cancel(_) => None,
            })
            .collect()
    }

    fn respond(m: &mut Authenticated<OneRequest>, req: &HttpRequest, status: u16, body: &str) {
        m.handle_input(
            0,
            Input::Response {
                id: req.id,
                status,
                body: body.as_bytes().to_vec(),
            },
        );
    }

    fn header<'a>(r: &'a HttpRequest, name: &str) -> Option<&'a str> {
        r.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn acquire(m: &mut Authenticated<OneRequest>) -> OpId {
        m.start(
            0,
            Operation::acquire(
                "n",
                AcquireOptions {
                    wait: Wait::Try,
                    ttl_ms: None,
                },
            ),
        )
        .unwrap()
    }

    #[test]
    fn requests_wait_for_a_token_then_carry_it() {
        let mut m = wrapped();
        acquire(&mut m);
        let out = sends(&mut m);
        let [auth] = out.as_slice() else {
            panic!("{out:?}")
        };
        assert_eq!(
            auth.target.url(),
            Some("http://10.0.0.1:2379/v3/auth/authenticate")
        );
        assert_eq!(
            serde_json::from_slice::<Value>(&auth.body).unwrap(),
            serde_json::json!({"name": "locker", "password": "pw-7731"})
        );
        respond(&mut m, auth, 200, r#"{"header":{},"token":"tok.123"}"#);
        let out = sends(&mut m);
        let [txn] = out.as_slice() else {
            panic!("{out:?}")
        };
        assert_eq!(header(txn, "authorization"), Some("tok.123"));
        respond(&mut m, txn, 200, "{}");
        assert!(matches!(
            m.poll_event(),
            Some(Event::Completed {
                result: Ok(Outcome::NotAcquired),
                ..
            })
        ));
    }

    #[test]
    fn a_refused_token_is_renewed_and_the_request_sent_again_once() {
        let mut m = wrapped();
        acquire(&mut m);
        let auth = sends(&mut m).remove(0);
        respond(&mut m, &auth, 200, r#"{"token":"old.1"}"#);
        let txn = sends(&mut m).remove(0);
        respond(
            &mut m,
            &txn,
            401,
            r#"{"error":"etcdserver: invalid auth token","code":16}"#,
        );
        assert!(m.inner.answers.is_empty(), "the machine never sees the 401");
        let again = sends(&mut m);
        assert_eq!(again.len(), 1);
        assert!(again[0]
            .target
            .url()
            .unwrap()
            .ends_with("/v3/auth/authenticate"));
        respond(&mut m, &again[0], 200, r#"{"token":"new.2"}"#);
        let resent = sends(&mut m).remove(0);
        assert_ne!(resent.id, txn.id, "sent again under an id of the wrapper");
        assert_eq!(header(&resent, "authorization"), Some("new.2"));
        assert_eq!(resent.body, txn.body);
        // Refused again: this time the machine hears it (no loop).
        respond(
            &mut m,
            &resent,
            401,
            r#"{"error":"etcdserver: invalid auth token new.2","code":16}"#,
        );
        assert!(sends(&mut m).is_empty());
        assert_eq!(m.inner.answers.len(), 1);
        assert!(
            !m.inner.answers[0].1.contains("new.2"),
            "the token is scrubbed: {:?}",
            m.inner.answers
        );
    }

    #[test]
    fn a_failed_authenticate_answers_the_held_requests_without_the_password() {
        let mut m = wrapped();
        acquire(&mut m);
        let auth = sends(&mut m).remove(0);
        respond(
            &mut m,
            &auth,
            400,
            r#"{"error":"etcdserver: authentication failed, invalid user ID or password (pw-7731)","code":3}"#,
        );
        let Some(Event::Completed { result: Err(e), .. }) = m.poll_event() else {
            panic!()
        };
        assert_eq!(e.code(), "BACKEND");
        assert!(
            e.to_string().contains("authentication failed") && !e.to_string().contains("pw-7731"),
            "{e}"
        );
        assert!(!format!("{:?}", m.auth).contains("pw-7731"));
    }

    #[test]
    fn a_permission_error_names_the_user_and_the_prefix() {
        let mut m = wrapped();
        acquire(&mut m);
        let auth = sends(&mut m).remove(0);
        respond(&mut m, &auth, 200, r#"{"token":"t.1"}"#);
        let txn = sends(&mut m).remove(0);
        respond(
            &mut m,
            &txn,
            403,
            r#"{"error":"etcdserver: permission denied","code":7}"#,
        );
        let text = &m.inner.answers[0].1;
        assert!(
            text.contains("permission denied")
                && text.contains("locker")
                && text.contains("edgelock/"),
            "{text}"
        );
    }

    #[test]
    fn an_unanswered_authenticate_times_out_into_a_transport_failure() {
        let mut m = wrapped();
        acquire(&mut m);
        let auth = sends(&mut m).remove(0);
        assert_eq!(m.poll_timeout(), Some(1_000));
        m.handle_timeout(1_000);
        let cancels: Vec<_> = std::iter::from_fn(|| m.poll_transmit()).collect();
        assert!(cancels.contains(&Transmit::Cancel(auth.id)), "{cancels:?}");
    }
}
