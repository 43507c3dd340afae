//! What each client did and saw, as a list of operations with wall-clock
//! start and end times (milliseconds since the Unix epoch, so that histories
//! recorded in worker processes line up with the orchestrator's fault times).

use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// Wall-clock milliseconds (fractional) since the Unix epoch. The clients'
/// clocks are never faked: only Redis servers run under libfaketime.
pub fn now_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64() * 1000.0)
        .unwrap_or(0.0)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OpKind {
    Acquire,
    Write,
    Extend,
    Release,
    /// The client was told its lock is lost (start = end = when it learned).
    Lost,
    /// A leader changed the value its leadership announces (`Lock::proclaim`).
    Proclaim,
}

/// `Ok`: the operation took effect. `Fail`: it did not (with the error code
/// or reason). `Unknown`: it may or may not have (timeouts, cut responses).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", content = "detail", rename_all = "lowercase")]
pub enum Outcome {
    Ok,
    Fail(String),
    Unknown(String),
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Op {
    pub client: String,
    pub lock: String,
    pub kind: OpKind,
    pub start: f64,
    pub end: f64,
    #[serde(flatten)]
    pub outcome: Outcome,
    /// The fencing token of the hold this operation belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<u64>,
    /// For writes: the id the resource logs, to match acknowledgements.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_id: Option<String>,
}

impl Op {
    pub fn is_ok(&self) -> bool {
        self.outcome == Outcome::Ok
    }
}

/// A shared, append-only history (clone it into every client thread).
#[derive(Clone, Default)]
pub struct History {
    ops: Arc<Mutex<Vec<Op>>>,
    /// Also print every op as a JSON line on stdout (worker processes).
    echo: bool,
}

impl History {
    pub fn new() -> History {
        History::default()
    }

    /// A history that also prints each op as one JSON line on stdout, for
    /// the orchestrator reading a worker process.
    pub fn echoing() -> History {
        History {
            ops: Arc::default(),
            echo: true,
        }
    }

    pub fn record(&self, op: Op) {
        if self.echo {
            if let Ok(line) = serde_json::to_string(&op) {
                use std::io::Write;
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "{line}");
                let _ = out.flush();
            }
        }
        self.ops.lock().unwrap_or_else(|p| p.into_inner()).push(op);
    }

    /// A copy of every operation so far, in recording order.
    pub fn ops(&self) -> Vec<Op> {
        self.ops.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn len(&self) -> usize {
        self.ops.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
