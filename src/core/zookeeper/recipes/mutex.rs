//! One acquire of Curator's `InterProcessMutex`, node for node (design 2.1,
//! 4.4), as a state machine the engine feeds with answers and watch events:
//!
//! 1. `create2(<dir>/_c_<uuid>-lock-, EPHEMERAL_SEQUENTIAL)` pipelined with
//!    `getChildren(<dir>)` (the session's order puts our node in the list):
//!    an uncontended acquire is one round trip;
//! 2. `NONODE` on the create: `createContainer` for every ancestor
//!    (`NODEEXISTS` is fine), then 1 again;
//! 3. the create's reply lost: the children are listed again and our node
//!    found by its protected prefix (its czxid read with `exists`), or 1
//!    again if it is not there;
//! 4. children sorted by Curator's rule: first → held (the token is our
//!    node's czxid); else `getData(predecessor, watch)` and wait for its
//!    event (`NONODE`: list again at once), or, for a try, give up (the
//!    engine deletes our node).

use super::super::paths::{base_name, sorted_children, MUTEX_MARKER};
use super::super::records::{err, Acl};
use super::super::session::{ZkError, ZkReply, ZkRequest};
use super::Failure;
use crate::core::zookeeper::records::create_mode;

/// What a request of an acquire was for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Purpose {
    /// `createContainer` of an ancestor.
    Parent,
    /// The `create2` of our node.
    Create,
    /// `getChildren` of the lock's directory.
    List,
    /// `getData` with a watch on the predecessor.
    Watch,
    /// `getChildren` to find our node after a lost create reply.
    Find,
    /// `exists` of the node found by its prefix (for its czxid).
    FindStat,
}

/// What the engine does next for an acquire.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// Nothing until the next answer or event.
    Idle,
    /// Submit these requests, in order.
    Send(Vec<(Purpose, ZkRequest)>),
    /// Our node is first: held, with its czxid as fencing token.
    Acquired { path: String, czxid: i64 },
    /// A try found the lock held (our node, if any, must go).
    NotAcquired,
    /// The acquire failed.
    Fail(Failure),
}

/// See the module documentation.
#[derive(Debug)]
pub(crate) struct MutexAcquire {
    dir: String,
    prefix: String,
    data: Vec<u8>,
    acl: Vec<Acl>,
    try_only: bool,
    /// Our node's name and czxid, once known.
    node: Option<(String, i64)>,
    made_parents: bool,
    /// The predecessor whose event we wait for.
    waiting_on: Option<String>,
    /// Our node, found by its prefix, while its czxid is read.
    found: Option<String>,
}

impl MutexAcquire {
    /// An acquire in `dir` with protected prefix `prefix` (`_c_<uuid>-`).
    pub(crate) fn new(
        dir: String,
        prefix: String,
        data: Vec<u8>,
        acl: Vec<Acl>,
        try_only: bool,
    ) -> Self {
        MutexAcquire {
            dir,
            prefix,
            data,
            acl,
            try_only,
            node: None,
            made_parents: false,
            waiting_on: None,
            found: None,
        }
    }

    /// The first requests: create our node and list the directory.
    pub(crate) fn start(&mut self) -> Step {
        self.node = None;
        self.waiting_on = None;
        Step::Send(vec![self.create(), self.list()])
    }

    /// Our node's full path, once known.
    pub(crate) fn node_path(&self) -> Option<String> {
        self.node.as_ref().map(|(n, _)| format!("{}/{n}", self.dir))
    }

    /// The predecessor path waited for, if waiting.
    pub(crate) fn waiting_on(&self) -> Option<&str> {
        self.waiting_on.as_deref()
    }

    fn create(&self) -> (Purpose, ZkRequest) {
        let path = format!("{}/{}{MUTEX_MARKER}", self.dir, self.prefix);
        let req = ZkRequest::Create {
            path,
            data: self.data.clone(),
            acl: self.acl.clone(),
            mode: create_mode::EPHEMERAL_SEQUENTIAL,
        };
        (Purpose::Create, req)
    }

    fn list(&self) -> (Purpose, ZkRequest) {
        let req = ZkRequest::GetChildren {
            path: self.dir.clone(),
            watch: false,
        };
        (Purpose::List, req)
    }

    /// The answer to a request made for `purpose`.
    pub(crate) fn on_answer(&mut self, purpose: Purpose, result: Result<ZkReply, ZkError>) -> Step {
        match purpose {
            Purpose::Parent => self.on_parent(result),
            Purpose::Create => self.on_create(result),
            Purpose::List => self.on_list(result),
            Purpose::Watch => self.on_watch_set(result),
            Purpose::Find => self.on_find(result),
            Purpose::FindStat => self.on_find_stat(result),
        }
    }

    fn on_parent(&mut self, result: Result<ZkReply, ZkError>) -> Step {
        match result {
            Ok(_) | Err(ZkError::Server(err::NODE_EXISTS)) => Step::Idle,
            // The create behind it fails too and says what to do.
            Err(_) => Step::Idle,
        }
    }

