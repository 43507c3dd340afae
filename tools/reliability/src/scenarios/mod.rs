//! One module per scenario of the reliability suite. Each `run` returns one
//! report per variant it measured.

use crate::report::ScenarioReport;

pub mod s01_paused_holder;
pub mod s02_etcd_leader;
pub mod s03_partition;
pub mod s04_cut_response;
pub mod s05_redlock_restart;
pub mod s06_redlock_clock;
pub mod s07_slow_nodes;
pub mod s08_late_release;
pub mod s09_hostile;
pub mod s10_load;
pub mod s11_frozen_minority;
pub mod s12_zk_ensemble;

/// The variants `--variants 1h,3k` chose (none given: every variant).
static VARIANTS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();

/// Restricts the run to these variant ids (`reliability --variants`; set once,
/// before any scenario runs).
pub fn choose_variants(ids: Vec<String>) {
    let _ = VARIANTS.set(ids);
}

/// Whether variant `id` (e.g. "10k") runs: every variant unless
/// `--variants` named others. Scenarios that honour it check it before
/// setting a variant up (1, 3, 4, 5, 8, 9, 10, 11 and 12).
pub fn wants(id: &str) -> bool {
    VARIANTS
        .get()
        .map_or(true, |ids| ids.iter().any(|i| i == id))
}

/// Whether `--variants` restricted the run.
pub fn variants_chosen() -> bool {
    VARIANTS.get().is_some()
}

/// Sizes of a run: the short version (inside the test command, a few
/// minutes) or the long one (on demand, writes RELIABILITY.md).
#[derive(Clone, Copy, Debug)]
pub struct Mode {
    pub short: bool,
    /// Only the etcd variants (`--etcd-only`: the test suite's run against
    /// another etcd version).
    pub etcd_only: bool,
}

impl Mode {
    /// Whether the Redis and Redlock variants run.
    pub fn redis(&self) -> bool {
        !self.etcd_only
    }

    /// `short` in the short run, `long` otherwise.
    pub fn pick<T>(&self, short: T, long: T) -> T {
        if self.short {
            short
        } else {
            long
        }
    }
}

pub struct Scenario {
    pub id: &'static str,
    pub title: &'static str,
    /// Part of the short run.
    pub in_short: bool,
    /// Has an etcd variant (runs with `--etcd-only`).
    pub etcd: bool,
    pub run: fn(&Mode) -> Vec<ScenarioReport>,
}

/// Every scenario, in report order.
pub fn all() -> Vec<Scenario> {
    vec![
        Scenario {
            id: "1",
            title: "holder paused past its TTL",
            in_short: true,
            etcd: true,
            run: s01_paused_holder::run,
        },
        Scenario {
            id: "2",
            title: "etcd leader paused, then killed",
            in_short: false,
            etcd: true,
            run: s02_etcd_leader::run,
        },
        Scenario {
            id: "3",
            title: "client-backend partition",
            // Only 3m–3o (a partitioned holder of a lock set) in the short run.
            in_short: true,
            etcd: true,
            run: s03_partition::run,
        },
        Scenario {
            id: "4",
            title: "response lost after apply",
            in_short: true,
            etcd: true,
            run: s04_cut_response::run,
        },
        Scenario {
            id: "5",
            title: "Redlock node restart without persistence",
            // Only 5c (over TCP, restarted at once) in the short run.
            in_short: true,
            etcd: false,
            run: s05_redlock_restart::run,
        },
        Scenario {
            id: "6",
            title: "Redlock node clock jump and drift",
            in_short: false,
            etcd: false,
            run: s06_redlock_clock::run,
        },
        Scenario {
            id: "7",
            title: "TTL/2 delay on 2 of 5 Redlock nodes",
            in_short: false,
            etcd: false,
            run: s07_slow_nodes::run,
        },
        Scenario {
            id: "8",
            title: "late release after expiry",
            in_short: true,
            etcd: true,
            run: s08_late_release::run,
        },
        Scenario {
            id: "9",
            title: "hostile input",
            in_short: true,
            etcd: false,
            run: s09_hostile::run,
        },
        Scenario {
            id: "10",
            title: "load: 64 clients per backend",
            in_short: true,
            etcd: true,
            run: s10_load::run,
        },
        Scenario {
            id: "11",
            title: "Redlock with 2 of 5 nodes frozen (SIGSTOP)",
            // Only 11b (over TCP) in the short run.
            in_short: true,
            etcd: false,
            run: s11_frozen_minority::run,
        },
        Scenario {
            id: "12",
            title: "ZooKeeper ensemble: the leader killed, a holder's server killed",
            // Three JVMs: the long run only.
            in_short: false,
            etcd: false,
            run: s12_zk_ensemble::run,
        },
    ]
}
