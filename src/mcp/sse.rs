//! A Server-Sent Events decoder (the WHATWG event stream format), fed with arbitrary chunks.
//! Sans-IO: the HTTP transport pushes body bytes in and takes complete events out.

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Event {
    /// `event:`; empty means "message".
    pub event: String,
    /// The `data:` lines joined with `\n`.
    pub data: String,
    /// `id:` of this event, if it set one.
    pub id: Option<String>,
}

/// The decoder's state across chunks.
#[derive(Debug, Default)]
pub struct Decoder {
    buffer: Vec<u8>,
    event: String,
    data: String,
    has_data: bool,
    id: Option<String>,
    /// The last `id:` seen on this stream, for `Last-Event-ID` on a resume.
    pub last_event_id: Option<String>,
    /// The last `retry:` value, in milliseconds.
    pub retry_ms: Option<u64>,
    /// Bytes of the event being assembled; bounded by the caller.
    pending: usize,
    /// The last line ended with a CR at the end of the data so far: an LF right after it
    /// belongs to the same line end.
    after_cr: bool,
    /// The stream's first bytes were checked for a byte order mark.
    bom_checked: bool,
}

/// UTF-8's byte order mark, which a stream may start with and which is not part of its first line.
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// One event grew beyond the bound a stream's reader set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("an event is larger than {0} bytes")]
pub struct EventTooLarge(pub usize);

impl Decoder {
    /// Feeds a chunk and returns the events it completed.
    ///
    /// # Errors
    /// [`EventTooLarge`] when a single event grows beyond `max_event_bytes`.
    pub fn feed(&mut self, chunk: &[u8], max_event_bytes: usize) -> Result<Vec<Event>, EventTooLarge> {
        self.buffer.extend_from_slice(chunk);
        if !self.bom_checked {
            if self.buffer.len() < BOM.len() && BOM.starts_with(&self.buffer) {
                return Ok(Vec::new());
            }
            if self.buffer.starts_with(BOM) {
                self.buffer.drain(..BOM.len());
            }
            self.bom_checked = true;
        }
        let mut events = Vec::new();
        let mut start = 0;
        loop {
            if self.after_cr {
                // CRLF split across chunks: wait for the next byte to know.
                let Some(&next) = self.buffer.get(start) else { break };
                if next == b'\n' {
                    start += 1;
                }
                self.after_cr = false;
            }
            // A line ends at CRLF, LF or a lone CR.
            let Some(offset) = self.buffer[start..].iter().position(|&b| b == b'\n' || b == b'\r') else { break };
            let end = start + offset;
            let line = String::from_utf8_lossy(&self.buffer[start..end]).into_owned();
            self.after_cr = self.buffer[end] == b'\r';
            start = end + 1;
            if let Some(event) = self.line(&line) {
                events.push(event);
            }
        }
        self.buffer.drain(..start);
        self.pending = self.data.len() + self.buffer.len();
        if self.pending > max_event_bytes {
            return Err(EventTooLarge(max_event_bytes));
        }
        Ok(events)
    }

    fn line(&mut self, line: &str) -> Option<Event> {
        if line.is_empty() {
            return self.dispatch();
        }
        if line.starts_with(':') {
            return None; // A comment: keep-alive.
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "event" => self.event = value.to_owned(),
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "id" if !value.contains('\0') => {
                self.id = Some(value.to_owned());
                self.last_event_id = Some(value.to_owned());
            }
            "retry" => {
                if let Ok(ms) = value.parse() {
                    self.retry_ms = Some(ms);
                }
            }
            _ => {}
        }
        None
    }

    fn dispatch(&mut self) -> Option<Event> {
        let event = std::mem::take(&mut self.event);
        let id = self.id.take();
        if !self.has_data {
            return None;
        }
        self.has_data = false;
        Some(Event { event, data: std::mem::take(&mut self.data), id })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_events_split_across_chunks() {
        let mut decoder = Decoder::default();
        let stream = b"retry: 500\nid: 1\ndata:\n\n: keep-alive\nevent: message\nid: 2\ndata: {\"a\":\ndata: 1}\n\ndata: x\r\n\r\n";
        let mut events = Vec::new();
        for chunk in stream.chunks(7) {
            events.extend(decoder.feed(chunk, 1 << 20).unwrap());
        }
        assert_eq!(
            events,
            vec![
                Event { event: String::new(), data: String::new(), id: Some("1".into()) },
                Event { event: "message".into(), data: "{\"a\":\n1}".into(), id: Some("2".into()) },
                Event { event: String::new(), data: "x".into(), id: None },
            ]
        );
        assert_eq!(decoder.retry_ms, Some(500));
        assert_eq!(decoder.last_event_id.as_deref(), Some("2"));
    }

    #[test]
    fn lone_carriage_returns_end_lines_and_a_leading_bom_is_skipped() {
        let stream = b"\xEF\xBB\xBFdata: a\r\rdata: b\r\n\r\nid: 7\rdata: c\n\n";
        for size in 1..=stream.len() {
            let mut decoder = Decoder::default();
            let mut events = Vec::new();
            for chunk in stream.chunks(size) {
                events.extend(decoder.feed(chunk, 1 << 20).unwrap());
            }
            let data: Vec<_> = events.iter().map(|e| e.data.as_str()).collect();
            assert_eq!(data, ["a", "b", "c"], "chunks of {size}");
            assert_eq!(events[2].id.as_deref(), Some("7"));
        }
    }

    #[test]
    fn refuses_an_unbounded_event() {
        let mut decoder = Decoder::default();
        assert!(decoder.feed(&[b'a'; 100], 50).is_err());
    }
}
