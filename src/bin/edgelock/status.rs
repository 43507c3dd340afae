//! `edgelock status`: who holds NAME and who waits for it, as text or JSON.

use edgelock::core::{Holder, LockStatus};

use crate::args::Options;
use crate::connect::connect;
use crate::{limit_of, mode_name, Exit};

pub(crate) fn cmd_status(o: &Options) -> Result<i32, Exit> {
    let client = connect(o)?;
    let status = client.inspect(&o.name).map_err(|e| Exit::lock(&e));
    let _ = client.close();
    let status = status?;
    if o.json {
        println!("{}", status_json(&status));
    } else {
        print!("{}", status_text(&status));
    }
    Ok(0)
}

fn status_text(s: &LockStatus) -> String {
    let mut out = format!("name: {}\nheld: {}\n", s.name, s.held);
    if let Some(h) = &s.holder {
        out.push_str(&format!("holder: {h}\n"));
    }
    if let Some(t) = s.fencing_token {
        out.push_str(&format!("fencing_token: {t}\n"));
    }
    if let Some(r) = s.remaining_ms {
        out.push_str(&format!("remaining_ms: {r}\n"));
    }
    for w in &s.waiters {
        out.push_str(&format!("waiter: {w}\n"));
    }
    if let Some(l) = s.limit {
        out.push_str(&format!("limit: {l}\n"));
    }
    for h in &s.holders {
        out.push_str(&format!("hold: {}\n", holder_text(h, true)));
    }
    for q in &s.queued {
        out.push_str(&format!("queued: {}\n", holder_text(q, false)));
    }
    out
}

/// `mode=M [limit=N] [slot=S] [token=T] [id=ID]` (holders show their slot,
/// waiters the limit they wait for).
fn holder_text(h: &Holder, holding: bool) -> String {
    let mut out = format!("mode={}", mode_name(h.kind));
    match (holding, h.slot, limit_of(h.kind)) {
        (true, Some(slot), _) => out.push_str(&format!(" slot={slot}")),
        (false, _, Some(limit)) => out.push_str(&format!(" limit={limit}")),
        _ => {}
    }
    if let Some(t) = h.fencing_token {
        out.push_str(&format!(" token={t}"));
    }
    if !h.id.is_empty() {
        out.push_str(&format!(" id={}", h.id));
    }
    out
}

fn holder_json(h: &Holder) -> serde_json::Value {
    serde_json::json!({
        "id": h.id,
        "mode": mode_name(h.kind),
        "limit": limit_of(h.kind),
        "slot": h.slot,
        "fencingToken": h.fencing_token.map(|t| t.to_string()),
    })
}

fn status_json(s: &LockStatus) -> String {
    serde_json::json!({
        "name": s.name,
        "held": s.held,
        "holder": s.holder,
        // Decimal string, like LockHandle's, so JSON consumers never lose precision.
        "fencingToken": s.fencing_token.map(|t| t.to_string()),
        "remainingMs": s.remaining_ms,
        "waiters": s.waiters,
        "limit": s.limit,
        "holders": s.holders.iter().map(holder_json).collect::<Vec<_>>(),
        "queued": s.queued.iter().map(holder_json).collect::<Vec<_>>(),
    })
    .to_string()
}
