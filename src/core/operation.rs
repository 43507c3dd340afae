//! Operations as data: what a user asks a machine to do ([`Operation`], with
//! the [`LockKind`] of an acquire), what it answers ([`Outcome`]), and what a
//! machine declares it can do ([`Capabilities`]).
//!
//! A new lock kind is a new [`LockKind`] variant plus the recipe that grants
//! it; drivers, the session and the budget wrapper pass operations through
//! without looking inside, so they do not change.

use super::error::LockError;
pub use super::kind::{KindFamily, LockKind, MAX_PERMITS};
use super::types::{
    AcquireOptions, BackendKind, Leadership, LockHandle, LockId, LockInfo, LockStatus, LostReason,
    Millis, OpId, Wait,
};

/// The largest campaign value, in bytes of UTF-8.
pub const MAX_CAMPAIGN_VALUE: usize = 4096;

/// The most names one [`Operation::AcquireAll`] may take.
pub const MAX_ACQUIRE_ALL: usize = 16;

/// The error of a machine asked for an operation it does not serve (its
/// capabilities should have refused it first; [`Operation::AcquireAll`] is
/// served by the multi-lock layer around every machine).
pub fn unserved(backend: BackendKind, op: &Operation) -> LockError {
    let what = match op {
        Operation::AcquireAll { .. } => "acquireAll outside the multi-lock layer",
        Operation::Reenter { .. } => "reentrant locks",
        Operation::Campaign { .. }
        | Operation::Proclaim { .. }
        | Operation::Leader { .. }
        | Operation::Observe { .. } => "elections",
        _ => "this operation",
    };
    LockError::invalid(format!(
        "the {} backend does not offer {what}",
        backend.as_str()
    ))
}

/// Checks a campaign value: at most [`MAX_CAMPAIGN_VALUE`] bytes
/// (`INVALID_ARGUMENT` otherwise). Any UTF-8 string, the empty one included.
pub fn check_campaign_value(value: &str) -> Result<(), LockError> {
    if value.len() > MAX_CAMPAIGN_VALUE {
        return Err(LockError::invalid(format!(
            "a campaign value must be at most {MAX_CAMPAIGN_VALUE} bytes, not {}",
            value.len()
        )));
    }
    Ok(())
}

