//! One module per scenario of the reliability suite. Each `run` returns one
//! report per variant it measured.

use crate::report::ScenarioReport;

/// Sizes of a run: the short version (inside the test command, a few
/// minutes) or the long one (on demand, writes RELIABILITY.md).
#[derive(Clone, Copy, Debug)]
pub struct Mode {
    pub short: bool,
}

impl Mode {
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
    pub run: fn(&Mode) -> Vec<ScenarioReport>,
}

/// Every scenario, in report order.
pub fn all() -> Vec<Scenario> {
    vec![]
}
