//! The one error type of the public surface. Every variant is something a user
//! can act on; `code()` is the stable string the JS binding exposes.
//!
//! Messages name the lock and the backend, never a secret (tokens, auth headers,
//! owner tokens): they are built only from names and backend replies, and backend
//! replies are truncated and stripped of anything that looks like a credential
//! by [`sanitize_detail`].

use std::fmt;

/// Why a lock operation failed. Marked `#[non_exhaustive]`: new variants may
/// be added; [`LockError::code`] gives each one a stable string.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LockError {
    /// Rejected before any request was sent (bad name, TTL, URL, option, handle).
    InvalidArgument {
        /// What was wrong with the argument.
        message: String,
    },
    /// A waiting acquire ran out of its wait time (its key, if any, is removed).
    Timeout {
        /// Backend name (`etcd`, `redis`, `redlock`).
        backend: &'static str,
        /// The lock's name.
        name: String,
    },
    /// The operation was cancelled by the caller (its key, if any, is removed).
    Aborted {
        /// Backend name (`etcd`, `redis`, `redlock`).
        backend: &'static str,
        /// The lock's name.
        name: String,
    },
    /// Redlock could not get a majority of nodes (after all retries).
    NoQuorum {
        /// Backend name (`etcd`, `redis`, `redlock`).
        backend: &'static str,
        /// The lock's name.
        name: String,
        /// Nodes that granted the lock.
        granted: usize,
        /// Nodes needed for a majority.
        needed: usize,
    },
    /// The lock was lost (lease expired, key deleted, renewal failed).
    Lost {
        /// Backend name (`etcd`, `redis`, `redlock`).
        backend: &'static str,
        /// The lock's name.
        name: String,
        /// What made the client consider the lock lost.
        reason: String,
    },
    /// Release/extend of a lock this client does not hold (any more).
    NotHeld {
        /// Backend name (`etcd`, `redis`, `redlock`).
        backend: &'static str,
        /// The lock's name.
        name: String,
    },
    /// The backend answered, but with an error or something the client cannot
    /// accept (HTTP 4xx/5xx, malformed or hostile reply).
    Backend {
        /// Backend name (`etcd`, `redis`, `redlock`).
        backend: &'static str,
        /// The lock's name.
        name: String,
        /// HTTP status of the reply, if the error came with one.
        status: Option<u16>,
        /// The backend's error, or what was wrong with its reply (never a secret).
        message: String,
    },
    /// No answer: connection refused, reset, or request timeout, on every endpoint tried.
    Transport {
        /// Backend name (`etcd`, `redis`, `redlock`).
        backend: &'static str,
        /// The lock's name.
        name: String,
        /// What went wrong on the last attempt.
        message: String,
    },
    /// A subrequest budget (Workers) would be exceeded by the next request.
    BudgetExhausted {
        /// Backend name (`etcd`, `redis`, `redlock`).
        backend: &'static str,
        /// The lock's name.
        name: String,
        /// The request budget that would be exceeded.
        budget: u32,
    },
    /// The client was closed.
    Closed {
        /// Backend name (`etcd`, `redis`, `redlock`).
        backend: &'static str,
    },
    /// A bug in edgelock: a state the code does not expect. Please report it
    /// with the message.
    Internal {
        /// Description of the unexpected state.
        message: String,
    },
}

/// Every stable code [`LockError::code`] can return, in one place: the npm
/// package's `api.mjs` and `index.d.ts` are checked against this list by a
/// test (`tests/error_codes.rs`), so the three cannot drift apart.
pub const ERROR_CODES: &[&str] = &[
    "INVALID_ARGUMENT",
    "TIMEOUT",
    "ABORTED",
    "NO_QUORUM",
    "LOST",
    "NOT_HELD",
    "BACKEND",
    "TRANSPORT",
    "BUDGET",
    "CLOSED",
    "INTERNAL",
];

impl LockError {
    /// Stable code, matching the JS `LockError.code`.
    pub fn code(&self) -> &'static str {
        match self {
            LockError::InvalidArgument { .. } => "INVALID_ARGUMENT",
            LockError::Timeout { .. } => "TIMEOUT",
            LockError::Aborted { .. } => "ABORTED",
            LockError::NoQuorum { .. } => "NO_QUORUM",
            LockError::Lost { .. } => "LOST",
            LockError::NotHeld { .. } => "NOT_HELD",
            LockError::Backend { .. } => "BACKEND",
            LockError::Transport { .. } => "TRANSPORT",
            LockError::BudgetExhausted { .. } => "BUDGET",
            LockError::Closed { .. } => "CLOSED",
            LockError::Internal { .. } => "INTERNAL",
        }
    }

    /// An [`LockError::InvalidArgument`] with `message`.
    pub fn invalid(message: impl Into<String>) -> Self {
        LockError::InvalidArgument {
            message: message.into(),
        }
    }

    /// A [`LockError::Internal`] (a bug in edgelock) with `message`.
    pub fn internal(message: impl Into<String>) -> Self {
        LockError::Internal {
            message: message.into(),
        }
    }

    /// True when retrying the same operation later may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            LockError::Transport { .. }
                | LockError::Backend { .. }
                | LockError::NoQuorum { .. }
                | LockError::Timeout { .. }
        )
    }
}

