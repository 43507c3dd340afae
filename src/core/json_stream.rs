//! Splits a byte stream of concatenated JSON objects (etcd's chunked watch
//! stream) into whole objects, whatever the chunk boundaries are.
//!
//! It tracks brace depth outside strings; it never trusts newlines, since a
//! gateway may or may not delimit messages with them.

/// Largest single message accepted; a peer that streams more without closing
/// its object is hostile or broken.
pub const MAX_MESSAGE_BYTES: usize = 4 * 1024 * 1024;

/// Incremental splitter: feed it chunks with [`push`](Self::push) and get back
/// each complete top-level JSON object.
#[derive(Default, Debug)]
pub struct JsonObjectSplitter {
    buf: Vec<u8>,
    depth: u32,
    in_string: bool,
    escaped: bool,
    started: bool,
}

/// Why [`JsonObjectSplitter::push`] rejected its input.
#[derive(Debug, PartialEq, Eq)]
pub enum SplitError {
    /// Bytes outside any object that are not whitespace, or unbalanced braces.
    Malformed,
    /// A single object grew beyond [`MAX_MESSAGE_BYTES`].
    TooLarge,
}

impl JsonObjectSplitter {
    /// An empty splitter, expecting the start of an object.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feed bytes; returns every object completed by them.
    pub fn push(&mut self, data: &[u8]) -> Result<Vec<Vec<u8>>, SplitError> {
        let mut out = Vec::new();
        for &b in data {
            if !self.started {
                match b {
                    b' ' | b'\n' | b'\r' | b'\t' | b',' => continue,
                    b'{' => {
                        self.started = true;
                        self.depth = 1;
                        self.buf.push(b);
                        continue;
                    }
                    _ => return Err(SplitError::Malformed),
                }
            }
            if self.buf.len() >= MAX_MESSAGE_BYTES {
                return Err(SplitError::TooLarge);
            }
            self.buf.push(b);
            if self.in_string {
                if self.escaped {
                    self.escaped = false;
                } else if b == b'\\' {
                    self.escaped = true;
                } else if b == b'"' {
                    self.in_string = false;
                }
                continue;
            }
            match b {
                b'"' => self.in_string = true,
                b'{' | b'[' => self.depth += 1,
                b'}' | b']' => {
                    self.depth = self.depth.checked_sub(1).ok_or(SplitError::Malformed)?;
                    if self.depth == 0 {
                        out.push(std::mem::take(&mut self.buf));
                        self.started = false;
                    }
                }
                _ => {}
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn splits_across_chunks() {
        let mut s = JsonObjectSplitter::new();
        assert_eq!(s.push(br#"{"a":"}{\"x"#).unwrap().len(), 0);
        let out = s.push(b"\"}\n{\"b\":[1,{}]}{").unwrap();
        assert_eq!(
            out,
            vec![br#"{"a":"}{\"x"}"#.to_vec(), br#"{"b":[1,{}]}"#.to_vec()]
        );
        assert_eq!(s.push(b"}").unwrap(), vec![b"{}".to_vec()]);
        assert!(JsonObjectSplitter::new().push(b"x").is_err());
    }

    proptest! {
        #[test]
        fn any_split_gives_same_objects(objs in prop::collection::vec("[a-z{}\\[\\]\"\\\\ ]{0,20}", 1..5), cut in 0usize..200) {
            let values: Vec<String> = objs.iter().map(|s| serde_json::json!({"k": s, "n": [1, {"x": s}]}).to_string()).collect();
            let all = values.join("\n");
            let cut = cut.min(all.len());
            let mut sp = JsonObjectSplitter::new();
            let mut got = sp.push(&all.as_bytes()[..cut]).unwrap();
            got.extend(sp.push(&all.as_bytes()[cut..]).unwrap());
            let got: Vec<String> = got.into_iter().map(|b| String::from_utf8(b).unwrap()).collect();
            prop_assert_eq!(got, values);
        }

        #[test]
        fn never_panics(data in prop::collection::vec(any::<u8>(), 0..300)) {
            let _ = JsonObjectSplitter::new().push(&data);
        }
    }
}
