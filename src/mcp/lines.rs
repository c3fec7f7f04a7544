//! Newline-delimited reading with a hard bound on line length.

use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// What one call to [`read_line`] produced.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Line {
    /// `buf` holds one line, without its line ending.
    Complete,
    /// A line longer than the bound was read and thrown away; it had this many bytes.
    Oversized(usize),
    /// The stream ended.
    Eof,
}

/// Reads one line into `buf` (cleared first), never holding more than `max` bytes of it.
///
/// A line over `max` bytes is consumed and discarded so that the stream stays in sync.
///
/// # Errors
/// The reader's I/O error.
pub(crate) async fn read_line<R: AsyncBufRead + Unpin>(reader: &mut R, buf: &mut Vec<u8>, max: usize) -> std::io::Result<Line> {
    buf.clear();
    let mut discarded: usize = 0;
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok(match (discarded, buf.is_empty()) {
                (0, true) => Line::Eof,
                (0, false) => finish(buf),
                (n, _) => Line::Oversized(n),
            });
        }
        let newline = available.iter().position(|&b| b == b'\n');
        let chunk_len = newline.unwrap_or(available.len());
        if discarded == 0 && buf.len() + chunk_len <= max {
            buf.extend_from_slice(&available[..chunk_len]);
        } else {
            discarded += buf.len() + chunk_len;
            buf.clear();
        }
        let consumed = newline.map_or(chunk_len, |i| i + 1);
        reader.consume(consumed);
        if newline.is_some() {
            return Ok(if discarded == 0 { finish(buf) } else { Line::Oversized(discarded) });
        }
    }
}

fn finish(buf: &mut Vec<u8>) -> Line {
    if buf.last() == Some(&b'\r') {
        buf.pop();
    }
    Line::Complete
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn bounds_lines_and_stays_in_sync() {
        let input: &[u8] = b"short\r\nthis line is far too long\nok\nlast";
        let mut reader = tokio::io::BufReader::with_capacity(4, input);
        let mut buf = Vec::new();
        let mut seen = Vec::new();
        loop {
            let line = read_line(&mut reader, &mut buf, 10).await.unwrap();
            if line == Line::Eof {
                break;
            }
            seen.push((format!("{line:?}"), String::from_utf8_lossy(&buf).into_owned()));
        }
        assert_eq!(
            seen,
            vec![
                ("Complete".into(), "short".into()),
                ("Oversized(25)".into(), String::new()),
                ("Complete".into(), "ok".into()),
                ("Complete".into(), "last".into()),
            ]
        );
    }
}
