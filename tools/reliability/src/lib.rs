//! edgelock's reliability suite (issue 8): real etcd and Redis clusters on
//! loopback, faults injected with SIGSTOP/SIGCONT, an in-repo fault proxy
//! and libfaketime, and a checker that judges the clients' histories
//! against a fenced resource. `reliability` (the binary) runs the scenarios
//! and writes RELIABILITY.md.

pub mod backend;
pub mod checker;
pub mod history;
pub mod infra;
pub mod report;
pub mod resource;
pub mod scenarios;
pub mod worker;
pub mod workload;
