//! How many streaming requests (etcd watches, Redis wake-up subscriptions)
//! this module instance keeps open to one origin at once, over all its
//! clients.
//!
//! Browsers open at most 6 HTTP/1.1 connections per origin (Chromium,
//! Firefox and Safari alike; per browser profile), and a stream holds one for
//! as long as it lasts. Six waiters on one page would take all six, and every
//! other request to that origin — attempts, releases, renewals — would queue
//! behind them until it timed out. So the browser entry sets a limit below 6
//! (`RawLocks.limitStreamsPerOrigin`); a stream beyond it fails at once with
//! a transport error, which every machine already handles as a lost stream:
//! a Redis waiter falls back to its retry timer (and subscribes again after
//! its back-off), an etcd waiter re-checks its predecessor after a short
//! pause. Node (no such limit) and workerd (its limit is per invocation, so
//! per client: `maxSubscriptions`) set none.

use crate::core::runtime::VecMap;
use std::cell::{Cell, RefCell};

use crate::core::Target;

thread_local! {
    static LIMIT: Cell<Option<usize>> = const { Cell::new(None) };
    static OPEN: RefCell<VecMap<String, usize>> = RefCell::new(VecMap::new());
}

/// Sets (or, with `None`, lifts) the per-origin limit for streams opened from now on.
pub(crate) fn set_limit(limit: Option<usize>) {
    LIMIT.with(|l| l.set(limit));
}

/// One open stream counted against its origin; released when dropped.
pub(crate) struct StreamSlot {
    origin: Option<String>,
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let Some(origin) = self.origin.take() else {
            return;
        };
        OPEN.with(|open| {
            let mut open = open.borrow_mut();
            if let Some(n) = open.get_mut(&origin) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    open.remove(&origin);
                }
            }
        });
    }
}

/// A slot for a stream to `target`, or `Err(limit)` when its origin already
/// has `limit` streams open. Bindings (not HTTP origins of this runtime's
/// connection pool) and runtimes without a limit always get one.
pub(crate) fn open(target: &Target) -> Result<StreamSlot, usize> {
    let (Some(limit), Target::Url(url)) = (LIMIT.with(Cell::get), target) else {
        return Ok(StreamSlot { origin: None });
    };
    let origin = origin_of(url);
    OPEN.with(|open| {
        let mut open = open.borrow_mut();
        let n = open.get_or_insert_with(origin.clone(), || 0);
        if *n >= limit {
            return Err(limit);
        }
        *n += 1;
        Ok(StreamSlot {
            origin: Some(origin),
        })
    })
}

/// `scheme://authority` of `url`, lower-cased (the key browsers pool connections by).
fn origin_of(url: &str) -> String {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    let end = url[after_scheme..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |i| after_scheme + i);
    url[..end].to_ascii_lowercase()
}
