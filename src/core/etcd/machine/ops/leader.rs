//! Leader: one range read of the name's oldest key tells who leads (see
//! `election.rs`; an observe that may not wait is this query too).

use super::super::election::{leader_read_body, read_leadership};
use super::super::EtcdMachine;
use super::{Next, Reply};
use crate::core::{OpId, Outcome};

pub(in super::super) struct LeaderOp {
    name: String,
}

impl LeaderOp {
    /// The name queried.
    pub(in super::super) fn name(&self) -> &str {
        &self.name
    }

    /// The read of `name`'s oldest key.
    pub(in super::super) fn start(m: &EtcdMachine, name: &str) -> Next {
        let body = leader_read_body(m, name);
        let name = name.to_string();
        Next::send(LeaderOp { name }, "/v3/kv/range", body)
    }

    pub(in super::super) fn step(self, m: &mut EtcdMachine, op: OpId, reply: Reply) -> Next {
        let state = read_leadership(m, &self.name, reply.result).map(|(_, state)| state);
        m.rt.out.complete(op, state.map(Outcome::Leader));
        Next::Done
    }
}
