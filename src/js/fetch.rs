//! Performs one [`HttpRequest`] with a `fetch` function and turns the outcome
//! into [`Input`]s. Only standard `fetch` members are used (`status`, `body`
//! with `getReader()`, `arrayBuffer()`), looked up structurally so that an
//! injected `fetch` returning any Fetch-compatible `Response` works.

use js_sys::{Function, Object, Promise, Reflect, Uint8Array};
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use web_sys::AbortSignal;

use crate::core::{HttpRequest, Input, Method, RequestId, Target, TransportError};

/// Longest error text taken from the runtime (messages may echo URLs; the core
/// sanitises them again before they reach a user).
const MAX_ERROR_CHARS: usize = 200;

/// Runs `req` and hands each resulting input to `deliver`, which returns false
/// once the request is no longer wanted (cancelled): reading stops there.
pub(crate) async fn perform(
    fetch: &Function,
    bindings: Option<&JsValue>,
    req: &HttpRequest,
    signal: &AbortSignal,
    mut deliver: impl FnMut(Input) -> bool,
) {
    let id = req.id;
    let response = match send(fetch, bindings, req, signal).await {
        Ok(r) => r,
        Err(error) => {
            deliver(Input::Failed { id, error });
            return;
        }
    };
    let status = match Reflect::get(&response, &JsValue::from_str("status"))
        .ok()
        .and_then(|s| s.as_f64())
    {
        Some(s) if (100.0..=999.0).contains(&s) => s as u16,
        _ => {
            deliver(Input::Failed {
                id,
                error: TransportError::Io("fetch returned something that is not a Response".into()),
            });
            return;
        }
    };
    if req.stream && (200..300).contains(&status) {
        stream_body(id, &response, deliver).await;
        return;
    }
    let input = match read_whole_body(&response).await {
        Ok(body) => Input::Response { id, status, body },
        Err(message) => Input::Failed {
            id,
            error: TransportError::Io(message),
        },
    };
    deliver(input);
}

async fn send(
    fetch: &Function,
    bindings: Option<&JsValue>,
    req: &HttpRequest,
    signal: &AbortSignal,
) -> Result<JsValue, TransportError> {
    let init = request_init(req, signal).map_err(|e| TransportError::Connect(error_text(&e)))?;
    let returned = match &req.target {
        // `this` = globalThis: the platform fetch throws "Illegal invocation" with any other receiver.
        Target::Url(url) => fetch.call2(&js_sys::global(), &JsValue::from_str(url), &init),
        // A binding (Durable Object stub, service binding, any object with
        // `fetch`): its own method, called on it, with a placeholder origin.
        Target::Binding { name, path } => {
            let binding = bindings
                .and_then(|b| Reflect::get(b, &JsValue::from_str(name)).ok())
                .filter(|b| b.is_object())
                .ok_or_else(|| {
                    TransportError::Connect(format!(
                        "no binding named {name:?} was given to this client"
                    ))
                })?;
            let method = Reflect::get(&binding, &JsValue::from_str("fetch"))
                .ok()
                .and_then(|f| f.dyn_into::<Function>().ok())
                .ok_or_else(|| {
                    TransportError::Connect(format!("binding {name:?} has no fetch method"))
                })?;
            let url = format!("https://{name}.binding{path}");
            method.call2(&binding, &JsValue::from_str(&url), &init)
        }
    }
    .map_err(|e| TransportError::Connect(error_text(&e)))?;
    JsFuture::from(Promise::resolve(&returned))
        .await
        .map_err(|e| TransportError::Connect(error_text(&e)))
}

fn request_init(req: &HttpRequest, signal: &AbortSignal) -> Result<Object, JsValue> {
    let init = Object::new();
    Reflect::set(&init, &"method".into(), &req.method.as_str().into())?;
    let headers = Object::new();
    for (name, value) in &req.headers {
        Reflect::set(&headers, &name.as_str().into(), &value.as_str().into())?;
    }
    Reflect::set(&init, &"headers".into(), &headers)?;
    if req.method != Method::Get {
        Reflect::set(
            &init,
            &"body".into(),
            &Uint8Array::from(req.body.as_slice()),
        )?;
    }
    Reflect::set(&init, &"signal".into(), signal)?;
    Ok(init)
}

