//! How an acquire attempt's round turned out, whatever its script: the
//! lock's, the reader's and the permit's answers are all read into one
//! [`Tally`], from which `acquire.rs` decides (a leaf: both the acquire and
//! a kind's part of it use it, neither through the other).

use super::super::round::NodeError;

/// How an attempt's round turned out, whatever its script.
pub(super) struct Tally {
    /// Nodes that granted the attempt.
    pub(super) granted: usize,
    /// Per refusing node: the holders' remaining ms (`None`: no expiry).
    pub(super) held_pttls: Vec<Option<u64>>,
    /// The largest counter any node answered with.
    pub(super) fence: u64,
    /// Per node: our key may exist there (granted, or the answer is unknown).
    pub(super) maybe_ours: Vec<bool>,
    /// Each node's counter as it answered (None: no answer).
    pub(super) counters: Vec<Option<u64>>,
    /// The first node error, for the report of an unavailable attempt.
    pub(super) first_error: Option<NodeError>,
}

impl Tally {
    pub(super) fn new(n: usize) -> Tally {
        Tally {
            granted: 0,
            held_pttls: Vec::new(),
            fence: 0,
            maybe_ours: vec![false; n],
            counters: vec![None; n],
            first_error: None,
        }
    }

    pub(super) fn answered(&mut self, node: usize, fence: u64) {
        self.fence = self.fence.max(fence);
        if let Some(c) = self.counters.get_mut(node) {
            *c = Some(fence);
        }
    }

    pub(super) fn failed(&mut self, node: usize, e: &NodeError) {
        if let Some(m) = self.maybe_ours.get_mut(node) {
            *m = e.maybe_applied();
        }
        self.first_error.get_or_insert_with(|| e.clone());
    }
}
