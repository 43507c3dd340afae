//! Operations as data: what a user asks a machine to do ([`Operation`], with
//! the [`LockKind`] of an acquire), what it answers ([`Outcome`]), and what a
//! machine declares it can do ([`Capabilities`]).
//!
//! A new lock kind is a new [`LockKind`] variant plus the recipe that grants
//! it; drivers, the session and the budget wrapper pass operations through
//! without looking inside, so they do not change.

use super::types::{AcquireOptions, BackendKind, LockHandle, LockId, LockInfo, LockStatus, Millis};
use super::LockError;

/// What kind of hold an acquire asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum LockKind {
    /// One holder at a time (a mutex).
    #[default]
    Exclusive,
    /// Any number of shared holders, or one exclusive holder (the reader side
    /// of a read-write lock; the writer side is [`LockKind::Exclusive`]).
    Shared,
    /// At most `limit` holders at once (a semaphore).
    Permits {
        /// How many holders the name admits at once (≥ 1).
        limit: u32,
    },
}

/// The largest `limit` a semaphore may have. Every backend keeps one slot
/// record per permit, and etcd's transactions are capped at 128 operations.
pub const MAX_PERMITS: u32 = 100;

impl LockKind {
    /// A semaphore of `limit` permits, checked: `INVALID_ARGUMENT` for 0 or
    /// above [`MAX_PERMITS`].
    pub fn permits(limit: u64) -> Result<LockKind, LockError> {
        if limit == 0 || limit > MAX_PERMITS as u64 {
            return Err(LockError::invalid(format!("a semaphore's limit must be an integer in 1..={MAX_PERMITS}, not {limit}")));
        }
        Ok(LockKind::Permits { limit: limit as u32 })
    }

    /// The kind's name and parameter, for messages ("exclusive", "shared",
    /// "permit of a semaphore of 3").
    pub fn describe(self) -> String {
        match self {
            LockKind::Permits { limit } => format!("permit of a semaphore of {limit}"),
            k => k.as_str().to_string(),
        }
    }

    /// The kind's name in messages and capability lists.
    pub fn as_str(self) -> &'static str {
        match self {
            LockKind::Exclusive => "exclusive",
            LockKind::Shared => "shared",
            LockKind::Permits { .. } => "permits",
        }
    }

    fn family(self) -> KindFamily {
        match self {
            LockKind::Exclusive => KindFamily::Exclusive,
            LockKind::Shared => KindFamily::Shared,
            LockKind::Permits { .. } => KindFamily::Permits,
        }
    }
}

/// A [`LockKind`] without its parameters, for capability lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum KindFamily {
    /// [`LockKind::Exclusive`].
    Exclusive,
    /// [`LockKind::Shared`].
    Shared,
    /// [`LockKind::Permits`] with any limit.
    Permits,
}

/// One user operation. Every machine takes the same value through
/// [`LockMachine::start`](super::LockMachine::start); a kind the machine does
/// not declare in its [`Capabilities`] is refused there, before anything is sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Operation {
    /// Take a hold of `kind` on `name`, waiting as `options.wait` says.
    /// Completes with [`Outcome::Acquired`], [`Outcome::NotAcquired`] (only
    /// for `Wait::Try`) or an error.
    Acquire {
        /// The lock's name (validated by the machine).
        name: String,
        /// What kind of hold.
        kind: LockKind,
        /// Wait bound and per-lock TTL.
        options: AcquireOptions,
    },
    /// Give a held lock back; completes with [`Outcome::Released`] (also for
    /// a lock already lost or released: idempotent).
    Release {
        /// The lock, as the machine's `Acquired` outcome named it.
        lock: LockId,
    },
    /// Renew a held lock now; completes with [`Outcome::Extended`], or
    /// `NotHeld` / `Lost` errors.
    Extend {
        /// The lock to extend.
        lock: LockId,
        /// A new TTL where the backend has per-lock TTLs (Redis); `None`
        /// keeps the lock's own.
        ttl_ms: Option<u64>,
    },
    /// Adopt a lock from a serialised handle; completes with
    /// [`Outcome::Acquired`] if the backend confirms it, else `Lost`.
    Resume {
        /// The handle another process or invocation serialised.
        handle: LockHandle,
    },
    /// Ask the backend who holds `name`; completes with [`Outcome::Inspected`].
    Inspect {
        /// The lock's name.
        name: String,
    },
}

impl Operation {
    /// An exclusive acquire of `name` (the common case).
    pub fn acquire(name: impl Into<String>, options: AcquireOptions) -> Self {
        Operation::Acquire { name: name.into(), kind: LockKind::Exclusive, options }
    }

    /// The lock name the operation is about, where the operation names one.
    pub fn name(&self) -> Option<&str> {
        match self {
            Operation::Acquire { name, .. } | Operation::Inspect { name } => Some(name),
            Operation::Resume { handle } => Some(&handle.name),
            Operation::Release { .. } | Operation::Extend { .. } => None,
        }
    }

    /// Whether the operation gives something back (may use a budget's reserve).
    pub fn is_cleanup(&self) -> bool {
        matches!(self, Operation::Release { .. })
    }
}

