//! The demo job: work for a while, then append `{token, started, finished}`
//! to the fenced resource, which refuses tokens lower than the highest it has
//! seen. It stands for any job whose side effects must not interleave: the
//! resource's log shows whether two runs ever overlapped.

use std::time::Duration;

use serde_json::{json, Value};
use wasm_bindgen::JsValue;
use worker::{Delay, Fetch, Headers, Method, Request, RequestInit};

/// What one run did.
pub struct JobRun {
    pub started: f64,
    pub finished: f64,
    /// The resource's verdict (`None` when no resource is configured).
    pub accepted: Option<bool>,
    /// Subrequests the job made.
    pub subrequests: u32,
}

#[derive(Debug)]
pub struct JobError {
    pub message: String,
    pub subrequests: u32,
}

/// Subrequests one run makes (the append), reserved out of the invocation's budget.
pub const JOB_SUBREQUESTS: u32 = 1;

/// Runs the job `name` holding fencing token `token`.
pub async fn run(
    fenced_url: Option<&str>,
    name: &str,
    token: u64,
    work_ms: u64,
    invocation: &str,
) -> Result<JobRun, JobError> {
    let started = js_sys::Date::now();
    if work_ms > 0 {
        // The Worker's own timer; the clock moves on across it.
        Delay::from(Duration::from_millis(work_ms)).await;
    }
    let finished = js_sys::Date::now();
    let Some(url) = fenced_url else {
        return Ok(JobRun {
            started,
            finished,
            accepted: None,
            subrequests: 0,
        });
    };
    let record = json!({
        "resource": name,
        "token": token.to_string(),
        "started": started,
        "finished": finished,
        "invocation": invocation,
    });
    let accepted = append(url, &record).await.map_err(|message| JobError {
        message,
        subrequests: 1,
    })?;
    Ok(JobRun {
        started,
        finished,
        accepted: Some(accepted),
        subrequests: 1,
    })
}

/// `POST <url>/append`; true when the resource accepted the token.
async fn append(url: &str, record: &Value) -> Result<bool, String> {
    let headers = Headers::new();
    headers
        .set("content-type", "application/json")
        .map_err(|e| e.to_string())?;
    let mut init = RequestInit::new();
    init.with_method(Method::Post)
        .with_headers(headers)
        .with_body(Some(JsValue::from_str(&record.to_string())));
    let request =
        Request::new_with_init(&format!("{url}/append"), &init).map_err(|e| e.to_string())?;
    let mut response = Fetch::Request(request)
        .send()
        .await
        .map_err(|e| format!("the fenced resource is unreachable: {e}"))?;
    let status = response.status_code();
    // Read the body so that the connection is finished with inside this invocation.
    let body: Value = response.json().await.unwrap_or(Value::Null);
    match status {
        200 => Ok(true),
        409 if body.get("accepted") == Some(&Value::Bool(false)) => Ok(false),
        s => Err(format!("the fenced resource answered HTTP {s}")),
    }
}
