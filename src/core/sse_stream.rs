//! Splits a server-sent-events byte stream (`text/event-stream`, the
//! framing of an Upstash REST subscription) into its `data` values,
//! whatever the chunk boundaries are.
//!
//! Only what a subscription needs: lines end with `\n` (a preceding `\r` is
//! dropped); a `data:` line yields its value (one optional space after the
//! colon removed); comments (`:` lines), other fields and the blank lines
//! between events are skipped. Each `data` line is one message: Upstash
//! sends one per event, and a payload can never contain a newline there.

/// Longest line accepted; a peer that streams more without a newline is
/// hostile or broken.
pub const MAX_LINE_BYTES: usize = 64 * 1024;

/// Why [`SseSplitter::push`] rejected its input.
#[derive(Debug, PartialEq, Eq)]
pub enum SseError {
    /// A line grew beyond [`MAX_LINE_BYTES`].
    TooLarge,
}

/// Incremental splitter: feed it chunks with [`push`](Self::push), get back
/// the value of every `data:` line they complete.
#[derive(Default, Debug)]
pub struct SseSplitter {
    line: Vec<u8>,
}

impl SseSplitter {
    /// An empty splitter at the start of a line.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feed bytes; returns every `data` value completed by them.
    pub fn push(&mut self, data: &[u8]) -> Result<Vec<Vec<u8>>, SseError> {
        let mut out = Vec::new();
        for &b in data {
            if b != b'\n' {
                if self.line.len() >= MAX_LINE_BYTES {
                    return Err(SseError::TooLarge);
                }
                self.line.push(b);
                continue;
            }
            let mut line = std::mem::take(&mut self.line);
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            if let Some(value) = line.strip_prefix(b"data:") {
                out.push(value.strip_prefix(b" ").unwrap_or(value).to_vec());
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
    fn yields_data_lines_only() {
        let mut s = SseSplitter::new();
        assert!(
            s.push(b"data: subscribe,ch,1\n\n: keep\nevent: x\r\nda")
                .unwrap()
                == vec![b"subscribe,ch,1".to_vec()]
        );
        assert_eq!(
            s.push(b"ta:message,ch,a b,c\r\n\n").unwrap(),
            vec![b"message,ch,a b,c".to_vec()]
        );
        assert_eq!(
            s.push(b"data: unterminated").unwrap(),
            Vec::<Vec<u8>>::new()
        );
    }

    #[test]
    fn an_endless_line_is_refused() {
        let mut s = SseSplitter::new();
        let big = vec![b'a'; MAX_LINE_BYTES];
        assert_eq!(s.push(&big).unwrap().len(), 0);
        assert_eq!(s.push(b"a"), Err(SseError::TooLarge));
    }

    proptest! {
        #[test]
        fn any_split_gives_the_same_values(values in prop::collection::vec("[a-z0-9,: ]{0,20}", 1..6), cut in 0usize..200) {
            let text: String = values.iter().map(|v| format!("data: {v}\n\n")).collect();
            let cut = cut.min(text.len());
            let mut s = SseSplitter::new();
            let mut got = s.push(&text.as_bytes()[..cut]).unwrap();
            got.extend(s.push(&text.as_bytes()[cut..]).unwrap());
            let want: Vec<Vec<u8>> = values.iter().map(|v| v.as_bytes().to_vec()).collect();
            prop_assert_eq!(got, want);
        }

        #[test]
        fn never_panics(data in prop::collection::vec(any::<u8>(), 0..300)) {
            let _ = SseSplitter::new().push(&data);
        }
    }
}
