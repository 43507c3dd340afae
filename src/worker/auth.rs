//! Who may call the Worker's routes: bearer tokens from the deployment's
//! secrets, each allowed the lock names under a prefix.
//!
//! Without this, anyone who can reach the Worker could take a lock handle
//! (the owner credential) for any name from `POST /jobs/:name/start` and
//! hold every lock for its TTL. So every route refuses a caller without a
//! valid token, and a deployment with no token configured refuses every
//! caller (fails closed), saying which secret to set. The cron trigger does
//! not pass through here: it is invoked by the platform, not over HTTP.
//!
//! Secrets (set with `wrangler secret put`, `.dev.vars` locally):
//! - `EDGELOCK_API_TOKEN`: one token allowed every lock name;
//! - `EDGELOCK_API_TOKENS`: tokens scoped to name prefixes, one entry per
//!   line or comma, `PREFIX=TOKEN` (e.g. `reports/=…`); an empty prefix
//!   (`=TOKEN`) allows every name.
//!
//! A token is at least [`MIN_TOKEN_BYTES`] bytes of printable ASCII without
//! spaces, commas or `=`. Tokens are compared in constant time (every
//! configured token is compared in full, whatever matched), and never
//! appear in a reply, a log line or `Debug` output.

use crate::core::LockError;

/// The shortest token accepted (a guessable token is no protection).
pub const MIN_TOKEN_BYTES: usize = 16;
/// The most tokens `EDGELOCK_API_TOKENS` may list.
pub const MAX_TOKENS: usize = 64;

/// The configured tokens and what each allows.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct AccessPolicy {
    grants: Vec<Grant>,
}

#[derive(Clone, PartialEq, Eq)]
struct Grant {
    /// Lock names this token may use start with this ("" = every name).
    prefix: String,
    token: Vec<u8>,
}

impl std::fmt::Debug for AccessPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let prefixes: Vec<&str> = self.grants.iter().map(|g| g.prefix.as_str()).collect();
        f.debug_struct("AccessPolicy")
            .field("token_prefixes", &prefixes)
            .finish()
    }
}

/// Why a request was refused (the HTTP status and a message that names the
/// secret to set or the scope missing, never a token).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub status: u16,
    pub code: &'static str,
    pub message: String,
}

impl AccessPolicy {
    /// Reads the two secrets (`None` when unset). A malformed entry is a
    /// configuration error that names the secret and the entry's position,
    /// never its text.
    pub fn from_secrets(
        single: Option<&str>,
        scoped: Option<&str>,
    ) -> Result<AccessPolicy, LockError> {
        let mut grants = Vec::new();
        if let Some(t) = single.map(str::trim).filter(|t| !t.is_empty()) {
            check_token(t)
                .map_err(|why| LockError::invalid(format!("EDGELOCK_API_TOKEN {why}")))?;
            grants.push(Grant {
                prefix: String::new(),
                token: t.as_bytes().to_vec(),
            });
        }
        if let Some(list) = scoped {
            let entries = list
                .split([',', '\n'])
                .map(str::trim)
                .filter(|e| !e.is_empty());
            for (i, entry) in entries.enumerate() {
                let n = i + 1;
                if grants.len() >= MAX_TOKENS {
                    return Err(LockError::invalid(format!(
                        "EDGELOCK_API_TOKENS lists more than {MAX_TOKENS} tokens"
                    )));
                }
                let (prefix, token) = entry.split_once('=').ok_or_else(|| {
                    LockError::invalid(format!(
                        "EDGELOCK_API_TOKENS entry {n} must look like PREFIX=TOKEN"
                    ))
                })?;
                check_token(token).map_err(|why| {
                    LockError::invalid(format!("EDGELOCK_API_TOKENS entry {n}: the token {why}"))
                })?;
                grants.push(Grant {
                    prefix: prefix.trim().to_string(),
                    token: token.as_bytes().to_vec(),
                });
            }
        }
        Ok(AccessPolicy { grants })
    }

    /// Whether any token is configured.
    pub fn is_configured(&self) -> bool {
        !self.grants.is_empty()
    }

    /// Checks the request's `Authorization` header for a route about
    /// `name` (`None`: a route about no lock, such as `GET /`, which any
    /// valid token may call).
    pub fn authorize(
        &self,
        authorization: Option<&str>,
        name: Option<&str>,
    ) -> Result<(), Refusal> {
        if !self.is_configured() {
            return Err(Refusal {
                status: 403,
                code: "NOT_CONFIGURED",
                message: "this Worker has no API token: set the secret EDGELOCK_API_TOKEN (`wrangler secret put EDGELOCK_API_TOKEN`) or EDGELOCK_API_TOKENS, and send it as `Authorization: Bearer <token>`".into(),
            });
        }
        let presented = authorization.and_then(bearer).ok_or_else(|| Refusal {
            status: 401,
            code: "UNAUTHORIZED",
            message: "send the API token as `Authorization: Bearer <token>`".into(),
        })?;
        // Every grant is compared in full, with no early exit: the time
        // taken does not tell which token, or how much of one, matched.
        // Several grants may share a token: any that covers the name allows it.
        let (mut valid, mut allowed) = (false, false);
        for g in &self.grants {
            let same = constant_time_eq(g.token.as_slice(), presented.as_bytes());
            valid |= same;
            allowed |= same && name.map_or(true, |n| n.starts_with(g.prefix.as_str()));
        }
        match (valid, allowed) {
            (_, true) => Ok(()),
            (false, _) => Err(Refusal {
                status: 401,
                code: "UNAUTHORIZED",
                message: "the API token is not valid".into(),
            }),
            (true, false) => Err(Refusal {
                status: 403,
                code: "FORBIDDEN",
                message: "the API token does not cover this lock name (its prefix does not match)"
                    .into(),
            }),
        }
    }
}