/// Checks the names of an [`Operation::AcquireAll`]: 1..=[`MAX_ACQUIRE_ALL`]
/// of them, no name twice (`INVALID_ARGUMENT` otherwise; each name is
/// checked by the machine like any lock name).
pub fn check_acquire_all_names(names: &[String]) -> Result<(), LockError> {
    if names.is_empty() {
        return Err(LockError::invalid("acquireAll needs at least one name"));
    }
    if names.len() > MAX_ACQUIRE_ALL {
        return Err(LockError::invalid(format!(
            "acquireAll takes at most {MAX_ACQUIRE_ALL} names, not {}",
            names.len()
        )));
    }
    for (i, name) in names.iter().enumerate() {
        if names[..i].contains(name) {
            return Err(LockError::invalid(format!(
                "acquireAll got the name {name:?} twice"
            )));
        }
    }
    Ok(())
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
    /// Re-enter an exclusive lock by proof of ownership: its handle (never
    /// "the current thread", which async code cannot name). The backend,
    /// owner-checked, adds one hold to the handle's hold and the operation
    /// completes with [`Outcome::Acquired`]: a new [`LockId`] in this
    /// machine, with the SAME fencing token and handle as the outer hold; the
    /// machine renews it like a resumed lock. The hold count lives on the
    /// backend, so it survives the process that re-entered. A release of any
    /// hold of that owner (outer or re-entered, from any process) takes one
    /// hold away and completes `Released { held_until_release: true }`; only
    /// the release that ends the last hold deletes the lock (waking waiters
    /// as a release does). A handle whose hold is gone fails with `LOST`,
    /// nothing changed. Only [`LockKind::Exclusive`] handles re-enter:
    /// anything else is `INVALID_ARGUMENT` before any request
    /// ([`Capabilities::check`]). Machines that do not implement it answer
    /// [`unserved`].
    Reenter {
        /// The handle of the hold to re-enter (a credential: it carries the
        /// owner).
        handle: LockHandle,
    },
    /// Ask the backend who holds `name`; completes with [`Outcome::Inspected`].
    Inspect {
        /// The lock's name.
        name: String,
    },
    /// Wait to lead the election `name` (FIFO where the backend queues),
    /// announcing `value`; completes like an acquire, with
    /// [`Outcome::Acquired`] of kind [`LockKind::Leader`] (or
    /// [`Outcome::NotAcquired`] for `Wait::Try`). Resigning is
    /// [`Operation::Release`]; the leadership renews and is lost like a lock.
    Campaign {
        /// The election's name (a lock name).
        name: String,
        /// What the leader announces (at most [`MAX_CAMPAIGN_VALUE`] bytes).
        value: String,
        /// Wait bound and TTL, as for an acquire.
        options: AcquireOptions,
    },
    /// Replace the value of a leadership this client holds, checked on the
    /// backend (only while it still leads); completes with
    /// [`Outcome::Proclaimed`], or `NotHeld` / `Lost` errors.
    Proclaim {
        /// The leadership, as its campaign's `Acquired` outcome named it.
        lock: LockId,
        /// The new value (at most [`MAX_CAMPAIGN_VALUE`] bytes).
        value: String,
    },
    /// Who leads `name` now; completes with [`Outcome::Leader`].
    Leader {
        /// The election's name.
        name: String,
    },
    /// Wait until the leadership of `name` differs from `known` (another
    /// leader, another value, or nobody), pushed by the backend where it can
    /// (etcd's watch, Redis's wake-up channel) with a timer as the fallback.
    /// Completes with [`Outcome::Leader`]: the new state, or the current
    /// (unchanged) state when `wait` runs out. `Wait::Try` answers at once.
    Observe {
        /// The election's name.
        name: String,
        /// The state the caller last saw (`None`: nobody leads).
        known: Option<Leadership>,
        /// How long to wait for a change.
        wait: Wait,
    },
    /// Hold every name in `names` or none: exclusive locks taken one by one
    /// in a canonical order (by bytes), so that clients asking for
    /// overlapping sets in any order cannot deadlock; on any failure the
    /// names already taken are released before the operation completes.
    /// Completes with [`Outcome::AcquiredAll`] (the locks in the order of
    /// `names`) or [`Outcome::NotAcquired`] for `Wait::Try`. The wait bound
    /// covers the whole set.
    AcquireAll {
        /// 1..=[`MAX_ACQUIRE_ALL`] distinct lock names.
        names: Vec<String>,
        /// Wait bound (for the whole set) and per-lock TTL.
        options: AcquireOptions,
    },
}

impl Operation {
    /// An exclusive acquire of `name` (the common case).
    pub fn acquire(name: impl Into<String>, options: AcquireOptions) -> Self {
        Operation::Acquire {
            name: name.into(),
            kind: LockKind::Exclusive,
            options,
        }
    }

    /// The lock name the operation is about, where the operation names one.
    pub fn name(&self) -> Option<&str> {
        match self {
            Operation::Acquire { name, .. }
            | Operation::Inspect { name }
            | Operation::Campaign { name, .. }
            | Operation::Leader { name }
            | Operation::Observe { name, .. } => Some(name),
            Operation::Resume { handle } | Operation::Reenter { handle } => Some(&handle.name),
            Operation::Release { .. }
            | Operation::Extend { .. }
            | Operation::Proclaim { .. }
            | Operation::AcquireAll { .. } => None,
        }
    }

    /// Whether the operation gives something back (may use a budget's reserve).
    pub fn is_cleanup(&self) -> bool {
        matches!(self, Operation::Release { .. })
    }
}

