//! Curator's recipes, node for node, as state machines over the session's
//! answers (the engine submits what they ask and routes answers back).
//! Only `InterProcessMutex` so far ([`mutex`]).

pub(crate) mod mutex;

use super::records::err;
use super::session::ZkError;
use crate::core::LockError;

/// Why a recipe step failed, before it is named after its lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Failure {
    /// The server refused or answered something unusable.
    Backend(String),
    /// No answer (the outcome may be unknown).
    Transport(String),
    /// The session expired (its nodes are gone).
    Expired,
}

impl Failure {
    /// `e`, the answer to `what` on `path`.
    pub(crate) fn from_error(what: &str, path: &str, e: ZkError) -> Failure {
        match e {
            ZkError::Server(code) => Failure::Backend(format!(
                "ZooKeeper answered {} to {what} {path}",
                describe_code(code)
            )),
            ZkError::NotSent(m) | ZkError::Transport(m) => {
                Failure::Transport(format!("{what} {path}: {m}"))
            }
            ZkError::Refused(m) => Failure::Backend(m),
            ZkError::Expired => Failure::Expired,
        }
    }

    /// The error a user sees for lock `name`.
    pub(crate) fn into_lock_error(self, backend: &'static str, name: &str) -> LockError {
        let name = name.to_string();
        match self {
            Failure::Backend(message) => LockError::Backend {
                backend,
                name,
                status: None,
                message,
            },
            Failure::Transport(message) => LockError::Transport {
                backend,
                name,
                message,
            },
            Failure::Expired => LockError::Transport {
                backend,
                name,
                message: "the ZooKeeper session expired (its nodes are gone); try again".into(),
            },
        }
    }
}

/// A server error code with its name (`NONODE (-101)`).
pub(crate) fn describe_code(code: i32) -> String {
    let name = match code {
        err::NO_NODE => "NONODE",
        err::NO_AUTH => "NOAUTH",
        err::BAD_VERSION => "BADVERSION",
        err::NO_CHILDREN_FOR_EPHEMERALS => "NOCHILDRENFOREPHEMERALS",
        err::NODE_EXISTS => "NODEEXISTS",
        err::NOT_EMPTY => "NOTEMPTY",
        err::SESSION_EXPIRED => "SESSIONEXPIRED",
        err::INVALID_ACL => "INVALIDACL",
        err::AUTH_FAILED => "AUTHFAILED",
        err::SESSION_MOVED => "SESSIONMOVED",
        err::BAD_ARGUMENTS => "BADARGUMENTS",
        err::QUOTA_EXCEEDED => "QUOTAEXCEEDED",
        err::THROTTLED_OP => "THROTTLEDOP",
        _ => "an error",
    };
    format!("{name} ({code})")
}
