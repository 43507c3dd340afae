//! Curator's `LeaderLatch`, node for node (design 2.4): a campaign for
//! election `N` is a contender node `<dir>/_c_<uuid>-latch-<seq>` whose data
//! is the participant id (edgelock's campaign value, UTF-8), held while it
//! is the first ([`lock_node`](super::lock_node) with `Rule::First`);
//! resigning deletes it. The fencing token is the node's czxid.
//!
//! **Leader** is Curator's `LeaderSelector.getLeader`: the latch nodes in
//! Curator's order (by what follows `latch-`), the data of the first one
//! that still exists read fresh; nobody when there is none. So edgelock's
//! `leader()` reports a Curator leader's id, and Curator's
//! `getLeader().getId()` an edgelock leader's campaign value.
//!
//! **Observe** reads the same way, with watches: a children watch on the
//! directory (an `exists` watch while it does not exist) and a data watch
//! on the leader's node; any event reads again.
//!
//! **Proclaim**: Curator's latch has no way to change a started
//! participant's id (it is fixed when the latch is built). edgelock
//! proclaims with `setData` on its own node while it leads; since Curator
//! reads the id from the node's data each time, Curator's
//! `getLeader().getId()` then shows the new value. The node and its czxid
//! (the token) stay.

use super::super::paths::{marker_of, sorted_children, LATCH_MARKER};
use super::super::records::err;
use super::super::session::{ZkError, ZkReply, ZkRequest};
use super::Failure;
use crate::core::Leadership;
use std::collections::VecDeque;

/// What a leader read does next.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ReadStep {
    Send(ZkRequest),
    /// The leader (and its node's path), or nobody.
    Done(Option<(Leadership, String)>),
    Fail(Failure),
}

#[derive(Debug)]
enum Phase {
    List,
    /// Reading a candidate's data.
    Read(String),
    /// The directory does not exist: an `exists` watch on it.
    DirWatch,
}

/// One read of who leads `dir` (see the module documentation).
#[derive(Debug)]
pub(crate) struct LeaderRead {
    dir: String,
    watch: bool,
    phase: Phase,
    candidates: VecDeque<String>,
}

impl LeaderRead {
    /// A read of `dir`, leaving watches when `watch` (for observe).
    pub(crate) fn new(dir: String, watch: bool) -> Self {
        LeaderRead {
            dir,
            watch,
            phase: Phase::List,
            candidates: VecDeque::new(),
        }
    }

    pub(crate) fn dir(&self) -> &str {
        &self.dir
    }

    pub(crate) fn start(&mut self) -> ReadStep {
        self.phase = Phase::List;
        self.candidates.clear();
        ReadStep::Send(ZkRequest::GetChildren {
            path: self.dir.clone(),
            watch: self.watch,
        })
    }

    pub(crate) fn on_answer(&mut self, result: Result<ZkReply, ZkError>) -> ReadStep {
        match std::mem::replace(&mut self.phase, Phase::List) {
            Phase::List => self.on_list(result),
            Phase::Read(path) => self.on_read(path, result),
            Phase::DirWatch => match result {
                // Created meanwhile: list it.
                Ok(_) => self.start(),
                Err(ZkError::Server(err::NO_NODE)) => ReadStep::Done(None),
                Err(e) => ReadStep::Fail(Failure::from_error("exists", &self.dir, e)),
            },
        }
    }

    fn on_list(&mut self, result: Result<ZkReply, ZkError>) -> ReadStep {
        match result {
            Ok(ZkReply::Children { children, .. }) => {
                let sorted = sorted_children(children, LATCH_MARKER);
                self.candidates = sorted
                    .into_iter()
                    .filter(|c| marker_of(c) == Some(LATCH_MARKER))
                    .map(|c| format!("{}/{c}", self.dir))
                    .collect();
                self.next()
            }
            Err(ZkError::Server(err::NO_NODE)) if self.watch => {
                self.phase = Phase::DirWatch;
                ReadStep::Send(ZkRequest::Exists {
                    path: self.dir.clone(),
                    watch: true,
                })
            }
            Err(ZkError::Server(err::NO_NODE)) => ReadStep::Done(None),
            Ok(_) => ReadStep::Fail(Failure::Backend(
                "a getChildren2 reply without children".into(),
            )),
            Err(e) => ReadStep::Fail(Failure::from_error("getChildren", &self.dir, e)),
        }
    }

    fn on_read(&mut self, path: String, result: Result<ZkReply, ZkError>) -> ReadStep {
        match result {
            Ok(ZkReply::Data { data, stat }) => {
                let leadership = Leadership {
                    value: String::from_utf8_lossy(&data).into_owned(),
                    fencing_token: u64::try_from(stat.czxid).unwrap_or(0),
                };
                ReadStep::Done(Some((leadership, path)))
            }
            // Gone since the list: the next one (Curator does the same).
            Err(ZkError::Server(err::NO_NODE)) => self.next(),
            Ok(_) => ReadStep::Fail(Failure::Backend("a getData reply without data".into())),
            Err(e) => ReadStep::Fail(Failure::from_error("getData", &path, e)),
        }
    }

    fn next(&mut self) -> ReadStep {
        match self.candidates.pop_front() {
            Some(path) => {
                self.phase = Phase::Read(path.clone());
                ReadStep::Send(ZkRequest::GetData {
                    path,
                    watch: self.watch,
                })
            }
            None => ReadStep::Done(None),
        }
    }
}