/// The successful result of an operation, carried by
/// [`Event::Completed`](super::Event::Completed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// An acquire or resume was granted.
    Acquired(LockInfo),
    /// A `Wait::Try` acquire found the name held by someone else (and left no key).
    NotAcquired,
    /// A release finished; `held_until_release` is false when the lock had
    /// already been lost (or released).
    Released {
        /// The released lock.
        lock: LockId,
        /// Whether the backend still had our hold when it was deleted.
        held_until_release: bool,
    },
    /// An extend finished.
    Extended {
        /// The extended lock.
        lock: LockId,
        /// New conservative end of validity on the driver's clock.
        expires_at: Millis,
    },
    /// What the backend says about a name.
    Inspected(LockStatus),
    /// A close finished: nothing is held or pending any more.
    Closed,
}

impl Outcome {
    /// The outcome's name, for messages about an unexpected outcome.
    pub fn as_str(&self) -> &'static str {
        match self {
            Outcome::Acquired(_) => "Acquired",
            Outcome::NotAcquired => "NotAcquired",
            Outcome::Released { .. } => "Released",
            Outcome::Extended { .. } => "Extended",
            Outcome::Inspected(_) => "Inspected",
            Outcome::Closed => "Closed",
        }
    }

    /// An acquire's or resume's answer: the lock, or `None` for `NotAcquired`.
    /// Any other outcome is a bug in edgelock (`INTERNAL`).
    pub fn into_acquired(self) -> Result<Option<LockInfo>, LockError> {
        match self {
            Outcome::Acquired(info) => Ok(Some(info)),
            Outcome::NotAcquired => Ok(None),
            other => Err(other.mismatch("an acquire")),
        }
    }

    /// A release's answer: whether the lock was still held until it.
    pub fn into_released(self) -> Result<bool, LockError> {
        match self {
            Outcome::Released { held_until_release, .. } => Ok(held_until_release),
            other => Err(other.mismatch("a release")),
        }
    }

    /// An extend's answer: the new end of validity.
    pub fn into_extended(self) -> Result<Millis, LockError> {
        match self {
            Outcome::Extended { expires_at, .. } => Ok(expires_at),
            other => Err(other.mismatch("an extend")),
        }
    }

    /// An inspect's answer.
    pub fn into_inspected(self) -> Result<LockStatus, LockError> {
        match self {
            Outcome::Inspected(status) => Ok(status),
            other => Err(other.mismatch("an inspect")),
        }
    }

    fn mismatch(&self, what: &str) -> LockError {
        LockError::internal(format!("{what} completed with {}", self.as_str()))
    }
}

/// What a machine can do, declared once so that an operation it cannot
/// serve is refused before any request is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capabilities {
    /// The lock kinds its recipe grants.
    pub kinds: &'static [KindFamily],
}

impl Capabilities {
    /// Exclusive locks only.
    pub const EXCLUSIVE_ONLY: &'static [KindFamily] = &[KindFamily::Exclusive];

    /// Whether `kind` is granted by this machine.
    pub fn supports(&self, kind: LockKind) -> bool {
        self.kinds.contains(&kind.family())
    }

    /// Refuses `op` with `INVALID_ARGUMENT` when it asks for a kind this
    /// machine does not grant, or for an impossible parameter.
    pub fn check(&self, backend: BackendKind, op: &Operation) -> Result<(), LockError> {
        let Operation::Acquire { kind, .. } = op else { return Ok(()) };
        if let LockKind::Permits { limit } = kind {
            LockKind::permits(*limit as u64)?;
        }
        if !self.supports(*kind) {
            return Err(LockError::invalid(format!(
                "the {} backend does not offer {} locks",
                backend.as_str(),
                kind.as_str()
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsupported_kinds_are_refused_with_invalid_argument() {
        let caps = Capabilities { kinds: Capabilities::EXCLUSIVE_ONLY };
        let acquire = |kind| Operation::Acquire { name: "a".into(), kind, options: AcquireOptions::default() };
        assert!(caps.check(BackendKind::Redis, &acquire(LockKind::Exclusive)).is_ok());
        let e = caps.check(BackendKind::Etcd, &acquire(LockKind::Shared)).unwrap_err();
        assert_eq!(e.code(), "INVALID_ARGUMENT");
        assert!(e.to_string().contains("etcd backend does not offer shared locks"), "{e}");
        let e = caps.check(BackendKind::Redis, &acquire(LockKind::Permits { limit: 3 })).unwrap_err();
        assert!(e.to_string().contains("permits"), "{e}");
        let all = Capabilities { kinds: &[KindFamily::Exclusive, KindFamily::Permits] };
        assert!(all.check(BackendKind::Redis, &acquire(LockKind::Permits { limit: 3 })).is_ok());
        assert_eq!(all.check(BackendKind::Redis, &acquire(LockKind::Permits { limit: 0 })).unwrap_err().code(), "INVALID_ARGUMENT");
        assert!(caps.check(BackendKind::Redis, &Operation::Inspect { name: "a".into() }).is_ok());
    }

    #[test]
    fn a_mismatched_outcome_is_an_internal_error() {
        let e = Outcome::Closed.into_acquired().unwrap_err();
        assert_eq!(e.code(), "INTERNAL");
        assert!(e.to_string().contains("an acquire completed with Closed"), "{e}");
        assert_eq!(Outcome::NotAcquired.into_acquired().unwrap(), None);
        assert!(Outcome::Released { lock: LockId(1), held_until_release: true }.into_released().unwrap());
    }
}
