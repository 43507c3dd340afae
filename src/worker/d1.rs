//! The `d1` backend's transport inside the Worker: an adapter over the D1
//! database binding `EDGELOCK_D1` with the `fetch(url, init)` shape the
//! JavaScript driver calls bindings with (the npm package's `d1Binding(db)`
//! in Rust). The core sends `{"statements":[{"sql","params"}]}` to
//! `/d1/batch`; the adapter runs them as one `db.batch(…)` (one
//! transaction) and answers `{"results":[{"rows","changes"}]}`, or 500 with
//! D1's message (bound values cut out of it). Each batch counts as a
//! subrequest.

use std::cell::Cell;
use std::rc::Rc;

use js_sys::{Array, Function, Object, Promise, Reflect, Uint8Array};
use wasm_bindgen::closure::Closure;
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;

use crate::core::LockError;

/// `{ <binding>: adapter }` over the D1 database `env[<binding>]` (`env`:
/// the Worker's, as the client found it).
pub fn bindings(
    env: Option<JsValue>,
    binding: &str,
    count: &Rc<Cell<u32>>,
) -> Result<JsValue, LockError> {
    let db = env
        .and_then(|env| Reflect::get(&env, &JsValue::from_str(binding)).ok())
        .filter(|db| db.is_object());
    let Some(db) = db else {
        return Err(LockError::invalid(format!(
            "the d1 backend needs the D1 database binding {binding} (see wrangler.toml)"
        )));
    };
    let bindings = Object::new();
    Reflect::set(
        &bindings,
        &JsValue::from_str(binding),
        &adapter(db, count.clone()),
    )
    .map_err(|_| LockError::internal("could not build the bindings object"))?;
    Ok(bindings.into())
}

fn adapter(db: JsValue, count: Rc<Cell<u32>>) -> JsValue {
    let fetch = Closure::<dyn FnMut(JsValue, JsValue) -> JsValue>::new(
        move |_url: JsValue, init: JsValue| -> JsValue {
            count.set(count.get().saturating_add(1));
            let db = db.clone();
            wasm_bindgen_futures::future_to_promise(async move {
                let (status, body) = match batch(&db, &init).await {
                    Ok(body) => (200, body),
                    Err(message) => (500, json_error(&message)),
                };
                response(status, &body)
            })
            .into()
        },
    );
    let obj = Object::new();
    let _ = Reflect::set(&obj, &JsValue::from_str("fetch"), &fetch.into_js_value());
    obj.into()
}

fn json_error(message: &str) -> String {
    serde_json::json!({ "error": message }).to_string()
}

fn response(status: u16, body: &str) -> Result<JsValue, JsValue> {
    let ctor: Function =
        Reflect::get(&js_sys::global(), &JsValue::from_str("Response"))?.dyn_into()?;
    let init = Object::new();
    Reflect::set(&init, &"status".into(), &JsValue::from(status))?;
    let headers = Object::new();
    Reflect::set(&headers, &"content-type".into(), &"application/json".into())?;
    Reflect::set(&init, &"headers".into(), &headers)?;
    Reflect::construct(&ctor, &Array::of2(&JsValue::from_str(body), &init))
}

fn call(target: &JsValue, method: &str, args: &Array) -> Result<JsValue, JsValue> {
    let f: Function = Reflect::get(target, &JsValue::from_str(method))?.dyn_into()?;
    Reflect::apply(&f, target, args)
}

fn text_of(e: &JsValue) -> String {
    Reflect::get(e, &"message".into())
        .ok()
        .and_then(|m| m.as_string())
        .or_else(|| e.as_string())
        .unwrap_or_else(|| "D1 failed".into())
}

/// Runs the batch of the request body; the answer's JSON, or a message
/// without the bound values.
async fn batch(db: &JsValue, init: &JsValue) -> Result<String, String> {
    let body = Reflect::get(init, &"body".into()).map_err(|_| "no request body".to_string())?;
    let bytes = match body.as_string() {
        Some(s) => s.into_bytes(),
        None => body
            .dyn_ref::<Uint8Array>()
            .map(Uint8Array::to_vec)
            .ok_or_else(|| "the request body is not bytes".to_string())?,
    };
    let v: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|_| "the request body is not JSON".to_string())?;
    let list = v
        .get("statements")
        .and_then(|s| s.as_array())
        .filter(|l| !l.is_empty() && l.len() <= 16)
        .ok_or_else(|| "`statements` must be an array of 1..=16 statements".to_string())?;
    let mut secrets: Vec<String> = Vec::new();
    let prepared = Array::new();
    for s in list {
        let sql = s
            .get("sql")
            .and_then(|q| q.as_str())
            .ok_or_else(|| "a statement without `sql`".to_string())?;
        let params = Array::new();
        for p in s
            .get("params")
            .and_then(|p| p.as_array())
            .into_iter()
            .flatten()
        {
            match p {
                serde_json::Value::String(t) => {
                    secrets.push(t.clone());
                    params.push(&JsValue::from_str(t));
                }
                serde_json::Value::Number(n) => {
                    params.push(&JsValue::from_f64(n.as_f64().unwrap_or(0.0)));
                }
                serde_json::Value::Null => {
                    params.push(&JsValue::NULL);
                }
                _ => return Err("a parameter is not a string, number or null".into()),
            }
        }
        let hide = |e: JsValue| redact(&text_of(&e), &secrets);
        let stmt = call(db, "prepare", &Array::of1(&JsValue::from_str(sql))).map_err(hide)?;
        let stmt = call(&stmt, "bind", &params).map_err(hide)?;
        prepared.push(&stmt);
    }
    let hide = |e: JsValue| redact(&text_of(&e), &secrets);
    let promise = call(db, "batch", &Array::of1(&prepared)).map_err(hide)?;
    let results = JsFuture::from(Promise::resolve(&promise))
        .await
        .map_err(hide)?;
    let out = Array::new();
    for r in Array::from(&results).iter() {
        let rows = Reflect::get(&r, &"results".into()).unwrap_or(JsValue::UNDEFINED);
        let rows = if Array::is_array(&rows) {
            rows
        } else {
            Array::new().into()
        };
        let meta = Reflect::get(&r, &"meta".into()).unwrap_or(JsValue::UNDEFINED);
        let changes = if meta.is_object() {
            Reflect::get(&meta, &"changes".into()).unwrap_or(JsValue::from(0))
        } else {
            JsValue::from(0)
        };
        let item = Object::new();
        let _ = Reflect::set(&item, &"rows".into(), &rows);
        let _ = Reflect::set(&item, &"changes".into(), &changes);
        out.push(&item);
    }
    let answer = Object::new();
    let _ = Reflect::set(&answer, &"results".into(), &out);
    js_sys::JSON::stringify(&answer)
        .ok()
        .and_then(|s| s.as_string())
        .ok_or_else(|| "the results could not be encoded".to_string())
}

/// `message` with every bound text value cut out.
fn redact(message: &str, secrets: &[String]) -> String {
    let mut m = message.to_string();
    for s in secrets {
        if !s.is_empty() {
            m = m.replace(s.as_str(), "…");
        }
    }
    m.chars().take(500).collect()
}
