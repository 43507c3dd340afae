//! The etcd lock recipe over etcd v3's JSON gateway, implemented client-side
//! (the server's `/v3/lock` service is not used: Jepsen's etcd 3.4.3 analysis
//! showed it could grant after the lease had expired).
//!
//! # The recipe
//!
//! - **Session**: one lease per client, shared by all its locks, granted lazily
//!   and kept alive every TTL/3 while anything is held or waited for.
//! - **Keys**: `<prefix>/<escaped name>/<lease id in hex>`. Names are escaped
//!   (`%` → `%25`, `/` → `%2F`) so that the prefix range of lock `a` can never
//!   contain the keys of lock `a/b`.
//! - **Acquire** is ONE txn: if our key's create revision is 0, put it bound to
//!   the lease and read the two newest keys under the lock's prefix (ours and
//!   the one just before it, a read-write lock's reader key included) and the
//!   oldest one (if that is a semaphore's, the name is refused with
//!   `INVALID_ARGUMENT`); otherwise (a retry whose
//!   first attempt applied) read our key. No predecessor means we hold the lock.
//! - **Waiting**: watch only the predecessor (the key with the largest create
//!   revision below ours) for its DELETE, from the revision at which we saw it,
//!   then re-check (our key + the new predecessor in one txn). Waiters are thus
//!   served in create-revision (FIFO) order with no herd effect. A watch is
//!   restarted when a request to its endpoint fails over, and re-checked every
//!   30 s anyway: a stream on a silently dead connection never reports the
//!   delete, and everyone queued behind that waiter would wait with it.
//! - **Fencing token**: our key's create revision — etcd revisions are global
//!   and strictly increase, and a holder's key is created after its
//!   predecessor's, so successive holders get strictly increasing tokens.
//! - **Lease confirmation** at grant: a key bound to a lease exists only while
//!   the lease lives (expiry deletes it at a new revision). The fast path's
//!   successful put-with-lease, or reading our key at the re-check's revision,
//!   proves the lease alive at that revision; the grant is then only handed out
//!   if the client's own conservative lease expiry is still in the future.
//! - **Release** deletes exactly our key incarnation (compare create revision),
//!   so a retried or late release never deletes a newer key.
//! - **Lost lock**: when the lease cannot be kept alive before its conservative
//!   expiry, when keepalive says the lease is gone, or when the periodic check
//!   (one txn per keepalive round) finds our key missing or recreated.
//! - **Ghost keys**: an acquire txn whose answer was lost may apply later,
//!   after we gave up (even after we re-acquired and released the name), and
//!   leave our key holding the lock while the session lives on for other
//!   locks. Once any txn outcome was unknown, each renewal round also reads
//!   the lease's keys (`timetolive` with `keys`) and deletes the ones no lock
//!   or operation of ours accounts for (`machine/ghosts.rs`).
//!
//! One client acquiring the same name twice queues locally (FIFO) behind its
//! own earlier acquisition instead of colliding on the same key.
//!
//! # Semaphores (`LockKind::Permits { limit }`, `machine/permits.rs`)
//!
//! - **Keys** under the name's prefix `P`: a queue key `P<lease hex>.<n>` per
//!   acquisition (`n` is its operation id, so one client can hold several
//!   permits at once; permits never queue locally), in the queue range
//!   `[P, P"g")`; slot keys `P"s/"<k>` for `k` in `0..limit`, outside that
//!   range. Both are bound to the session lease. Every key's value is
//!   `p<limit>:<random>`: the limit is stored with the semaphore, and no key
//!   outlives its holders.
//! - **Holding rule**: the first `limit` queue keys by create revision hold a
//!   permit; waiters are served FIFO.
//! - **Acquire** is one txn: put our queue key if absent, and read the oldest
//!   `limit + 1` queue keys, the two newest (ours and our predecessor) and the
//!   slot keys. The oldest key decides the limit: if it carries another
//!   limit, or any key read is an exclusive lock's, our key is deleted and
//!   the acquire fails with `INVALID_ARGUMENT` (a newer key with another
//!   limit is a mistaken client about to leave, and makes nobody else fail).
//! - **Claiming a slot**, once among the first `limit`: one txn, if slot `k`
//!   does not exist and our queue key is still that incarnation, puts the
//!   slot key and puts our queue key again (same value and lease, so its
//!   create revision stays). A lost race re-reads the slots and tries another
//!   free one (bounded); a slot key already carrying our value (an earlier,
//!   unanswered attempt applied) is adopted. A holder always finds a free
//!   slot: slot keys belong to holders, and a holder's two keys share a lease
//!   and are deleted together (release, cleanup and lease expiry all delete
//!   both; a permit lost because one of them vanished deletes the other).
//! - **Waiting without a herd**: the first waiter (exactly `limit` keys
//!   before it) watches the queue range for DELETEs only (`NOPUT`), and
//!   re-checks on each; every later waiter watches only its predecessor for
//!   any event: a DELETE when it leaves, a PUT when it is promoted and
//!   claims its slot. A release thus wakes the first waiter, whose claim wakes
//!   the next one, which becomes the first waiter: two re-checks per
//!   handoff, whatever the queue length. The lock's watch refresh, re-check
//!   timers and failover restarts apply unchanged.
//! - **Release** is one txn deleting exactly our queue key and slot key
//!   incarnations (both create revisions compared, all or none). **Lost**,
//!   **extend** and the periodic key check work as for a lock, over both
//!   keys. **Resume** of a permit's handle (key = queue key, `revision` = its
//!   create revision, `slot`, `fencingToken` = the slot key's create
//!   revision) reads both keys, on the handle's lease, with the handle's limit.
//!   The ghost sweep knows queue and slot keys too.
//!
//! **What a permit's token guarantees.** A permit's fencing token is its
//! slot key's create revision. etcd revisions are global and strictly
//! increase, and slot `k` is only created while no incarnation of it exists,
//! so the successive holders of one slot get strictly increasing tokens, and
//! no two grants of the name ever share a token. A resource protected per
//! slot (one connection, one worker index per slot) can therefore reject a
//! stale holder exactly as with a lock: remember the highest token seen for
//! slot `k` and refuse lower ones. Tokens are *not* ordered across slots by
//! grant time: two holders promoted together may claim in either order, so
//! a resource that admits `limit` concurrent users must check per slot
//! (`LockInfo::slot`), never "token greater than the last one seen".
//!
//! # Read-write locks (`LockKind::Shared` readers, `machine/shared.rs`)
//!
//! Curator's `InterProcessReadWriteLock` on the lock's keys. A **writer** is
//! the exclusive lock unchanged: its key `P<lease hex>` holds when no key of
//! the name, reader or writer, has a lower create revision, and it watches
//! its immediate predecessor (a reader key is an ordinary predecessor: its
//! value `r:<random>` carries no semaphore limit). A **reader** puts a key
//! of its own per acquisition, `P"r/"<lease hex>.<n>` (one client may hold
//! several shared holds; readers never queue locally), bound to the session
//! lease, outside the writers' range `[P, P"g")`; its acquire txn also reads
//! the newest key of that range and the oldest key of the name. It holds
//! when no writer key precedes it (readers ahead do not matter); otherwise
//! it watches the newest writer key created before it for DELETE, then
//! re-checks (our key + the newest writer below our revision, one txn). So
//! readers arriving after a waiting writer queue behind it (a writer is never
//! starved), a writer's release wakes exactly the readers between it and the
//! next writer (one re-check each) and not that writer, which is woken only
//! by its own predecessor. A semaphore's key among those read refuses a
//! shared acquire with `INVALID_ARGUMENT`; a permit acquire reads the
//! readers' range and is refused the same way when a reader key exists.
//! Release, extend, the periodic key check, lease confirmation at grant,
//! resume (`mode: "shared"`: the key must be a reader key of the handle's
//! lease with a reader's value), cleanup and the ghost sweep are the lock's.
//!
//! **What a read-write lock's tokens guarantee.** Every hold's token is its
//! key's create revision. A writer holds only once every key created before
//! its own is gone, so its token is above the token of every earlier holder,
//! shared or exclusive; a reader holds only once every writer key created
//! before its own is gone, so its token is above every earlier writer's.
//! Readers holding together have distinct tokens in no particular order
//! (their grants may reach them in any order). A resource that remembers the
//! highest token of a *write* and refuses any operation with a lower token
//! therefore rejects a stale writer and a reader from before the last write;
//! a resource that must also fence stale readers against a later writer
//! should reject reads below the highest write token it has seen, never
//! reads below the highest read token (concurrent readers are legitimate).
//!
//! # Elections (`LockKind::Leader`, `machine/election.rs`)
//!
//! - **Campaign** is the exclusive lock's recipe unchanged (same key, queue,
//!   watch, lease, renewal, loss and cleanup); only the key's value differs:
//!   the campaign value itself, as Go's `concurrency.Election` stores it
//!   (`etcdctl elect` and edgelock see each other's leaders). A value of
//!   the form of edgelock's own lock values (16 lowercase hex digits, `r:…`,
//!   `p<limit>:…`) is refused. The leader is the oldest key of the name; its
//!   token is that key's create revision.
//! - **Proclaim** is one txn: compare our key's create revision, put the new
//!   value on the same lease; a failed compare is a lost leadership.
//! - **Leader** is one range (oldest key, limit 1): a leadership key leads
//!   (Go's included); no key, or an edgelock lock / reader / permit first in
//!   line, is `None`.
//! - **Observe** reads, then watches the name's prefix from the read's
//!   revision + 1 and derives each change from the pushed events (one new
//!   read when the oldest key is deleted).

