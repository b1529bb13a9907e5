//! Makes a process's output into redacted lines with bounded memory.
//!
//! The engine delivers exec output in arbitrary frames, not lines. Each stream goes through its own
//! streaming redactor before it is split (ADR-0018 row 2): a secret spread over frames or lines, a
//! PEM key printed one line at a time, is masked whole, exactly as `stet sanitize` masks the same
//! bytes. Everything downstream (harness parsers, the transcript) wants lines, and an agent can print
//! a 20 MB line or bytes that are not UTF-8: a line longer than the cap is delivered in cap-sized
//! pieces, each marked as continuing, and bytes are passed on as they are.

use std::sync::Arc;

use super::{OutputChunk, OutputLine, OutputStream};
use stet_sanitize::sanitize::{Redactor, TokenSanitizer};

/// Lines longer than this are split; the pieces carry `continues: true`.
pub const MAX_LINE_BYTES: usize = 256 * 1024;

/// One line (without its `\n`), or one piece of an over-long line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FramedLine {
    /// The line's bytes, redacted, without the `\n`; not necessarily UTF-8.
    pub bytes: Vec<u8>,
    /// The line goes on in the next piece.
    pub continues: bool,
}

/// Accumulates output and yields complete lines.
#[derive(Debug, Default)]
pub struct LineFramer {
    partial: Vec<u8>,
}

impl LineFramer {
    /// Adds output; returns the lines it completed.
    pub fn push(&mut self, mut bytes: &[u8]) -> Vec<FramedLine> {
        let mut lines = Vec::new();
        while !bytes.is_empty() {
            let room = MAX_LINE_BYTES - self.partial.len();
            match memchr::memchr(b'\n', &bytes[..bytes.len().min(room + 1)]) {
                Some(newline) => {
                    self.partial.extend_from_slice(&bytes[..newline]);
                    lines.push(FramedLine {
                        bytes: std::mem::take(&mut self.partial),
                        continues: false,
                    });
                    bytes = &bytes[newline + 1..];
                }
                None if bytes.len() > room => {
                    self.partial.extend_from_slice(&bytes[..room]);
                    lines.push(FramedLine {
                        bytes: std::mem::take(&mut self.partial),
                        continues: true,
                    });
                    bytes = &bytes[room..];
                }
                None => {
                    self.partial.extend_from_slice(bytes);
                    bytes = &[];
                }
            }
        }
        lines
    }

    /// The output ended: the unterminated last line, if any.
    pub fn finish(&mut self) -> Option<FramedLine> {
        (!self.partial.is_empty()).then(|| FramedLine {
            bytes: std::mem::take(&mut self.partial),
            continues: false,
        })
    }
}

/// One process's output made into lines: stdout and stderr each redacted as the stream it is, then
/// framed. A finished line is released as soon as its bytes arrived; only what a later byte could
/// still change is held.
#[derive(Debug)]
pub struct OutputFramer {
    stdout: StreamFramer,
    stderr: StreamFramer,
}

#[derive(Debug)]
struct StreamFramer {
    redactor: Redactor,
    lines: LineFramer,
    redacted: Vec<u8>,
}

impl StreamFramer {
    fn new(sanitizer: Arc<TokenSanitizer>) -> StreamFramer {
        StreamFramer {
            redactor: Redactor::new(sanitizer),
            lines: LineFramer::default(),
            redacted: Vec::new(),
        }
    }

    fn push(&mut self, bytes: &[u8]) -> Vec<FramedLine> {
        self.redacted.clear();
        self.redactor.push(bytes, &mut self.redacted);
        self.lines.push(&self.redacted)
    }

    fn finish(&mut self) -> Vec<FramedLine> {
        self.redacted.clear();
        self.redactor.finish(&mut self.redacted);
        let mut lines = self.lines.push(&self.redacted);
        lines.extend(self.lines.finish());
        lines
    }
}

impl OutputFramer {
    /// A framer for a process's two streams, each redacted with `sanitizer`.
    pub fn new(sanitizer: &Arc<TokenSanitizer>) -> OutputFramer {
        OutputFramer {
            stdout: StreamFramer::new(Arc::clone(sanitizer)),
            stderr: StreamFramer::new(Arc::clone(sanitizer)),
        }
    }

    /// The lines `chunk` completed, redacted.
    pub fn push(&mut self, chunk: &OutputChunk) -> Vec<OutputLine> {
        let stream = chunk.stream;
        let framer = match stream {
            OutputStream::Stdout => &mut self.stdout,
            OutputStream::Stderr => &mut self.stderr,
        };
        framer
            .push(&chunk.bytes)
            .into_iter()
            .map(|line| OutputLine { stream, line })
            .collect()
    }