/// The token of an `Authorization: Bearer <token>` header.
fn bearer(header: &str) -> Option<&str> {
    let (scheme, token) = header.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

fn check_token(t: &str) -> Result<(), String> {
    if t.len() < MIN_TOKEN_BYTES {
        return Err(format!("must be at least {MIN_TOKEN_BYTES} bytes long"));
    }
    if !t
        .bytes()
        .all(|b| b.is_ascii_graphic() && b != b',' && b != b'=')
    {
        return Err("may contain only printable ASCII without spaces, commas or '='".into());
    }
    Ok(())
}

/// Equality whose time depends only on the lengths, not on where the
/// contents differ.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = (a.len() ^ b.len()) as u64;
    for i in 0..a.len().max(b.len()) {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= u64::from(x ^ y);
    }
    diff == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: &str = "all-names-token-0123456789";
    const REPORTS: &str = "reports-token-0123456789";

    fn policy() -> AccessPolicy {
        AccessPolicy::from_secrets(
            Some(ALL),
            Some(&format!(
                "reports/={REPORTS}\n, billing-=other-token-0123456789"
            )),
        )
        .unwrap()
    }

    #[test]
    fn tokens_are_checked_with_their_scope() {
        let p = policy();
        let auth = |t: &str| format!("Bearer {t}");
        assert!(p.authorize(Some(&auth(ALL)), Some("anything")).is_ok());
        assert!(p
            .authorize(Some(&auth(REPORTS)), Some("reports/nightly"))
            .is_ok());
        assert!(p
            .authorize(Some(&format!("bearer  {REPORTS} ")), None)
            .is_ok());
        let r = p
            .authorize(Some(&auth(REPORTS)), Some("billing-run"))
            .unwrap_err();
        assert_eq!((r.status, r.code), (403, "FORBIDDEN"));
        let r = p
            .authorize(Some(&auth("wrong-token-0123456789")), Some("reports/x"))
            .unwrap_err();
        assert_eq!((r.status, r.code), (401, "UNAUTHORIZED"));
        assert_eq!(p.authorize(None, Some("x")).unwrap_err().status, 401);
        assert_eq!(
            p.authorize(Some(ALL), Some("x")).unwrap_err().status,
            401,
            "no scheme"
        );
        assert_eq!(
            p.authorize(Some(&format!("Basic {ALL}")), Some("x"))
                .unwrap_err()
                .status,
            401
        );
        // A prefix of a valid token is not valid.
        assert_eq!(
            p.authorize(Some(&auth(&ALL[..20])), Some("x"))
                .unwrap_err()
                .status,
            401
        );
    }

    #[test]
    fn a_deployment_without_tokens_refuses_everyone_and_names_the_secret() {
        let p = AccessPolicy::from_secrets(None, Some("  ")).unwrap();
        let r = p
            .authorize(Some(&format!("Bearer {ALL}")), None)
            .unwrap_err();
        assert_eq!((r.status, r.code), (403, "NOT_CONFIGURED"));
        assert!(r.message.contains("EDGELOCK_API_TOKEN"), "{}", r.message);
    }

    #[test]
    fn malformed_secrets_are_refused_without_echoing_them() {
        for (single, scoped) in [
            (Some("short"), None),
            (None, Some("reports/")),
            (None, Some("a=has space in it 0123456789")),
            (Some("x=0123456789abcdefgh"), None),
        ] {
            let e = AccessPolicy::from_secrets(single, scoped).unwrap_err();
            assert_eq!(e.code(), "INVALID_ARGUMENT");
            let text = e.to_string();
            assert!(
                !text.contains("0123456789") && !text.contains("short"),
                "{text}"
            );
        }
        let many: Vec<String> = (0..=MAX_TOKENS)
            .map(|i| format!("p{i}=token-number-{i:04}-abcdefgh"))
            .collect();
        assert!(AccessPolicy::from_secrets(None, Some(&many.join(","))).is_err());
        let dbg = format!("{:?}", policy());
        assert!(
            !dbg.contains("token-0123") && dbg.contains("reports/"),
            "{dbg}"
        );
    }

    #[test]
    fn constant_time_eq_is_equality() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
        assert!(!constant_time_eq(b"", b"a"));
        assert!(constant_time_eq(b"", b""));
    }
}