mod auth;
mod gateway;
mod machine;

pub use auth::Authenticated;
pub use machine::EtcdMachine;

use crate::core::names::{validate_base_url, validate_ttl};
use crate::core::LockError;

/// Configuration of an etcd lock client.
#[derive(Clone, PartialEq, Eq)]
pub struct EtcdConfig {
    /// Gateway base URLs (`http://127.0.0.1:2379`); requests fail over in order.
    pub endpoints: Vec<String>,
    /// Key prefix, default `edgelock`.
    pub prefix: String,
    /// Session lease TTL (rounded up to whole seconds, etcd's granularity), default 10 s.
    pub session_ttl_ms: u64,
    /// Per-request timeout, default 5 s.
    pub request_timeout_ms: u64,
    /// Extra headers on every request (e.g. `Authorization`); never logged.
    pub headers: Vec<(String, String)>,
    /// etcd authentication: a user name and password turned into a token
    /// (see [`Authenticated`]); `None` for an etcd without auth.
    pub auth: Option<EtcdAuth>,
}

/// etcd credentials (`/v3/auth/authenticate`). `Debug` shows the user only.
#[derive(Clone, PartialEq, Eq)]
pub struct EtcdAuth {
    /// The etcd user.
    pub username: String,
    /// Its password; never in a message, a log or `Debug` output.
    pub password: String,
}

