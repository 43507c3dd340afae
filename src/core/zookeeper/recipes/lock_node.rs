//! One contender node of a Curator recipe, node for node (design 2.0-2.4,
//! 4.4), as a state machine the engine feeds with answers and watch events.
//! Every recipe but the semaphore is one such node; the semaphore is two
//! (its guard mutex, then its lease, see [`semaphore`](super::semaphore)).
//!
//! 1. `create2(<dir>/_c_<uuid>-<marker>, EPHEMERAL_SEQUENTIAL)` pipelined
//!    with `getChildren(<dir>)` (the session's order puts our node in the
//!    list): an uncontended acquire is one round trip;
//! 2. `NONODE` on the create: `createContainer` for every ancestor
//!    (`NODEEXISTS` is fine), then 1 again;
//! 3. the create's reply lost: the children are listed again and our node
//!    found by its protected prefix (its czxid read with `exists`), or 1
//!    again if it is not there;
//! 4. the children judged by the node's [`Rule`]: held (the token is our
//!    node's czxid); else a watch and a wait for its event (`NONODE` on the
//!    watched node: list again at once), or, for a try, give up (the engine
//!    deletes our node).

use super::super::paths::{base_name, contender_order, marker_of, READ_MARKER};
use super::super::records::{create_mode, err, Acl};
use super::super::session::{ZkError, ZkReply, ZkRequest};
use super::Failure;

/// What a request of an acquire was for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Purpose {
    /// `createContainer` of an ancestor.
    Parent,
    /// The `create2` of our node.
    Create,
    /// `getChildren` of the node's directory.
    List,
    /// `getData` with a watch on the node we wait behind.
    Watch,
    /// `getChildren` to find our node after a lost create reply.
    Find,
    /// `exists` of the node found by its prefix (for its czxid).
    FindStat,
}

/// Which node of a recipe a request is about (the semaphore has two).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stage {
    /// The recipe's only node, or the semaphore's lease.
    Main,
    /// The semaphore's guard mutex (`<dir>/locks`).
    Guard,
}

/// A request's tag: which node, and what for.
pub(crate) type Tag = (Stage, Purpose);

/// When a node holds (Curator's `LockInternalsDriver.getsTheLock`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rule {
    /// First of all contenders; else wait behind the immediate predecessor
    /// (mutex, read-write lock writer, leader latch).
    First,
    /// Before the first contender that is no reader; else wait behind that
    /// one (read-write lock reader).
    Reader,
    /// At most `limit` children in the directory; else wait for a change
    /// of its children (the semaphore's lease).
    Leases { limit: u32 },
}

/// What the engine does next for an acquire.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// Nothing until the next answer or event.
    Idle,
    /// Submit these requests, in order.
    Send(Vec<(Tag, ZkRequest)>),
    /// Held: our node, its czxid as fencing token, and (leases) our place
    /// among the leases.
    Acquired {
        path: String,
        czxid: i64,
        slot: Option<u32>,
    },
    /// A try found the lock held (our node, if any, must go).
    NotAcquired,
    /// The acquire failed.
    Fail(Failure),
}

/// Where and how a node is created and judged.
#[derive(Clone, Debug)]
pub(crate) struct NodeSpec {
    pub(crate) dir: String,
    pub(crate) marker: &'static str,
    pub(crate) rule: Rule,
    pub(crate) stage: Stage,
    pub(crate) data: Vec<u8>,
    pub(crate) acl: Vec<Acl>,
    pub(crate) try_only: bool,
}

/// See the module documentation.
/// How many times a create that met a missing parent makes the parents
/// again before it fails. More than once: the server deletes an empty
/// container parent on its own (its container manager), so one may vanish
/// between our making it and our create, as Curator's
/// `creatingParentContainersIfNeeded` also retries (found by `sim_zk`).
const MAX_PARENT_ROUNDS: u32 = 5;

#[derive(Debug)]
pub(crate) struct NodeAcquire {
    spec: NodeSpec,
    prefix: String,
    /// Our node's name and czxid, once known.
    node: Option<(String, i64)>,
    /// Rounds of parent creation so far (see [`MAX_PARENT_ROUNDS`]).
    parent_rounds: u32,
    /// The node (or, for leases, the directory) whose event we wait for.
    waiting_on: Option<String>,
    /// Our node, found by its prefix, while its czxid is read.
    found: Option<String>,
}