    fn on_create(&mut self, result: Result<ZkReply, ZkError>) -> Step {
        match result {
            Ok(ZkReply::Created { path, stat }) => {
                self.node = Some((base_name(&path).to_string(), stat.czxid));
                Step::Idle
            }
            Ok(_) => Step::Fail(Failure::Backend("a create2 reply without a Stat".into())),
            Err(ZkError::Server(err::NO_NODE)) if !self.made_parents => {
                self.made_parents = true;
                let mut reqs = self.parents();
                reqs.extend([self.create(), self.list()]);
                Step::Send(reqs)
            }
            Err(ZkError::Server(err::NO_NODE)) => Step::Fail(Failure::Backend(format!(
                "cannot create {}: a parent is missing even after creating it (does the chroot exist?)",
                self.dir
            ))),
            // The node may exist: find it by its protected prefix.
            Err(ZkError::Transport(_)) => Step::Send(vec![(Purpose::Find, self.list().1)]),
            Err(ZkError::NotSent(_)) if !self.try_only => Step::Send(vec![self.create(), self.list()]),
            Err(e) => Step::Fail(Failure::from_error("create", &self.dir, e)),
        }
    }

    /// `createContainer` for the directory and each ancestor.
    fn parents(&self) -> Vec<(Purpose, ZkRequest)> {
        super::super::paths::ancestors(&self.dir)
            .into_iter()
            .map(|path| {
                let acl = vec![Acl::open_unsafe()];
                (Purpose::Parent, ZkRequest::CreateContainer { path, acl })
            })
            .collect()
    }

    fn on_list(&mut self, result: Result<ZkReply, ZkError>) -> Step {
        let Some((ours, czxid)) = self.node.clone() else {
            // The list behind a create that failed: that create decides.
            return Step::Idle;
        };
        let children = match result {
            Ok(ZkReply::Children { children, .. }) => children,
            Ok(_) => {
                return Step::Fail(Failure::Backend(
                    "a getChildren2 reply without children".into(),
                ))
            }
            Err(ZkError::Server(err::NO_NODE)) => return self.start(),
            Err(ZkError::Transport(_) | ZkError::NotSent(_)) => {
                return Step::Send(vec![self.list()])
            }
            Err(e) => return Step::Fail(Failure::from_error("getChildren", &self.dir, e)),
        };
        let sorted = sorted_children(children, MUTEX_MARKER);
        match sorted.iter().position(|c| *c == ours) {
            // Our node is gone (Curator: NoNode, the attempt starts over).
            None => self.start(),
            Some(0) => Step::Acquired {
                path: format!("{}/{ours}", self.dir),
                czxid,
            },
            Some(_) if self.try_only => Step::NotAcquired,
            Some(i) => {
                let pred = format!("{}/{}", self.dir, sorted[i - 1]);
                self.waiting_on = Some(pred.clone());
                Step::Send(vec![(
                    Purpose::Watch,
                    ZkRequest::GetData {
                        path: pred,
                        watch: true,
                    },
                )])
            }
        }
    }

    fn on_watch_set(&mut self, result: Result<ZkReply, ZkError>) -> Step {
        match result {
            Ok(_) => Step::Idle,
            Err(ZkError::Server(err::NO_NODE))
            | Err(ZkError::Transport(_) | ZkError::NotSent(_)) => {
                self.waiting_on = None;
                Step::Send(vec![self.list()])
            }
            Err(e) => Step::Fail(Failure::from_error("getData", &self.dir, e)),
        }
    }

    fn on_find(&mut self, result: Result<ZkReply, ZkError>) -> Step {
        match result {
            Ok(ZkReply::Children { children, .. }) => {
                match children.into_iter().find(|c| c.starts_with(&self.prefix)) {
                    Some(name) => {
                        let path = format!("{}/{name}", self.dir);
                        self.found = Some(name);
                        Step::Send(vec![(
                            Purpose::FindStat,
                            ZkRequest::Exists { path, watch: false },
                        )])
                    }
                    None => self.start(),
                }
            }
            Err(ZkError::Server(err::NO_NODE)) => self.start(),
            Err(ZkError::Transport(_) | ZkError::NotSent(_)) => {
                Step::Send(vec![(Purpose::Find, self.list().1)])
            }
            Ok(_) => Step::Fail(Failure::Backend(
                "a getChildren2 reply without children".into(),
            )),
            Err(e) => Step::Fail(Failure::from_error("getChildren", &self.dir, e)),
        }
    }

    fn on_find_stat(&mut self, result: Result<ZkReply, ZkError>) -> Step {
        match result {
            Ok(ZkReply::Stat(stat)) => match self.found.take() {
                Some(name) => {
                    self.node = Some((name, stat.czxid));
                    Step::Send(vec![self.list()])
                }
                None => self.start(),
            },
            Err(ZkError::Server(err::NO_NODE)) => self.start(),
            Err(ZkError::Transport(_) | ZkError::NotSent(_)) => {
                Step::Send(vec![(Purpose::Find, self.list().1)])
            }
            Ok(_) => Step::Fail(Failure::Backend("an exists reply without a Stat".into())),
            Err(e) => Step::Fail(Failure::from_error("exists", &self.dir, e)),
        }
    }

    /// A watch fired on `path`: if it is our predecessor, list again.
    pub(crate) fn on_watch(&mut self, path: &str) -> Step {
        if self.waiting_on.as_deref() != Some(path) {
            return Step::Idle;
        }
        self.waiting_on = None;
        Step::Send(vec![self.list()])
    }

    /// The session is back after a broken stream: the watch is gone, so a
    /// waiting acquire checks again (which sets a new one).
    pub(crate) fn on_reconnected(&mut self) -> Step {
        if self.waiting_on.take().is_none() {
            return Step::Idle;
        }
        Step::Send(vec![self.list()])
    }
}
