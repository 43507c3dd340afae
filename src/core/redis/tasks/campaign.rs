//! A campaign's part of an acquire (see
//! [`election`](super::super::election)): an exclusive lock whose leader
//! record is written before the grant. On one node a campaign is always
//! fair: candidates lead in the order they started waiting.

use super::super::context::Context;
use super::super::value::RedisCommand;
use super::exclusive::lock_attempt;
use super::part::{AttemptArgs, Part};
use crate::core::LockKind;

/// A candidate and the value it would lead with.
pub(super) struct Campaign {
    pub(super) value: String,
}

impl Part for Campaign {
    fn kind(&self) -> LockKind {
        LockKind::Leader
    }

    fn attempt(&mut self, cx: &mut Context, a: &AttemptArgs<'_>) -> (RedisCommand, bool) {
        lock_attempt(cx, a, true)
    }

    fn sets_writer_intent(&self) -> bool {
        true
    }

    fn record(&self) -> Option<&str> {
        Some(&self.value)
    }
}
