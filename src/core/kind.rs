//! Lock kinds as data: what kind of hold an acquire asks for
//! ([`LockKind`]) and its parameter-free family ([`KindFamily`]). A leaf:
//! [`types`](super::types) (handles carry a kind) and
//! [`operation`](super::operation) both read it.

use super::error::LockError;

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
    /// The leader of an election: one holder at a time, like
    /// [`LockKind::Exclusive`], whose hold carries a value that
    /// [`Operation::Leader`](super::Operation::Leader) reports. Granted by [`Operation::Campaign`](super::Operation::Campaign) only.
    Leader,
}

/// The largest `limit` a semaphore may have. Every backend keeps one slot
/// record per permit, and etcd's transactions are capped at 128 operations.
pub const MAX_PERMITS: u32 = 100;

impl LockKind {
    /// A semaphore of `limit` permits, checked: `INVALID_ARGUMENT` for 0 or
    /// above [`MAX_PERMITS`].
    pub fn permits(limit: u64) -> Result<LockKind, LockError> {
        if limit == 0 || limit > MAX_PERMITS as u64 {
            return Err(LockError::invalid(format!(
                "a semaphore's limit must be an integer in 1..={MAX_PERMITS}, not {limit}"
            )));
        }
        Ok(LockKind::Permits {
            limit: limit as u32,
        })
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
            LockKind::Leader => "leader",
        }
    }

    pub(crate) fn family(self) -> KindFamily {
        match self {
            LockKind::Exclusive => KindFamily::Exclusive,
            LockKind::Shared => KindFamily::Shared,
            LockKind::Permits { .. } => KindFamily::Permits,
            LockKind::Leader => KindFamily::Leader,
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
    /// [`LockKind::Leader`]: elections ([`Operation::Campaign`](super::Operation::Campaign),
    /// [`Operation::Proclaim`](super::Operation::Proclaim), [`Operation::Leader`](super::Operation::Leader), [`Operation::Observe`](super::Operation::Observe)).
    Leader,
}