impl NodeAcquire {
    /// An acquire of `spec` with protected prefix `prefix` (`_c_<uuid>-`).
    pub(crate) fn new(spec: NodeSpec, prefix: String) -> Self {
        NodeAcquire {
            spec,
            prefix,
            node: None,
            parent_rounds: 0,
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
        self.node
            .as_ref()
            .map(|(n, _)| format!("{}/{n}", self.spec.dir))
    }

    /// The path waited for, if waiting.
    pub(crate) fn waiting_on(&self) -> Option<&str> {
        self.waiting_on.as_deref()
    }

    fn tag(&self, purpose: Purpose) -> Tag {
        (self.spec.stage, purpose)
    }

    fn create(&self) -> (Tag, ZkRequest) {
        let path = format!("{}/{}{}", self.spec.dir, self.prefix, self.spec.marker);
        let req = ZkRequest::Create {
            path,
            data: self.spec.data.clone(),
            acl: self.spec.acl.clone(),
            mode: create_mode::EPHEMERAL_SEQUENTIAL,
        };
        (self.tag(Purpose::Create), req)
    }

    /// The directory's children; for leases with a watch (Curator's
    /// `getChildren().usingWatcher(watcher)`).
    fn list_as(&self, purpose: Purpose) -> (Tag, ZkRequest) {
        let watch = purpose == Purpose::List && matches!(self.spec.rule, Rule::Leases { .. });
        let req = ZkRequest::GetChildren {
            path: self.spec.dir.clone(),
            watch,
        };
        (self.tag(purpose), req)
    }

    fn list(&self) -> (Tag, ZkRequest) {
        self.list_as(Purpose::List)
    }

    /// The answer to a request made for `purpose`.
    pub(crate) fn on_answer(&mut self, purpose: Purpose, result: Result<ZkReply, ZkError>) -> Step {
        match purpose {
            // A parent's failure fails the create behind it, which decides.
            Purpose::Parent => Step::Idle,
            Purpose::Create => self.on_create(result),
            Purpose::List => self.on_list(result),
            Purpose::Watch => self.on_watch_set(result),
            Purpose::Find => self.on_find(result),
            Purpose::FindStat => self.on_find_stat(result),
        }
    }

    fn on_create(&mut self, result: Result<ZkReply, ZkError>) -> Step {
        match result {
            Ok(ZkReply::Created { path, stat }) => {
                self.node = Some((base_name(&path).to_string(), stat.czxid));
                Step::Idle
            }
            Ok(_) => Step::Fail(Failure::Backend("a create2 reply without a Stat".into())),
            Err(ZkError::Server(err::NO_NODE)) if self.parent_rounds < MAX_PARENT_ROUNDS => {
                self.parent_rounds += 1;
                let mut reqs = self.parents();
                reqs.extend([self.create(), self.list()]);
                Step::Send(reqs)
            }
            Err(ZkError::Server(err::NO_NODE)) => Step::Fail(Failure::Backend(format!(
                "cannot create {}: a parent is missing even after creating it {MAX_PARENT_ROUNDS} times (does the chroot exist?)",
                self.spec.dir
            ))),
            // The node may exist: find it by its protected prefix.
            Err(ZkError::Transport(_)) => Step::Send(vec![self.list_as(Purpose::Find)]),
            Err(ZkError::NotSent(_)) if !self.spec.try_only => {
                Step::Send(vec![self.create(), self.list()])
            }
            Err(e) => Step::Fail(Failure::from_error("create", &self.spec.dir, e)),
        }
    }

    /// `createContainer` for the directory and each ancestor.
    fn parents(&self) -> Vec<(Tag, ZkRequest)> {
        super::super::paths::ancestors(&self.spec.dir)
            .into_iter()
            .map(|path| {
                let acl = vec![Acl::open_unsafe()];
                let req = ZkRequest::CreateContainer { path, acl };
                (self.tag(Purpose::Parent), req)
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
            Err(e) => return Step::Fail(Failure::from_error("getChildren", &self.spec.dir, e)),
        };
        let sorted = contender_order(children);
        let Some(index) = sorted.iter().position(|c| *c == ours) else {
            // Our node is gone (Curator: NoNode, the attempt starts over).
            return self.start();
        };
        let path = format!("{}/{ours}", self.spec.dir);
        match judge(self.spec.rule, &sorted, index) {
            Verdict::Holds { slot } => Step::Acquired { path, czxid, slot },
            Verdict::WaitBehind(_) | Verdict::WaitForChildren if self.spec.try_only => {
                Step::NotAcquired
            }
            Verdict::WaitBehind(i) => {
                let pred = format!("{}/{}", self.spec.dir, sorted[i]);
                self.waiting_on = Some(pred.clone());
                let req = ZkRequest::GetData {
                    path: pred,
                    watch: true,
                };
                Step::Send(vec![(self.tag(Purpose::Watch), req)])
            }
            // The list left a children watch on the directory.
            Verdict::WaitForChildren => {
                self.waiting_on = Some(self.spec.dir.clone());
                Step::Idle
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
            Err(e) => Step::Fail(Failure::from_error("getData", &self.spec.dir, e)),
        }
    }

    fn on_find(&mut self, result: Result<ZkReply, ZkError>) -> Step {
        match result {
            Ok(ZkReply::Children { children, .. }) => {
                match children.into_iter().find(|c| c.starts_with(&self.prefix)) {
                    Some(name) => {
                        let path = format!("{}/{name}", self.spec.dir);
                        self.found = Some(name);
                        let req = ZkRequest::Exists { path, watch: false };
                        Step::Send(vec![(self.tag(Purpose::FindStat), req)])
                    }
                    None => self.start(),
                }
            }
            Err(ZkError::Server(err::NO_NODE)) => self.start(),
            Err(ZkError::Transport(_) | ZkError::NotSent(_)) => {
                Step::Send(vec![self.list_as(Purpose::Find)])
            }
            Ok(_) => Step::Fail(Failure::Backend(
                "a getChildren2 reply without children".into(),
            )),
            Err(e) => Step::Fail(Failure::from_error("getChildren", &self.spec.dir, e)),
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
                Step::Send(vec![self.list_as(Purpose::Find)])
            }
            Ok(_) => Step::Fail(Failure::Backend("an exists reply without a Stat".into())),
            Err(e) => Step::Fail(Failure::from_error("exists", &self.spec.dir, e)),
        }
    }

    /// A watch fired on `path`: if it is what we wait for, list again.
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

/// What a rule says of our node at `index` of the `sorted` children.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    Holds {
        slot: Option<u32>,
    },
    /// Wait for an event on `sorted[i]`.
    WaitBehind(usize),
    WaitForChildren,
}

fn judge(rule: Rule, sorted: &[String], index: usize) -> Verdict {
    match rule {
        Rule::First if index == 0 => Verdict::Holds { slot: None },
        Rule::First => Verdict::WaitBehind(index - 1),
        // Curator's reader: the first writer before us blocks us, and is
        // the one watched. Any contender that is no reader counts as a
        // writer here (a mutex or latch node of another edgelock kind).
        Rule::Reader => {
            let first_writer = sorted[..index]
                .iter()
                .position(|c| marker_of(c).is_some_and(|m| m != READ_MARKER));
            match first_writer {
                None => Verdict::Holds { slot: None },
                Some(i) => Verdict::WaitBehind(i),
            }
        }
        // Curator's `children.size() <= maxLeases`: every child counts.
        Rule::Leases { limit } if sorted.len() <= limit as usize => {
            let slot = u32::try_from(index).unwrap_or(u32::MAX).min(limit - 1);
            Verdict::Holds { slot: Some(slot) }
        }
        Rule::Leases { .. } => Verdict::WaitForChildren,
    }
}

#[cfg(test)]
mod tests {
    use super::{judge, Rule, Verdict};

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_reader_holds_before_the_first_writer_and_watches_it() {
        let s = names(&[
            "_c_a-__READ__0000000000",
            "_c_b-__WRIT__0000000001",
            "_c_c-__READ__0000000002",
            "_c_d-__WRIT__0000000003",
        ]);
        assert_eq!(judge(Rule::Reader, &s, 0), Verdict::Holds { slot: None });
        assert_eq!(judge(Rule::Reader, &s, 2), Verdict::WaitBehind(1));
        assert_eq!(judge(Rule::First, &s, 3), Verdict::WaitBehind(2));
        let m = names(&["_c_a-lock-0000000000", "_c_c-__READ__0000000001"]);
        assert_eq!(judge(Rule::Reader, &m, 1), Verdict::WaitBehind(0));
    }

    #[test]
    fn leases_hold_while_the_children_fit_the_limit() {
        let s = names(&["a-lease-0000000000", "b-lease-0000000001"]);
        let two = Rule::Leases { limit: 2 };
        assert_eq!(judge(two, &s, 1), Verdict::Holds { slot: Some(1) });
        let one = Rule::Leases { limit: 1 };
        assert_eq!(judge(one, &s, 1), Verdict::WaitForChildren);
    }
}
