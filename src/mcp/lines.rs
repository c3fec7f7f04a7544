//! Newline-delimited reading with a hard bound on line length: a [`Decoder`] for tokio-util's
//! `FramedRead`, which owns the buffer, so a read cancelled in a `select!` loses nothing.
//!
//! Not `LinesCodec`: it requires UTF-8 (a server's stderr need not be) and forgets how long a
//! discarded line was, which the refusal an agent reads and the logs say.

use bytes::{Buf, BytesMut};
use tokio::io::AsyncRead;
use tokio_stream::StreamExt;
use tokio_util::codec::{Decoder, FramedRead};

/// What one call to [`Lines::next`] produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Line {
    /// One line, without its line ending (`\n`, or `\r\n`).
    Complete(Vec<u8>),
    /// A line longer than the bound was read and thrown away; it had this many bytes.
    Oversized(usize),
    /// The stream ended.
    Eof,
}

/// Lines read from `R`, never holding more than `max` bytes of one.
pub(crate) struct Lines<R> {
    framed: FramedRead<R, LineCodec>,
}

impl<R: AsyncRead + Unpin> Lines<R> {
    pub(crate) fn new(reader: R, max: usize) -> Lines<R> {
        Lines { framed: FramedRead::new(reader, LineCodec::new(max)) }
    }

    /// With a read buffer of `capacity` bytes to start with.
    pub(crate) fn with_capacity(reader: R, max: usize, capacity: usize) -> Lines<R> {
        Lines { framed: FramedRead::with_capacity(reader, LineCodec::new(max), capacity) }
    }

    /// The next line. Cancel-safe: a partly read line stays buffered for the next call.
    ///
    /// # Errors
    /// The reader's I/O error.
    pub(crate) async fn next(&mut self) -> std::io::Result<Line> {
        self.framed.next().await.unwrap_or(Ok(Line::Eof))
    }

    pub(crate) fn get_ref(&self) -> &R {
        self.framed.get_ref()
    }
}

/// The framing: a line over `max` bytes (its `\r` counted) is consumed and discarded up to its
/// newline, so that the stream stays in sync, and reported with its length.
#[derive(Debug)]
pub(crate) struct LineCodec {
    max: usize,
    /// Bytes of the line being thrown away so far (non-zero while discarding).
    discarded: usize,
    /// How far the buffer was already searched for a newline.
    scanned: usize,
}

impl LineCodec {
    pub(crate) fn new(max: usize) -> LineCodec {
        LineCodec { max, discarded: 0, scanned: 0 }
    }
}

impl Decoder for LineCodec {
    type Item = Line;
    type Error = std::io::Error;

    fn decode(&mut self, src: &mut BytesMut) -> std::io::Result<Option<Line>> {
        let newline = src.get(self.scanned..).and_then(|rest| rest.iter().position(|&b| b == b'\n')).map(|at| at + self.scanned);
        let Some(at) = newline else {
            if self.discarded > 0 || src.len() > self.max {
                // Too long already: count it and let the buffer go, so it stays bounded.
                self.discarded = self.discarded.saturating_add(src.len());
                src.clear();
                self.scanned = 0;
            } else {
                self.scanned = src.len();
            }
            return Ok(None);
        };
        self.scanned = 0;
        if self.discarded > 0 || at > self.max {
            let len = self.discarded.saturating_add(at);
            self.discarded = 0;
            src.advance(at + 1);
            return Ok(Some(Line::Oversized(len)));
        }
        let line = src.split_to(at);
        src.advance(1);
        Ok(Some(complete(&line)))
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> std::io::Result<Option<Line>> {
        if let Some(line) = self.decode(src)? {
            return Ok(Some(line));
        }
        // No newline left: what remains is a last line without one, or the end of a long one.
        self.scanned = 0;
        if self.discarded > 0 {
            let len = std::mem::take(&mut self.discarded);
            return Ok(Some(Line::Oversized(len)));
        }
        if src.is_empty() {
            return Ok(None);
        }
        let line = src.split();
        Ok(Some(complete(&line)))
    }
}

fn complete(line: &[u8]) -> Line {
    Line::Complete(line.strip_suffix(b"\r").unwrap_or(line).to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn bounds_lines_and_stays_in_sync() {
        let input: &[u8] = b"short\r\nthis line is far too long\nok\nlast";
        let mut lines = Lines::with_capacity(input, 10, 4);
        let mut seen = Vec::new();
        loop {
            match lines.next().await.unwrap() {
                Line::Eof => break,
                line => seen.push(line),
            }
        }
        assert_eq!(
            seen,
            vec![Line::Complete(b"short".to_vec()), Line::Oversized(25), Line::Complete(b"ok".to_vec()), Line::Complete(b"last".to_vec())]
        );
        assert_eq!(lines.next().await.unwrap(), Line::Eof, "the end stays the end");
    }

    #[tokio::test]
    async fn a_long_line_at_the_end_and_a_lone_carriage_return_are_said() {
        let mut lines = Lines::new(&b"12345678901"[..], 10);
        assert_eq!(lines.next().await.unwrap(), Line::Oversized(11));
        assert_eq!(lines.next().await.unwrap(), Line::Eof);
        // The bound counts the `\r`: 10 bytes and a `\r` is over 10.
        let mut lines = Lines::new(&b"1234567890\r\n\r"[..], 10);
        assert_eq!(lines.next().await.unwrap(), Line::Oversized(11));
        assert_eq!(lines.next().await.unwrap(), Line::Complete(Vec::new()));
        assert_eq!(lines.next().await.unwrap(), Line::Eof);
    }

    /// A read cancelled half-way through a line (another branch of a `select!` won) loses none
    /// of it: the next read returns the whole line.
    #[tokio::test]
    async fn a_read_cancelled_mid_line_loses_nothing() {
        use tokio::io::AsyncWriteExt;
        let (mut client, server) = tokio::io::duplex(64);
        let mut lines = Lines::new(server, 1024);
        client.write_all(b"{\"jsonrpc\":").await.unwrap();
        // Polled once (it reads the half line, then waits for more), then dropped.
        tokio::select! {
            biased;
            line = lines.next() => panic!("no whole line yet: {line:?}"),
            () = std::future::ready(()) => {}
        }
        client.write_all(b"\"2.0\"}\n").await.unwrap();
        assert_eq!(lines.next().await.unwrap(), Line::Complete(b"{\"jsonrpc\":\"2.0\"}".to_vec()));
    }
}
