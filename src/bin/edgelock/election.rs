//! `edgelock elect` (run a command only while leading an election) and
//! `edgelock leader` (print the current leader, or every change with --watch).

use edgelock::core::{AcquireOptions, Leadership};
use edgelock::native::{CancelToken, Client};

use crate::args::Options;
use crate::connect::connect;
use crate::run::{run_holding, wait_of};
use crate::{Exit, EX_BUSY};

pub(super) fn cmd_elect(o: &Options) -> Result<i32, Exit> {
    let client = connect(o)?;
    let result = lead_and_run(&client, o);
    let _ = client.close(); // revokes the session lease; errors leave it to expire
    result
}

fn lead_and_run(client: &Client, o: &Options) -> Result<i32, Exit> {
    let value = o.value.clone().unwrap_or_else(default_value);
    let opts = AcquireOptions {
        wait: wait_of(o),
        ttl_ms: None,
    };
    let leadership = match client.campaign(&o.name, &value, opts, None) {
        Ok(Some(l)) => l,
        Ok(None) => {
            return Err(Exit {
                code: EX_BUSY,
                message: format!("someone else leads {:?}", o.name),
            })
        }
        Err(e) => return Err(Exit::lock(&e)),
    };
    // The token stays last on the line: scripts read it after `token=`.
    eprintln!(
        "edgelock: elected {} token={}",
        o.name,
        leadership.fencing_token()
    );
    run_holding(leadership, o, &[("EDGELOCK_LEADER_VALUE", value)])
}

/// `HOST:PID`: tells the operator which process leads.
fn default_value() -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".into());
    format!("{host}:{}", std::process::id())
}

pub(super) fn cmd_leader(o: &Options) -> Result<i32, Exit> {
    let client = connect(o)?;
    let result = if o.watch {
        watch(&client, o)
    } else {
        client
            .leader(&o.name)
            .map(|l| print_leader(l.as_ref(), o.json))
            .map_err(|e| Exit::lock(&e))
    };
    let _ = client.close();
    result.map(|()| 0)
}

/// Prints every change until the process is stopped (or the backend fails).
fn watch(client: &Client, o: &Options) -> Result<(), Exit> {
    for change in client.observe(&o.name, CancelToken::new()) {
        let leader = change.map_err(|e| Exit::lock(&e))?;
        print_leader(leader.as_ref(), o.json);
        // Each change is seen at once by whoever reads our output.
        use std::io::Write;
        let _ = std::io::stdout().flush();
    }
    Ok(())
}

fn print_leader(l: Option<&Leadership>, json: bool) {
    match (l, json) {
        (Some(l), true) => println!(
            "{}",
            // Decimal string, like LockHandle's, so JSON consumers never lose precision.
            serde_json::json!({ "value": l.value, "fencingToken": l.fencing_token.to_string() })
        ),
        (None, true) => println!("null"),
        (Some(l), false) => println!("leader: {}\nfencing_token: {}", l.value, l.fencing_token),
        (None, false) => println!("no leader"),
    }
}
