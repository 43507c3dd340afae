//! Reading a JSON object's fields by hand, strictly: the options of the
//! backend registry and a resumed lock handle.
//!
//! Why not `#[derive(Deserialize)]`: each derived type costs a few KiB of
//! wasm (its visitor, field matcher and serde_json's struct driver), and the
//! npm package's size is budgeted; one `serde_json::Value` parser serves
//! every type instead. The rules are serde's with `deny_unknown_fields`: an
//! unknown field is an error, `null` reads as an absent optional field, and
//! a value of the wrong type is an error naming the field. Messages name
//! fields, never values (a value could be a token in the wrong field).

use std::cell::RefCell;

use serde_json::{Map, Value};

use super::error::LockError;

/// The fields of one JSON object. The keys a reader asks for are recorded,
/// so that [`Fields::finish`] can refuse the others without a second list of
/// known names to keep in step with the reads.
pub(crate) struct Fields<'a> {
    map: &'a Map<String, Value>,
    asked: RefCell<Vec<&'static str>>,
}

impl<'a> Fields<'a> {
    /// `v` must be an object.
    pub(crate) fn new(v: &'a Value) -> Result<Fields<'a>, String> {
        Ok(Fields {
            map: v.as_object().ok_or("expected an object")?,
            asked: RefCell::new(Vec::new()),
        })
    }

    /// After every field was read: an error naming the first key no reader
    /// asked for (unknown fields are refused, like serde's `deny_unknown_fields`).
    /// Readers of a format that may grow skip this.
    pub(crate) fn finish(self) -> Result<(), String> {
        let asked = self.asked.into_inner();
        if let Some(k) = self.map.keys().find(|k| !asked.contains(&k.as_str())) {
            let list = asked
                .iter()
                .map(|k| format!("`{k}`"))
                .collect::<Vec<_>>()
                .join(", ");
            // The unknown key is shown cut to printable ASCII: a user's typo, not a value.
            let shown: String = k
                .chars()
                .filter(|c| c.is_ascii_graphic())
                .take(40)
                .collect();
            return Err(format!("unknown field `{shown}`, expected one of {list}"));
        }
        Ok(())
    }

    fn present(&self, key: &'static str) -> Option<&'a Value> {
        let mut asked = self.asked.borrow_mut();
        if !asked.contains(&key) {
            asked.push(key);
        }
        self.map.get(key).filter(|v| !v.is_null())
    }

    fn require<T>(key: &'static str, v: Option<T>) -> Result<T, String> {
        v.ok_or_else(|| format!("missing field `{key}`"))
    }

    pub(crate) fn opt_str(&self, key: &'static str) -> Result<Option<String>, String> {
        self.present(key)
            .map(|v| {
                v.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| format!("`{key}`: expected a string"))
            })
            .transpose()
    }

    pub(crate) fn str(&self, key: &'static str) -> Result<String, String> {
        Self::require(key, self.opt_str(key)?)
    }

    pub(crate) fn opt_u64(&self, key: &'static str) -> Result<Option<u64>, String> {
        self.present(key)
            .map(|v| {
                v.as_u64()
                    .ok_or_else(|| format!("`{key}`: expected a non-negative integer"))
            })
            .transpose()
    }

    /// A `u64` that the other side may write as a decimal string (fencing
    /// tokens, revisions: JSON consumers lose precision above 2^53).
    pub(crate) fn opt_u64_or_string(&self, key: &'static str) -> Result<Option<u64>, String> {
        match self.present(key) {
            Some(Value::String(s)) => s
                .parse()
                .map(Some)
                .map_err(|_| format!("`{key}`: expected a decimal integer")),
            _ => self.opt_u64(key),
        }
    }

    pub(crate) fn opt_u32(&self, key: &'static str) -> Result<Option<u32>, String> {
        self.opt_u64(key)?
            .map(|n| u32::try_from(n).map_err(|_| format!("`{key}`: too large")))
            .transpose()
    }

    pub(crate) fn opt_usize(&self, key: &'static str) -> Result<Option<usize>, String> {
        self.opt_u64(key)?
            .map(|n| usize::try_from(n).map_err(|_| format!("`{key}`: too large")))
            .transpose()
    }

    pub(crate) fn opt_f64(&self, key: &'static str) -> Result<Option<f64>, String> {
        self.present(key)
            .map(|v| {
                v.as_f64()
                    .ok_or_else(|| format!("`{key}`: expected a number"))
            })
            .transpose()
    }

    pub(crate) fn opt_bool(&self, key: &'static str) -> Result<Option<bool>, String> {
        self.present(key)
            .map(|v| {
                v.as_bool()
                    .ok_or_else(|| format!("`{key}`: expected a boolean"))
            })
            .transpose()
    }

    /// One of `names` (lowercase spellings of an enum's variants), by index.
    pub(crate) fn opt_choice(
        &self,
        key: &'static str,
        names: &[&str],
    ) -> Result<Option<usize>, String> {
        let Some(s) = self.opt_str(key)? else {
            return Ok(None);
        };
        names.iter().position(|n| *n == s).map(Some).ok_or_else(|| {
            format!(
                "`{key}`: expected one of {}",
                names
                    .iter()
                    .map(|n| format!("`{n}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
    }

    pub(crate) fn opt_list<T>(
        &self,
        key: &'static str,
        item: impl Fn(&Value) -> Result<T, String>,
    ) -> Result<Option<Vec<T>>, String> {
        match self.present(key) {
            None => Ok(None),
            Some(Value::Array(a)) => a
                .iter()
                .map(&item)
                .collect::<Result<_, _>>()
                .map(Some)
                .map_err(|e| format!("`{key}`: {e}")),
            Some(_) => Err(format!("`{key}`: expected an array")),
        }
    }

    pub(crate) fn list<T>(
        &self,
        key: &'static str,
        item: impl Fn(&Value) -> Result<T, String>,
    ) -> Result<Vec<T>, String> {
        Self::require(key, self.opt_list(key, item)?)
    }

    /// An object whose values are all strings.
    pub(crate) fn opt_string_map(
        &self,
        key: &'static str,
    ) -> Result<Option<Vec<(String, String)>>, String> {
        let Some(v) = self.present(key) else {
            return Ok(None);
        };
        let map = v
            .as_object()
            .ok_or_else(|| format!("`{key}`: expected an object"))?;
        map.iter()
            .map(|(k, v)| {
                v.as_str()
                    .map(|s| (k.clone(), s.to_string()))
                    .ok_or_else(|| format!("`{key}`: expected string values"))
            })
            .collect::<Result<_, _>>()
            .map(Some)
    }

    pub(crate) fn opt_object(&self, key: &'static str) -> Result<Option<&'a Value>, String> {
        Ok(self.present(key))
    }
}

/// A string item of a list.
pub(crate) fn string_item(v: &Value) -> Result<String, String> {
    v.as_str()
        .map(str::to_string)
        .ok_or_else(|| "expected strings".to_string())
}

/// Parses `json` as the options of `what` with `read`. Error messages name
/// fields and expected types but never repeat a value, which could be a
/// token put in the wrong field (JSON syntax errors drop quoted text).
pub(crate) fn parse<T>(
    what: &str,
    json: &str,
    read: impl FnOnce(&Value) -> Result<T, String>,
) -> Result<T, LockError> {
    let v: Value = serde_json::from_str(json)
        .map_err(|e| LockError::invalid(format!("{what}: {}", drop_quoted(&e.to_string()))))?;
    read(&v).map_err(|e| LockError::invalid(format!("{what}: {e}")))
}

fn drop_quoted(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut in_quotes = false;
    for c in message.chars() {
        if c == '"' {
            if !in_quotes {
                out.push_str("\"…\"");
            }
            in_quotes = !in_quotes;
        } else if !in_quotes {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn strict_reading_names_fields_not_values() {
        let v = json!({"a": "x", "n": 3, "s": "12", "b": null, "l": ["p", "q"]});
        let f = Fields::new(&v).unwrap();
        assert_eq!(f.str("a").unwrap(), "x");
        assert_eq!(f.opt_u64("n").unwrap(), Some(3));
        assert_eq!(f.opt_u64_or_string("s").unwrap(), Some(12));
        assert_eq!(f.opt_bool("b").unwrap(), None, "null reads as absent");
        assert_eq!(f.list("l", string_item).unwrap(), ["p", "q"]);
        assert_eq!(f.str("m").unwrap_err(), "missing field `m`");
        assert_eq!(
            f.opt_u64("a").unwrap_err(),
            "`a`: expected a non-negative integer"
        );
        assert_eq!(
            f.opt_choice("a", &["y", "z"]).unwrap_err(),
            "`a`: expected one of `y`, `z`"
        );
        assert_eq!(f.finish(), Ok(()), "every key was asked for");
        let only_a = Fields::new(&v).unwrap();
        only_a.str("a").unwrap();
        let e = only_a.finish().err().unwrap();
        assert!(
            e.starts_with("unknown field `b`, expected one of `a`"),
            "{e}"
        );
        let secret = json!({"tok\u{1}en-s3cr3t": 1});
        let f = Fields::new(&secret).unwrap();
        let _ = f.opt_str("a");
        let e = f.finish().err().unwrap();
        assert!(!e.contains('\u{1}'), "{e}");
        assert!(Fields::new(&json!([1])).is_err());
        assert_eq!(
            Fields::new(&json!({"n": -1}))
                .unwrap()
                .opt_u64("n")
                .unwrap_err(),
            "`n`: expected a non-negative integer"
        );
        assert!(Fields::new(&json!({"n": 1.5}))
            .unwrap()
            .opt_u64("n")
            .is_err());
        assert_eq!(
            Fields::new(&json!({"n": 4294967296u64}))
                .unwrap()
                .opt_u32("n")
                .unwrap_err(),
            "`n`: too large"
        );
    }
}
