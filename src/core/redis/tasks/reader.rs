//! A reader's part of an acquire (a shared hold of a read-write lock, one
//! node, see [`rwlock`](super::super::rwlock)): the shared acquire script
//! (a lock's reply), never the queue, which orders writers; the grant
//! holds the readers' set and its release wakes the lock's waiters.

use super::super::context::Context;
use super::super::keys::readers_key;
use super::super::scripts;
use super::super::value::RedisCommand;
use super::part::{AttemptArgs, Part};
use crate::core::LockKind;

/// A reader.
pub(super) struct Reader;

impl Part for Reader {
    fn kind(&self) -> LockKind {
        LockKind::Shared
    }

    fn attempt(&mut self, _cx: &mut Context, a: &AttemptArgs<'_>) -> (RedisCommand, bool) {
        // A reader never queues: the queue orders writers.
        let cmd = scripts::acquire_shared(a.key, a.fence_key, a.token, a.ttl);
        (cmd, false)
    }

    fn held_key(&self, key: &str) -> String {
        readers_key(key)
    }

    fn cleanup(&self, key: &str, fence_key: &str, token: &str) -> RedisCommand {
        scripts::release_shared(key, fence_key, token, 0)
    }
}