/// The successful result of an operation, carried by
/// [`Event::Completed`].
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
    /// A proclaim finished: the leadership now announces the new value.
    Proclaimed {
        /// The leadership.
        lock: LockId,
    },
    /// Who leads an election (`None`: nobody), for [`Operation::Leader`]
    /// and [`Operation::Observe`].
    Leader(Option<Leadership>),
    /// Every name of an [`Operation::AcquireAll`] is held: one lock per
    /// name, in the order of its `names`.
    AcquiredAll(Vec<LockInfo>),
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
            Outcome::Proclaimed { .. } => "Proclaimed",
            Outcome::Leader(_) => "Leader",
            Outcome::AcquiredAll(_) => "AcquiredAll",
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
            Outcome::Released {
                held_until_release, ..
            } => Ok(held_until_release),
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

    /// A proclaim's answer.
    pub fn into_proclaimed(self) -> Result<(), LockError> {
        match self {
            Outcome::Proclaimed { .. } => Ok(()),
            other => Err(other.mismatch("a proclaim")),
        }
    }

    /// A leader's or observe's answer.
    pub fn into_leader(self) -> Result<Option<Leadership>, LockError> {
        match self {
            Outcome::Leader(l) => Ok(l),
            other => Err(other.mismatch("a leader query")),
        }
    }

    /// An acquireAll's answer: the locks, or `None` for `NotAcquired`.
    pub fn into_acquired_all(self) -> Result<Option<Vec<LockInfo>>, LockError> {
        match self {
            Outcome::AcquiredAll(locks) => Ok(Some(locks)),
            Outcome::NotAcquired => Ok(None),
            other => Err(other.mismatch("an acquireAll")),
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
    /// The machine serves [`Operation::AcquireAll`] itself as one atomic
    /// try of the whole set (etcd: one transaction; one Redis node whose
    /// host accepts scripts over several hash slots: one script): it answers
    /// [`Outcome::AcquiredAll`] with every name held, or
    /// [`Outcome::NotAcquired`] with none of them taken (its wait bound is
    /// not used). [`MultiLock`](super::MultiLock) tries that first and
    /// falls back to its one-name-at-a-time recipe. A machine without it
    /// refuses `AcquireAll`.
    pub atomic_sets: bool,
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
        let kind = match op {
            Operation::Acquire {
                kind: LockKind::Leader,
                ..
            } => {
                return Err(LockError::invalid(
                    "a leadership is taken by a campaign, not an acquire",
                ))
            }
            Operation::Acquire { kind, .. } => *kind,
            Operation::Campaign { value, .. } | Operation::Proclaim { value, .. } => {
                check_campaign_value(value)?;
                LockKind::Leader
            }
            Operation::Leader { .. } | Operation::Observe { .. } => LockKind::Leader,
            Operation::AcquireAll { names, .. } => {
                check_acquire_all_names(names)?;
                LockKind::Exclusive
            }
            // Only an exclusive hold has one owner to count holds of: a
            // permit, a shared hold or a leadership is refused before any
            // request.
            Operation::Reenter { handle } => {
                if handle.kind != LockKind::Exclusive {
                    return Err(LockError::invalid(format!(
                        "only an exclusive lock can be re-entered, not a {} hold",
                        handle.kind.describe()
                    )));
                }
                LockKind::Exclusive
            }
            _ => return Ok(()),
        };
        if let LockKind::Permits { limit } = kind {
            LockKind::permits(limit as u64)?;
        }
        if !self.supports(kind) {
            if kind == LockKind::Leader {
                return Err(unserved(backend, op));
            }
            return Err(LockError::invalid(format!(
                "the {} backend does not offer {} locks",
                backend.as_str(),
                kind.as_str()
            )));
        }
        Ok(())
    }
}

