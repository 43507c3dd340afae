//! Redlock with a frozen minority of nodes (issue 26): ⌈N/2⌉−1 of N real
//! Redis nodes stopped with SIGSTOP (their connections stay open and
//! nothing answers, the hardest kind of dead node). A majority is still up,
//! so a waiting acquire on a free lock must be granted within 2 × the
//! per-node request timeout + one retry delay, and contended clients must
//! keep being granted.
//!
//! Why this holds by construction, not by the machine's speed: an attempt
//! round is settled a grace (a tenth of the request timeout) after a quorum
//! granted (the rest are cancelled and count as timed out), so only the
//! raise round waits for the frozen nodes' whole timeout: about 1.1 s
//! against a bound of 2.3 s.
#![cfg(feature = "native")]

use std::time::{Duration, Instant};

use edgelock::core::redis::{RedlockConfig, RedlockMachine};
use edgelock::native::{Client, OsEntropy};

mod common;
use common::redis_node::Node;

const TOKEN: &str = "test-token-0123456789";
const TIMEOUT_MS: u64 = 1_000;
const RETRY_DELAY_MS: u64 = 200;
const RETRY_JITTER_MS: u64 = 100;

/// Five nodes, the first and fourth frozen (one behind webdis, one behind
/// the Upstash gateway) until the guard drops.
struct FrozenMinority {
    nodes: Vec<Node>,
    frozen: [usize; 2],
}

impl FrozenMinority {
    fn start() -> FrozenMinority {
        let nodes: Vec<Node> = (0..5).map(|_| Node::start(TOKEN)).collect();
        let frozen = [0, 3];
        for i in frozen {
            nodes[i].redis.pause().expect("SIGSTOP redis-server");
        }
        FrozenMinority { nodes, frozen }
    }

    fn client(&self) -> Client {
        let nodes = self
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| {
                if i % 2 == 0 {
                    n.via_webdis()
                } else {
                    n.via_upstash()
                }
            })
            .collect();
        let mut cfg = RedlockConfig::new(nodes);
        cfg.ttl_ms = 10_000;
        cfg.request_timeout_ms = TIMEOUT_MS;
        cfg.retry_delay_ms = RETRY_DELAY_MS;
        cfg.retry_jitter_ms = RETRY_JITTER_MS;
        Client::from_machine(Box::new(
            RedlockMachine::new(cfg, Box::new(OsEntropy)).expect("config"),
        ))
    }
}

impl Drop for FrozenMinority {
    fn drop(&mut self) {
        // A stopped process cannot exit: thaw it before the servers stop.
        for i in self.frozen {
            let _ = self.nodes[i].redis.resume();
        }
    }
}

#[test]
fn a_waiting_acquire_on_a_free_lock_is_granted_within_two_timeouts_and_a_retry_delay() {
    let nodes = FrozenMinority::start();
    let client = nodes.client();
    let bound = Duration::from_millis(2 * TIMEOUT_MS + RETRY_DELAY_MS + RETRY_JITTER_MS);
    let mut took = Vec::new();
    for i in 0..3 {
        let t = Instant::now();
        let lock = client
            .acquire(&format!("frozen-{i}"), Some(Duration::from_secs(30)))
            .expect("granted by the 3 live nodes");
        took.push(t.elapsed());
        assert!(lock.fencing_token() > 0);
        lock.release().expect("release");
    }
    eprintln!("acquire with 2 of 5 nodes frozen: {took:?} (bound {bound:?})");
    for t in &took {
        assert!(
            *t <= bound,
            "granted after {t:?}, bound {bound:?}: {took:?}"
        );
    }
    client.close().expect("close");
}

#[test]
fn contending_clients_keep_being_granted_with_a_frozen_minority() {
    let nodes = FrozenMinority::start();
    let clients = (0..4).map(|_| nodes.client()).collect();
    // 4 clients × 3 rounds; each acquire may wait up to 60 s (a safety
    // bound: a handoff takes about one request timeout here).
    common::assert_mutual_exclusion(clients, "frozen-contended", 3, Duration::from_secs(60));
}
