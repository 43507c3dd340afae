//! The client side of the fenced resource (devtools' `FencedResource`):
//! every write carries the writer's fencing token, its client id and a
//! unique write id, so that the checker can match acknowledgements.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use edgelock_devtools::http_request;
use serde_json::json;

use crate::history::Outcome;

static NEXT_WRITE: AtomicU64 = AtomicU64::new(1);

#[derive(Clone, Debug)]
pub struct ResourceClient {
    url: String,
    timeout: Duration,
}

impl ResourceClient {
    pub fn new(url: &str) -> ResourceClient {
        ResourceClient {
            url: url.trim_end_matches('/').to_string(),
            timeout: Duration::from_secs(5),
        }
    }

    /// A write id unique across processes (pid + counter).
    pub fn next_write_id(client: &str) -> String {
        format!(
            "{client}.{}.{}",
            std::process::id(),
            NEXT_WRITE.fetch_add(1, Ordering::Relaxed)
        )
    }

    /// Appends a record under `token`. `Ok` = accepted, `Fail("STALE")` =
    /// rejected by the fence, `Unknown` = no answer (it may have been applied).
    pub fn write(&self, resource: &str, client: &str, token: u64, write_id: &str) -> Outcome {
        let body =
            json!({"resource": resource, "token": token, "client": client, "write_id": write_id})
                .to_string();
        match http_request(
            "POST",
            &format!("{}/append", self.url),
            &[("content-type", "application/json")],
            body.as_bytes(),
            self.timeout,
        ) {
            Ok(r) if r.status == 200 => Outcome::Ok,
            Ok(r) if r.status == 409 => Outcome::Fail("STALE".into()),
            Ok(r) => Outcome::Fail(format!("HTTP_{}", r.status)),
            Err(e) => Outcome::Unknown(format!("resource: {e}")),
        }
    }
}