/// What the core tells the driver: the completion of an operation, or news
/// about a held lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// Operation `op` finished: every operation completes exactly once.
    Completed {
        /// The operation, as `start` / `close` returned it.
        op: OpId,
        /// Its typed outcome, or why it failed.
        result: Result<Outcome, LockError>,
    },
    /// Automatic renewal moved a lock's validity forward.
    Renewed {
        /// The renewed lock.
        lock: LockId,
        /// New conservative end of validity on the driver's clock.
        expires_at: Millis,
    },
    /// A held lock is no longer held. Emitted once per lock; the lock is forgotten.
    Lost {
        /// The lost lock.
        lock: LockId,
        /// Its name, for messages.
        name: String,
        /// Why it was lost.
        reason: LostReason,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsupported_kinds_are_refused_with_invalid_argument() {
        let caps = Capabilities {
            kinds: Capabilities::EXCLUSIVE_ONLY,
            atomic_sets: false,
        };
        let acquire = |kind| Operation::Acquire {
            name: "a".into(),
            kind,
            options: AcquireOptions::default(),
        };
        assert!(caps
            .check(BackendKind::Redis, &acquire(LockKind::Exclusive))
            .is_ok());
        let e = caps
            .check(BackendKind::Etcd, &acquire(LockKind::Shared))
            .unwrap_err();
        assert_eq!(e.code(), "INVALID_ARGUMENT");
        assert!(
            e.to_string()
                .contains("etcd backend does not offer shared locks"),
            "{e}"
        );
        let e = caps
            .check(BackendKind::Redis, &acquire(LockKind::Permits { limit: 3 }))
            .unwrap_err();
        assert!(e.to_string().contains("permits"), "{e}");
        let all = Capabilities {
            kinds: &[KindFamily::Exclusive, KindFamily::Permits],
            atomic_sets: false,
        };
        assert!(all
            .check(BackendKind::Redis, &acquire(LockKind::Permits { limit: 3 }))
            .is_ok());
        assert_eq!(
            all.check(BackendKind::Redis, &acquire(LockKind::Permits { limit: 0 }))
                .unwrap_err()
                .code(),
            "INVALID_ARGUMENT"
        );
        assert!(caps
            .check(BackendKind::Redis, &Operation::Inspect { name: "a".into() })
            .is_ok());
    }

    #[test]
    fn elections_and_multi_locks_are_checked_before_any_machine_sees_them() {
        let leaders = Capabilities {
            kinds: &[KindFamily::Exclusive, KindFamily::Leader],
            atomic_sets: false,
        };
        let campaign = |value: &str| Operation::Campaign {
            name: "e".into(),
            value: value.into(),
            options: AcquireOptions::default(),
        };
        assert!(leaders.check(BackendKind::Etcd, &campaign("")).is_ok());
        assert!(leaders
            .check(
                BackendKind::Etcd,
                &campaign(&"v".repeat(MAX_CAMPAIGN_VALUE))
            )
            .is_ok());
        let e = leaders
            .check(
                BackendKind::Etcd,
                &campaign(&"v".repeat(MAX_CAMPAIGN_VALUE + 1)),
            )
            .unwrap_err();
        assert_eq!(e.code(), "INVALID_ARGUMENT");
        assert!(
            e.to_string().contains("at most 4096 bytes, not 4097"),
            "{e}"
        );
        let proclaim = Operation::Proclaim {
            lock: LockId(1),
            value: "x".repeat(5000),
        };
        assert_eq!(
            leaders
                .check(BackendKind::Redis, &proclaim)
                .unwrap_err()
                .code(),
            "INVALID_ARGUMENT"
        );
        let e = Capabilities {
            kinds: Capabilities::EXCLUSIVE_ONLY,
            atomic_sets: false,
        }
        .check(BackendKind::Redis, &campaign("v"))
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("redis backend does not offer elections"),
            "{e}"
        );
        let acquire_leader = Operation::Acquire {
            name: "e".into(),
            kind: LockKind::Leader,
            options: AcquireOptions::default(),
        };
        assert_eq!(
            leaders
                .check(BackendKind::Etcd, &acquire_leader)
                .unwrap_err()
                .code(),
            "INVALID_ARGUMENT"
        );

        let all = |names: &[&str]| Operation::AcquireAll {
            names: names.iter().map(|n| n.to_string()).collect(),
            options: AcquireOptions::default(),
        };
        assert!(leaders.check(BackendKind::Etcd, &all(&["a", "b"])).is_ok());
        for (names, says) in [
            (vec![], "at least one name"),
            (vec!["a", "b", "a"], "the name \"a\" twice"),
        ] {
            let e = leaders.check(BackendKind::Etcd, &all(&names)).unwrap_err();
            assert_eq!(e.code(), "INVALID_ARGUMENT");
            assert!(e.to_string().contains(says), "{e}");
        }
        let many: Vec<String> = (0..=MAX_ACQUIRE_ALL).map(|i| format!("n{i}")).collect();
        let e = check_acquire_all_names(&many).unwrap_err();
        assert!(e.to_string().contains("at most 16 names, not 17"), "{e}");
        assert!(check_acquire_all_names(&many[..MAX_ACQUIRE_ALL]).is_ok());
    }

    #[test]
    fn a_leadership_handle_round_trips_its_mode() {
        let h = LockHandle {
            v: 1,
            backend: BackendKind::Etcd,
            name: "e".into(),
            key: "k".into(),
            owner: "1".into(),
            fencing_token: 7,
            revision: 7,
            kind: LockKind::Leader,
            slot: None,
        };
        let json = serde_json::to_string(&h).unwrap();
        assert!(json.contains(r#""mode":"leader""#), "{json}");
        assert_eq!(LockHandle::from_json(&json).unwrap(), h);
        assert_eq!(
            h.check_kind(LockKind::Exclusive).unwrap_err().code(),
            "INVALID_ARGUMENT"
        );
    }

    #[test]
    fn only_exclusive_handles_reenter() {
        let caps = Capabilities {
            kinds: &[
                KindFamily::Exclusive,
                KindFamily::Shared,
                KindFamily::Permits,
                KindFamily::Leader,
            ],
            atomic_sets: false,
        };
        let reenter = |kind| Operation::Reenter {
            handle: LockHandle {
                v: 1,
                backend: BackendKind::Etcd,
                name: "r".into(),
                key: "k".into(),
                owner: "1".into(),
                fencing_token: 7,
                revision: 7,
                kind,
                slot: None,
            },
        };
        assert!(caps
            .check(BackendKind::Etcd, &reenter(LockKind::Exclusive))
            .is_ok());
        assert_eq!(reenter(LockKind::Exclusive).name(), Some("r"));
        for kind in [
            LockKind::Shared,
            LockKind::Permits { limit: 2 },
            LockKind::Leader,
        ] {
            let e = caps.check(BackendKind::Etcd, &reenter(kind)).unwrap_err();
            assert_eq!(e.code(), "INVALID_ARGUMENT");
            assert!(e.to_string().contains("only an exclusive lock"), "{e}");
        }
        let e = unserved(BackendKind::Etcd, &reenter(LockKind::Exclusive));
        assert!(e.to_string().contains("reentrant locks"), "{e}");
    }

    #[test]
    fn a_mismatched_outcome_is_an_internal_error() {
        let e = Outcome::Closed.into_acquired().unwrap_err();
        assert_eq!(e.code(), "INTERNAL");
        assert!(
            e.to_string().contains("an acquire completed with Closed"),
            "{e}"
        );
        assert_eq!(Outcome::NotAcquired.into_acquired().unwrap(), None);
        assert!(Outcome::Released {
            lock: LockId(1),
            held_until_release: true
        }
        .into_released()
        .unwrap());
    }
}
