//! Frames a process's output into lines with bounded memory.
//!
//! The engine delivers exec output in arbitrary frames, not lines. Everything downstream (the
//! sanitizer's per-line events, harness parsers) wants lines, and an agent can print a 20 MB line or
//! bytes that are not UTF-8: a line longer than the cap is delivered in cap-sized pieces, each marked
//! as continuing, and bytes are passed on as they are.

/// Lines longer than this are split; the pieces carry `continues: true`.
pub const MAX_LINE_BYTES: usize = 256 * 1024;

/// One line (without its `\n`), or one piece of an over-long line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FramedLine {
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
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

    proptest! {
        #[test]
        fn any_framing_of_the_output_gives_the_same_lines(text in "[a-c\n]{0,200}", cut in 0usize..200) {
            let bytes = text.as_bytes();
            let cut = cut.min(bytes.len());
            prop_assert_eq!(frame(&[bytes]), frame(&[&bytes[..cut], &bytes[cut..]]));
        }
    }
}