impl fmt::Display for LockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LockError::InvalidArgument { message } => write!(f, "invalid argument: {message}"),
            LockError::Timeout { backend, name } => {
                write!(f, "timed out waiting for lock {name:?} ({backend})")
            }
            LockError::Aborted { backend, name } => {
                write!(f, "acquire of lock {name:?} ({backend}) was aborted")
            }
            LockError::NoQuorum {
                backend,
                name,
                granted,
                needed,
            } => {
                write!(f, "no quorum for lock {name:?} ({backend}): {granted} of {needed} needed nodes granted")
            }
            LockError::Lost {
                backend,
                name,
                reason,
            } => write!(f, "lock {name:?} ({backend}) was lost: {reason}"),
            LockError::NotHeld { backend, name } => {
                write!(f, "lock {name:?} ({backend}) is not held by this client")
            }
            LockError::Backend {
                backend,
                name,
                status,
                message,
            } => match status {
                Some(s) => write!(
                    f,
                    "{backend} backend error for lock {name:?}: HTTP {s}: {message}"
                ),
                None => write!(f, "{backend} backend error for lock {name:?}: {message}"),
            },
            LockError::Transport {
                backend,
                name,
                message,
            } => {
                write!(
                    f,
                    "cannot reach {backend} backend for lock {name:?}: {message}"
                )
            }
            LockError::BudgetExhausted {
                backend,
                name,
                budget,
            } => {
                write!(
                    f,
                    "subrequest budget of {budget} would be exceeded for lock {name:?} ({backend})"
                )
            }
            LockError::Closed { backend } => write!(f, "the {backend} client is closed"),
            LockError::Internal { message } => {
                write!(f, "internal error in edgelock (please report): {message}")
            }
        }
    }
}

impl std::error::Error for LockError {}

/// Control characters replaced, nothing cut or redacted: for backend texts
/// that are redacted later by [`sanitize_detail`] (a cut made before the
/// redaction could leave a prefix of a secret behind).
pub fn clean_control(raw: &str) -> String {
    raw.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// Make a backend-provided text safe and short enough to put in an error message:
/// at most 200 characters, control characters replaced, and any word that looks
/// like a bearer credential or one of `secrets` removed.
pub fn sanitize_detail(raw: &str, secrets: &[&str]) -> String {
    // Redact before truncating, so that no prefix of a secret survives a cut.
    let mut s = raw.to_string();
    for secret in secrets {
        if secret.len() >= 4 && s.contains(secret) {
            s = s.replace(secret, "<redacted>");
        }
    }
    let s = redact_credentials(&s);
    s.chars()
        .take(200)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// Replaces the word after `Bearer` / `Basic` (any case), the way an
/// `Authorization` header echoed by a backend would carry a credential.
fn redact_credentials(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut redact_next = false;
    for piece in s.split_inclusive(char::is_whitespace) {
        let word = piece.trim_end_matches(char::is_whitespace);
        if redact_next && !word.is_empty() {
            out.push_str("<redacted>");
            out.push_str(&piece[word.len()..]);
            redact_next = false;
            continue;
        }
        redact_next = word.eq_ignore_ascii_case("bearer")
            || word.eq_ignore_ascii_case("basic")
            || (redact_next && word.is_empty());
        out.push_str(piece);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variant_has_a_listed_code() {
        let samples = [
            LockError::invalid("x"),
            LockError::Timeout {
                backend: "etcd",
                name: "a".into(),
            },
            LockError::Aborted {
                backend: "etcd",
                name: "a".into(),
            },
            LockError::NoQuorum {
                backend: "redlock",
                name: "a".into(),
                granted: 1,
                needed: 2,
            },
            LockError::Lost {
                backend: "etcd",
                name: "a".into(),
                reason: "r".into(),
            },
            LockError::NotHeld {
                backend: "etcd",
                name: "a".into(),
            },
            LockError::Backend {
                backend: "etcd",
                name: "a".into(),
                status: None,
                message: "m".into(),
            },
            LockError::Transport {
                backend: "etcd",
                name: "a".into(),
                message: "m".into(),
            },
            LockError::BudgetExhausted {
                backend: "etcd",
                name: "a".into(),
                budget: 1,
            },
            LockError::Closed { backend: "etcd" },
            LockError::internal("x"),
        ];
        let codes: Vec<&str> = samples.iter().map(LockError::code).collect();
        assert_eq!(codes, ERROR_CODES);
    }

    #[test]
    fn secrets_are_redacted_before_the_cut_and_bearer_words_always() {
        let secret = "s3cr3t-value-0123456789";
        let raw = format!("{} {secret}", "x".repeat(190));
        assert!(!sanitize_detail(&raw, &[secret]).contains("s3cr3t"));
        let echoed = sanitize_detail("401: Authorization: Bearer  abc.def-ghi\r\nnext", &[]);
        assert!(!echoed.contains("abc.def"), "{echoed}");
        assert!(echoed.contains("Bearer  <redacted>"), "{echoed}");
        assert_eq!(sanitize_detail("plain words stay", &[]), "plain words stay");
        assert!(sanitize_detail(&"é".repeat(500), &[]).chars().count() == 200);
    }
}
