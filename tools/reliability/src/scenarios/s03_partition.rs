//! Not written yet.

use super::Mode;
use crate::report::ScenarioReport;

pub fn run(_mode: &Mode) -> Vec<ScenarioReport> {
    Vec::new()
}