    /// The output ended: everything still held, stdout's before stderr's.
    pub fn finish(&mut self) -> Vec<OutputLine> {
        let mut lines = Vec::new();
        for (stream, framer) in [
            (OutputStream::Stdout, &mut self.stdout),
            (OutputStream::Stderr, &mut self.stderr),
        ] {
            lines.extend(
                framer
                    .finish()
                    .into_iter()
                    .map(|line| OutputLine { stream, line }),
            );
        }
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn frame(chunks: &[&[u8]]) -> Vec<FramedLine> {
        let mut framer = LineFramer::default();
        let mut lines: Vec<FramedLine> = chunks.iter().flat_map(|c| framer.push(c)).collect();
        lines.extend(framer.finish());
        lines
    }

    #[test]
    fn lines_split_across_frames_are_joined() {
        let lines = frame(&[b"hel", b"lo\nwor", b"ld\n\nlast"]);
        let texts: Vec<&[u8]> = lines.iter().map(|l| l.bytes.as_slice()).collect();
        assert_eq!(texts, vec![&b"hello"[..], b"world", b"", b"last"]);
        assert!(lines.iter().all(|l| !l.continues));
    }

    #[test]
    fn a_twenty_megabyte_line_comes_in_bounded_pieces() {
        let big = vec![0xffu8; 20 * 1024 * 1024];
        let mut framer = LineFramer::default();
        let mut pieces = Vec::new();
        for chunk in big.chunks(100_000) {
            pieces.extend(framer.push(chunk));
        }
        pieces.extend(framer.push(b"\n"));
        assert!(framer.finish().is_none());
        assert!(pieces.iter().all(|p| p.bytes.len() <= MAX_LINE_BYTES));
        assert_eq!(
            pieces.iter().map(|p| p.bytes.len()).sum::<usize>(),
            big.len()
        );
        let (last, rest) = pieces.split_last().unwrap();
        assert!(!last.continues && rest.iter().all(|p| p.continues));
    }

    fn random_alnum(len: usize) -> String {
        let bytes = crate::credential::random_token(len).unwrap();
        bytes
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .take(len)
            .collect()
    }

    /// What an agent printing a key one line at a time, with chatter on stderr, looks like.
    fn key_printing_agent() -> (Vec<u8>, Vec<String>) {
        let body: Vec<String> = (0..6).map(|_| random_alnum(64)).collect();
        let mut stdout =
            String::from("writing the deploy key\n-----BEGIN OPENSSH PRIVATE KEY-----\n");
        for line in &body {
            stdout.push_str(line);
            stdout.push('\n');
        }
        stdout.push_str("-----END OPENSSH PRIVATE KEY-----\ndone\n");
        (stdout.into_bytes(), body)
    }

    fn lines_text(lines: &[OutputLine], stream: OutputStream) -> Vec<u8> {
        let mut text = Vec::new();
        for line in lines.iter().filter(|l| l.stream == stream) {
            text.extend_from_slice(&line.line.bytes);
            if !line.line.continues {
                text.push(b'\n');
            }
        }
        text
    }

    #[test]
    fn a_key_printed_line_by_line_is_masked_whole_on_its_stream() {
        let sanitizer = Arc::new(TokenSanitizer::new().unwrap());
        let (stdout, body) = key_printing_agent();
        let mut framer = OutputFramer::new(&sanitizer);
        let mut lines = Vec::new();
        for line in stdout.split_inclusive(|b| *b == b'\n') {
            lines.extend(framer.push(&OutputChunk {
                stream: OutputStream::Stdout,
                bytes: line.to_vec(),
            }));
            lines.extend(framer.push(&OutputChunk {
                stream: OutputStream::Stderr,
                bytes: b"progress 10%\n".to_vec(),
            }));
        }
        lines.extend(framer.finish());
        let shown = String::from_utf8(lines_text(&lines, OutputStream::Stdout)).unwrap();
        assert_eq!(
            shown,
            "writing the deploy key\n[REDACTED:private-key]\ndone\n"
        );
        for line in &body {
            assert!(!shown.contains(line.as_str()));
        }
        assert_eq!(
            lines_text(&lines, OutputStream::Stderr),
            b"progress 10%\n".repeat(10)
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, .. ProptestConfig::default() })]

        #[test]
        fn any_framing_of_a_stream_shows_what_stet_sanitize_shows(
            cuts in proptest::collection::vec(0usize..1200, 0..24),
            noise in "[a-z \n]{0,40}",
        ) {
            let sanitizer = Arc::new(TokenSanitizer::new().unwrap());
            let (key, _) = key_printing_agent();
            let mut stream = noise.clone().into_bytes();
            stream.extend_from_slice(&key);
            stream.extend_from_slice(format!("curl -u deploy:{} https://x\n", random_alnum(16)).as_bytes());
            stream.extend_from_slice(noise.as_bytes());
            let mut cuts = cuts;
            cuts.push(stream.len());
            cuts.sort_unstable();
            let mut framer = OutputFramer::new(&sanitizer);
            let mut lines = Vec::new();
            let mut from = 0;
            for cut in cuts {
                let cut = cut.min(stream.len()).max(from);
                lines.extend(framer.push(&OutputChunk {
                    stream: OutputStream::Stdout,
                    bytes: stream[from..cut].to_vec(),
                }));
                from = cut;
            }
            lines.extend(framer.finish());
            let mut expected = sanitizer.redact(&stream);
            if !expected.ends_with(b"\n") && !expected.is_empty() {
                expected.push(b'\n');
            }
            prop_assert_eq!(lines_text(&lines, OutputStream::Stdout), expected);
        }

        #[test]
        fn any_framing_of_the_output_gives_the_same_lines(text in "[a-c\n]{0,200}", cut in 0usize..200) {
            let bytes = text.as_bytes();
            let cut = cut.min(bytes.len());
            prop_assert_eq!(frame(&[bytes]), frame(&[&bytes[..cut], &bytes[cut..]]));
        }
    }
}