impl std::fmt::Debug for EtcdAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdAuth")
            .field("username", &self.username)
            .field("password", &"[redacted]")
            .finish()
    }
}

impl std::fmt::Debug for EtcdConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.headers.iter().map(|(k, _)| k.as_str()).collect();
        f.debug_struct("EtcdConfig")
            .field("endpoints", &self.endpoints)
            .field("prefix", &self.prefix)
            .field("session_ttl_ms", &self.session_ttl_ms)
            .field("request_timeout_ms", &self.request_timeout_ms)
            .field("header_names", &names)
            .field("auth", &self.auth)
            .finish()
    }
}

/// Default [`EtcdConfig::prefix`].
pub const DEFAULT_PREFIX: &str = "edgelock";
/// Default [`EtcdConfig::session_ttl_ms`] (10 s).
pub const DEFAULT_SESSION_TTL_MS: u64 = 10_000;
/// Default [`EtcdConfig::request_timeout_ms`] (5 s).
pub const DEFAULT_REQUEST_TIMEOUT_MS: u64 = 5_000;

impl EtcdConfig {
    /// A configuration for `endpoints` with every other setting at its default
    /// (no extra headers).
    pub fn new(endpoints: Vec<String>) -> Self {
        EtcdConfig {
            endpoints,
            prefix: DEFAULT_PREFIX.to_string(),
            session_ttl_ms: DEFAULT_SESSION_TTL_MS,
            request_timeout_ms: DEFAULT_REQUEST_TIMEOUT_MS,
            headers: Vec::new(),
            auth: None,
        }
    }

