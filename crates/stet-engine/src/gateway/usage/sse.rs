//! Server-sent event framing, shared by every wire API's stream reader: bytes in chunks split
//! anywhere become each event's joined `data:` lines, within a bound on what one line or one event
//! may make the host hold.

/// Longest SSE line kept; a longer line (never a usage line in practice) is skipped, bounding memory.
pub(crate) const MAX_SSE_LINE: usize = 4 * 1024 * 1024;

/// The framing state of one stream.
#[derive(Debug, Default)]
pub(crate) struct SseEvents {
    /// The current line so far (without its end).
    line: Vec<u8>,
    /// The current line is over [`MAX_SSE_LINE`]: skip to its end.
    skipping: bool,
    /// The `data:` lines of the current event, joined with `\n`.
    data: Vec<u8>,
    has_data: bool,
}

impl SseEvents {
    /// Feeds the next bytes; `event` is called with the data of each event they complete.
    pub(crate) fn push(&mut self, mut chunk: &[u8], mut event: impl FnMut(&[u8])) {
        while !chunk.is_empty() {
            match memchr::memchr(b'\n', chunk) {
                Some(end) => {
                    self.extend_line(&chunk[..end]);
                    self.end_line(&mut event);
                    chunk = &chunk[end + 1..];
                }
                None => {
                    self.extend_line(chunk);
                    chunk = &[];
                }
            }
        }
    }

    /// The end of the stream: an event not closed by a blank line still counts.
    pub(crate) fn finish(mut self, mut event: impl FnMut(&[u8])) {
        if !self.line.is_empty() {
            self.end_line(&mut event);
        }
        self.dispatch(&mut event);
    }

    /// How many bytes of a line are held now (for the bound's test).
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.line.len()
    }

    fn extend_line(&mut self, bytes: &[u8]) {
        if self.skipping {
            return;
        }
        if self.line.len() + bytes.len() > MAX_SSE_LINE {
            self.line.clear();
            self.skipping = true;
        } else {
            self.line.extend_from_slice(bytes);
        }
    }

    fn end_line(&mut self, event: &mut impl FnMut(&[u8])) {
        if std::mem::take(&mut self.skipping) {
            return;
        }
        let mut line = std::mem::take(&mut self.line);
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        if line.is_empty() {
            self.dispatch(event);
        } else if let Some(rest) = line.strip_prefix(b"data:") {
            let rest = rest.strip_prefix(b" ").unwrap_or(rest);
            if self.has_data {
                self.data.push(b'\n');
            }
            // One event's data is held to the line bound too: a longer event (never a usage
            // event in practice) is read as if it were empty.
            if self.data.len() + rest.len() <= MAX_SSE_LINE {
                self.data.extend_from_slice(rest);
            } else {
                self.data = b"{}".to_vec();
            }
            self.has_data = true;
        }
        // Other fields (`event:`, `id:`, `retry:`) and comments carry no usage.
        line.clear();
        self.line = line;
    }

    fn dispatch(&mut self, event: &mut impl FnMut(&[u8])) {
        if !std::mem::take(&mut self.has_data) {
            return;
        }
        let data = std::mem::take(&mut self.data);
        event(&data);
    }
}