async fn read_whole_body(response: &JsValue) -> Result<Vec<u8>, String> {
    let buffer = call_method(response, "arrayBuffer")?;
    let buffer = JsFuture::from(Promise::resolve(&buffer))
        .await
        .map_err(|e| error_text(&e))?;
    if !buffer.is_object() {
        return Err("response body is not an ArrayBuffer".into());
    }
    Ok(Uint8Array::new(&buffer).to_vec())
}

/// Delivers a 2xx streaming body chunk by chunk, then `StreamEnd` (or `Failed`).
async fn stream_body(id: RequestId, response: &JsValue, mut deliver: impl FnMut(Input) -> bool) {
    let body = Reflect::get(response, &"body".into()).unwrap_or(JsValue::NULL);
    let reader = if body.is_object() {
        call_method(&body, "getReader").ok()
    } else {
        None
    };
    let Some(reader) = reader else {
        // A fetch without streaming bodies: deliver the whole body as one chunk.
        match read_whole_body(response).await {
            Ok(data) => {
                if deliver(Input::Chunk { id, data }) {
                    deliver(Input::StreamEnd { id });
                }
            }
            Err(message) => {
                deliver(Input::Failed {
                    id,
                    error: TransportError::Io(message),
                });
            }
        }
        return;
    };
    loop {
        let step = match call_method(&reader, "read") {
            Ok(p) => JsFuture::from(Promise::resolve(&p))
                .await
                .map_err(|e| error_text(&e)),
            Err(e) => Err(e),
        };
        let step = match step {
            Ok(s) => s,
            Err(message) => {
                deliver(Input::Failed {
                    id,
                    error: TransportError::Io(message),
                });
                return;
            }
        };
        if Reflect::get(&step, &"done".into())
            .map(|d| d.is_truthy())
            .unwrap_or(true)
        {
            deliver(Input::StreamEnd { id });
            return;
        }
        let value = Reflect::get(&step, &"value".into()).unwrap_or(JsValue::UNDEFINED);
        let data = match value.dyn_into::<Uint8Array>() {
            Ok(bytes) => bytes.to_vec(),
            Err(_) => {
                deliver(Input::Failed {
                    id,
                    error: TransportError::Io("stream chunk is not a Uint8Array".into()),
                });
                return;
            }
        };
        if !deliver(Input::Chunk { id, data }) {
            // Cancelled: stop the body so that the connection is freed.
            let _ = call_method(&reader, "cancel");
            return;
        }
    }
}

fn call_method(target: &JsValue, name: &str) -> Result<JsValue, String> {
    let f = Reflect::get(target, &JsValue::from_str(name)).map_err(|e| error_text(&e))?;
    if !f.is_function() {
        return Err(format!("response has no {name}()"));
    }
    f.unchecked_into::<Function>()
        .call0(target)
        .map_err(|e| error_text(&e))
}

/// A short description of a thrown JS value: `message`, plus the `cause`'s code
/// or message where runtimes put the real reason (Node: "fetch failed" with
/// `cause.code = "ECONNREFUSED"`).
pub(crate) fn error_text(e: &JsValue) -> String {
    let field = |v: &JsValue, k: &str| {
        Reflect::get(v, &JsValue::from_str(k))
            .ok()
            .and_then(|x| x.as_string())
    };
    let mut text = if e.is_object() {
        field(e, "message")
    } else {
        e.as_string()
    }
    .unwrap_or_else(|| "unknown error".into());
    if e.is_object() {
        if let Ok(cause) = Reflect::get(e, &"cause".into()) {
            if cause.is_object() {
                if let Some(detail) = field(&cause, "code").or_else(|| field(&cause, "message")) {
                    text = format!("{text} ({detail})");
                }
            }
        }
    }
    text.chars().take(MAX_ERROR_CHARS).collect()
}