    /// Checks everything before any request can be built; returns the
    /// normalised endpoints.
    pub(crate) fn validate(&self) -> Result<Vec<String>, LockError> {
        if self.endpoints.is_empty() {
            return Err(LockError::invalid("at least one etcd endpoint is required"));
        }
        let endpoints = self
            .endpoints
            .iter()
            .map(|e| validate_base_url(e))
            .collect::<Result<Vec<_>, _>>()?;
        if self.prefix.is_empty() || self.prefix.len() > 256 || self.prefix.contains('\0') {
            return Err(LockError::invalid(
                "prefix must be 1..=256 bytes without NUL",
            ));
        }
        validate_ttl("sessionTtlMs", self.session_ttl_ms)?;
        if self.session_ttl_ms < 1000 {
            return Err(LockError::invalid(
                "sessionTtlMs must be at least 1000 (etcd leases have whole-second TTLs)",
            ));
        }
        validate_ttl("requestTimeoutMs", self.request_timeout_ms)?;
        if let Some(a) = &self.auth {
            let bad = |s: &str| s.is_empty() || s.len() > 1024 || s.contains('\0');
            if bad(&a.username) || bad(&a.password) {
                return Err(LockError::invalid(
                    "etcd auth: username and password must be 1..=1024 bytes without NUL",
                ));
            }
            if self
                .headers
                .iter()
                .any(|(k, _)| k.eq_ignore_ascii_case("authorization"))
            {
                return Err(LockError::invalid(
                    "etcd auth and an Authorization header exclude each other",
                ));
            }
        }
        for (k, v) in &self.headers {
            let bad = |s: &str| s.chars().any(|c| c == '\r' || c == '\n' || c == '\0');
            if k.is_empty() || bad(k) || bad(v) || k.contains(':') || k.contains(' ') {
                return Err(LockError::invalid(format!(
                    "header name {:?} or its value is not a valid HTTP header",
                    k.chars().take(40).collect::<String>()
                )));
            }
        }
        Ok(endpoints)
    }
}

/// Escapes a lock name into one key segment: `%` and `/` are percent-encoded,
/// every other byte is kept (etcd keys are arbitrary bytes).
pub(crate) fn escape_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        match c {
            '%' => out.push_str("%25"),
            '/' => out.push_str("%2F"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_keeps_prefixes_apart() {
        assert_eq!(escape_name("a/b"), "a%2Fb");
        assert_eq!(escape_name("a%2Fb"), "a%252Fb");
        assert_ne!(escape_name("a/b"), escape_name("a%2Fb"));
        assert!(!escape_name("a/b").starts_with(&format!("{}/", escape_name("a"))));
    }

    #[test]
    fn config_validation() {
        assert!(EtcdConfig::new(vec![]).validate().is_err());
        assert!(EtcdConfig::new(vec!["http://127.0.0.1:2379".into()])
            .validate()
            .is_ok());
        let mut c = EtcdConfig::new(vec!["http://127.0.0.1:2379".into()]);
        c.session_ttl_ms = 0;
        assert!(c.validate().is_err());
        c.session_ttl_ms = 10_000;
        c.headers = vec![("Authorization".into(), "x\r\nInjected: 1".into())];
        assert!(c.validate().is_err());
        c.headers = vec![("Authorization".into(), "Bearer sekrit".into())];
        assert!(c.validate().is_ok());
        assert!(!format!("{c:?}").contains("sekrit"));
    }
}
