//! Unix-socket connections from every gRPC client library.
//!
//! On a Unix socket the HTTP/2 `:authority` means nothing, and clients fill it as they please:
//! grpc-go and grpc-java send `localhost`, but grpcio (the standard Python library) sends the
//! percent-encoded socket path (`tmp%2Ftoolhost.sock`). The HTTP/2 server tonic runs on (h2, on
//! the `http` crate) rejects a `%` in a host and resets every such stream with PROTOCOL_ERROR,
//! so a Python agent could not talk to toolhost without a channel option no one would guess.
//!
//! [`AuthorityFix`] sits between the socket and the HTTP/2 server. It reads the connection's
//! frames until the first header block is complete. If that block's `:authority` is valid (or
//! absent), the connection is passed through untouched from then on: no cost for the clients
//! that were already fine. Otherwise every header block of the connection is decoded and
//! re-encoded (HPACK, `loona-hpack`) with `:authority: localhost`; both HPACK tables start empty
//! at that first block, so the server's decoder follows this adapter's encoder exactly. Frames
//! other than header blocks are forwarded byte for byte, and writes go straight to the socket.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

const PREFACE_LEN: usize = 24;
const FRAME_HEADER_LEN: usize = 9;
const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;
/// The HTTP/2 default SETTINGS_MAX_FRAME_SIZE, which the server keeps: re-encoded blocks are
/// split into frames no larger than this.
const MAX_FRAME: usize = 16_384;
/// The HTTP/2 default SETTINGS_HEADER_TABLE_SIZE, the most a client may make its table.
const HEADER_TABLE_SIZE: usize = 4_096;
/// A header block larger than this is not rewritten (the server refuses far smaller ones).
const MAX_BLOCK: usize = 256 * 1024;
/// What grpc-go and grpc-java send on a Unix socket.
const LOCALHOST: &[u8] = b"localhost";

/// A connection whose header blocks get a valid `:authority`; see the module docs.
pub(crate) struct AuthorityFix<S> {
    inner: S,
    mode: Mode,
    /// Bytes read from the socket, not yet processed.
    incoming: Vec<u8>,
    /// Processed bytes waiting for the HTTP/2 server.
    outgoing: Vec<u8>,
    outgoing_read: usize,
    eof: bool,
}

enum Mode {
    /// The 24-byte client preface comes first.
    Preface,
    /// Frames are forwarded until the first header block decides the mode.
    Sniffing(Block),
    /// Every byte goes straight through.
    PassThrough,
    /// Every header block is re-encoded.
    Rewrite(Box<Rewriter>),
}

/// A header block being assembled from a HEADERS frame and its CONTINUATIONs, with the raw
/// frames kept in case it is forwarded as it came.
#[derive(Default)]
struct Block {
    raw: Vec<u8>,
    fragment: Vec<u8>,
    /// END_STREAM of the HEADERS frame, and its PRIORITY fields if it had them.
    end_stream: bool,
    priority: Option<[u8; 5]>,
    stream_id: u32,
    open: bool,
}

struct Rewriter {
    decoder: loona_hpack::Decoder<'static>,
    encoder: loona_hpack::Encoder<'static>,
    block: Block,
}

impl<S> AuthorityFix<S> {
    pub(crate) fn new(inner: S) -> AuthorityFix<S> {
        AuthorityFix { inner, mode: Mode::Preface, incoming: Vec::new(), outgoing: Vec::new(), outgoing_read: 0, eof: false }
    }

    /// Moves every complete unit (the preface, whole frames) from `incoming` to `outgoing`,
    /// rewriting header blocks as the mode says.
    fn process(&mut self) {
        loop {
            match &mut self.mode {
                Mode::PassThrough => {
                    self.outgoing.append(&mut self.incoming);
                    return;
                }
                Mode::Preface => {
                    if self.incoming.len() < PREFACE_LEN {
                        return;
                    }
                    self.outgoing.extend(self.incoming.drain(..PREFACE_LEN));
                    self.mode = Mode::Sniffing(Block::default());
                }
                Mode::Sniffing(_) | Mode::Rewrite(_) => {
                    if declared_frame_len(&self.incoming).is_some_and(|len| len > MAX_BLOCK) {
                        // Larger than any frame the server accepts: never buffer it, let the
                        // server refuse it.
                        self.mode = Mode::PassThrough;
                        continue;
                    }
                    let Some(len) = complete_frame_len(&self.incoming) else { return };
                    let frame: Vec<u8> = self.incoming.drain(..len).collect();
                    self.on_frame(frame);
                }
            }
        }
    }

    fn on_frame(&mut self, frame: Vec<u8>) {
        let kind = frame[3];
        let block = match &mut self.mode {
            Mode::Sniffing(block) => block,
            Mode::Rewrite(rewriter) => &mut rewriter.block,
            Mode::Preface | Mode::PassThrough => {
                self.outgoing.extend_from_slice(&frame);
                return;
            }
        };
        let accepted = match kind {
            HEADERS if !block.open => block.start(&frame),
            CONTINUATION if block.open && stream_id(&frame) == block.stream_id => block.extend(&frame),
            _ if block.open => false,
            _ => {
                self.outgoing.extend_from_slice(&frame);
                return;
            }
        };
        if !accepted || block.raw.len() > MAX_BLOCK {
            // Not something this adapter understands: hand everything over as it came and let
            // the HTTP/2 server judge it.
            let raw = std::mem::take(&mut block.raw);
            self.outgoing.extend_from_slice(&raw);
            self.mode = Mode::PassThrough;
            return;
        }
        if frame[4] & END_HEADERS == 0 {
            return;
        }
        let block = std::mem::take(block);
        match std::mem::replace(&mut self.mode, Mode::PassThrough) {
            Mode::Sniffing(_) => {
                let mut rewriter = Box::new(Rewriter::new());
                match rewriter.decode(&block.fragment) {
                    Some(headers) if needs_fix(&headers) => {
                        rewriter.emit(&block, headers, &mut self.outgoing);
                        self.mode = Mode::Rewrite(rewriter);
                    }
                    // Valid, or undecodable: the server sees the block as it came, and so
                    // does every later byte.
                    _ => self.outgoing.extend_from_slice(&block.raw),
                }
            }
            Mode::Rewrite(mut rewriter) => match rewriter.decode(&block.fragment) {
                Some(headers) => {
                    rewriter.emit(&block, headers, &mut self.outgoing);
                    self.mode = Mode::Rewrite(rewriter);
                }
                // The client's HPACK state is unknown from here: the server will say so.
                None => self.outgoing.extend_from_slice(&block.raw),
            },
            Mode::Preface | Mode::PassThrough => self.outgoing.extend_from_slice(&block.raw),
        }
    }
}

// === impl Block ===

impl Block {
    /// Takes a HEADERS frame; false if its layout is invalid.
    fn start(&mut self, frame: &[u8]) -> bool {
        let flags = frame[4];
        let mut payload = &frame[FRAME_HEADER_LEN..];
        let mut pad = 0;
        if flags & PADDED != 0 {
            let Some((&len, rest)) = payload.split_first() else { return false };
            pad = usize::from(len);
            payload = rest;
        }
        if flags & PRIORITY != 0 {
            let Some(fields) = payload.get(..5) else { return false };
            self.priority = fields.try_into().ok();
            payload = &payload[5..];
        }
        let Some(fragment) = payload.len().checked_sub(pad).map(|end| &payload[..end]) else { return false };
        self.fragment.extend_from_slice(fragment);
        self.raw.extend_from_slice(frame);
        self.end_stream = flags & END_STREAM != 0;
        self.stream_id = stream_id(frame);
        self.open = true;
        true
    }

    fn extend(&mut self, frame: &[u8]) -> bool {
        self.fragment.extend_from_slice(&frame[FRAME_HEADER_LEN..]);
        self.raw.extend_from_slice(frame);
        true
    }
}

// === impl Rewriter ===

impl Rewriter {
    fn new() -> Rewriter {
        let mut decoder = loona_hpack::Decoder::new();
        decoder.set_max_allowed_table_size(HEADER_TABLE_SIZE);
        Rewriter { decoder, encoder: loona_hpack::Encoder::new(), block: Block::default() }
    }

    fn decode(&mut self, fragment: &[u8]) -> Option<Vec<(Vec<u8>, Vec<u8>)>> {
        self.decoder.decode(fragment).ok()
    }

    /// Encodes `headers` (with a valid `:authority`) as a HEADERS frame and CONTINUATIONs.
    fn emit(&mut self, block: &Block, mut headers: Vec<(Vec<u8>, Vec<u8>)>, out: &mut Vec<u8>) {
        for (name, value) in &mut headers {
            if name == b":authority" && !valid_authority(value) {
                *value = LOCALHOST.to_vec();
            }
        }
        let mut payload = Vec::new();
        if let Some(priority) = block.priority {
            payload.extend_from_slice(&priority);
        }
        payload.extend(self.encoder.encode(headers.iter().map(|(name, value)| (name.as_slice(), value.as_slice()))));
        let chunks: Vec<&[u8]> = if payload.is_empty() { vec![&[][..]] } else { payload.chunks(MAX_FRAME).collect() };
        let last = chunks.len() - 1;
        for (idx, chunk) in chunks.into_iter().enumerate() {
            let (kind, mut flags) = if idx == 0 { (HEADERS, if block.end_stream { END_STREAM } else { 0 }) } else { (CONTINUATION, 0) };
            if idx == 0 && block.priority.is_some() {
                flags |= PRIORITY;
            }
            if idx == last {
                flags |= END_HEADERS;
            }
            let len = u32::try_from(chunk.len()).unwrap_or(u32::MAX).to_be_bytes();
            out.extend_from_slice(&[len[1], len[2], len[3], kind, flags]);
            out.extend_from_slice(&block.stream_id.to_be_bytes());
            out.extend_from_slice(chunk);
        }
    }
}

/// The payload length the frame at the start of `buf` declares, once its header is there.
fn declared_frame_len(buf: &[u8]) -> Option<usize> {
    let header = buf.get(..FRAME_HEADER_LEN)?;
    Some(usize::from(header[0]) << 16 | usize::from(header[1]) << 8 | usize::from(header[2]))
}

/// The length of the complete frame at the start of `buf`, if it is all there.
fn complete_frame_len(buf: &[u8]) -> Option<usize> {
    let total = FRAME_HEADER_LEN + declared_frame_len(buf)?;
    (buf.len() >= total).then_some(total)
}

fn stream_id(frame: &[u8]) -> u32 {
    u32::from_be_bytes([frame[5] & 0x7f, frame[6], frame[7], frame[8]])
}

fn valid_authority(value: &[u8]) -> bool {
    http::uri::Authority::try_from(value).is_ok()
}

fn needs_fix(headers: &[(Vec<u8>, Vec<u8>)]) -> bool {
    headers.iter().any(|(name, value)| name == b":authority" && !valid_authority(value))
}

/// The kernel's word on who connected, read once per connection and attached to every request.
impl tonic::transport::server::Connected for AuthorityFix<tokio::net::UnixStream> {
    type ConnectInfo = crate::door::model::PeerInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        crate::door::model::PeerInfo(crate::door::model::UnixPeer::of(&self.inner))
    }
}

// === impl AsyncRead / AsyncWrite ===

impl<S: AsyncRead + Unpin> AsyncRead for AuthorityFix<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.outgoing_read < this.outgoing.len() {
                let available = &this.outgoing[this.outgoing_read..];
                let n = available.len().min(buf.remaining());
                buf.put_slice(&available[..n]);
                this.outgoing_read += n;
                if this.outgoing_read == this.outgoing.len() {
                    this.outgoing.clear();
                    this.outgoing_read = 0;
                }
                return Poll::Ready(Ok(()));
            }
            if matches!(this.mode, Mode::PassThrough) && this.incoming.is_empty() {
                return Pin::new(&mut this.inner).poll_read(cx, buf);
            }
            if this.eof {
                // A partial frame at the end of the stream goes through as it is.
                this.outgoing.append(&mut this.incoming);
                if this.outgoing.is_empty() {
                    return Poll::Ready(Ok(()));
                }
                continue;
            }
            let mut chunk = [0u8; 16 * 1024];
            let mut read = ReadBuf::new(&mut chunk);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut read))?;
            if read.filled().is_empty() {
                this.eof = true;
            } else {
                this.incoming.extend_from_slice(read.filled());
                this.process();
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for AuthorityFix<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, data)
    }

    fn poll_write_vectored(self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncReadExt;

    use super::*;

    const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let len = (payload.len() as u32).to_be_bytes();
        let mut out = vec![len[1], len[2], len[3], kind, flags];
        out.extend_from_slice(&stream.to_be_bytes());
        out.extend_from_slice(payload);
        out
    }

    fn headers(authority: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
        [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", "/toolhost.v1.ToolHost/ListServers"),
            (":authority", authority),
            ("te", "trailers"),
        ]
        .iter()
        .map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec()))
        .collect()
    }

    /// Runs `input` through the adapter, read `step` bytes at a time.
    async fn run(input: Vec<u8>, step: usize) -> Vec<u8> {
        let (mut client, server) = tokio::io::duplex(1 << 20);
        let writer = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            for chunk in input.chunks(step) {
                client.write_all(chunk).await.unwrap();
            }
        });
        let mut fixed = AuthorityFix::new(server);
        let mut out = Vec::new();
        let mut buf = vec![0u8; 7];
        writer.await.unwrap();
        loop {
            let n = tokio::time::timeout(std::time::Duration::from_millis(200), fixed.read(&mut buf)).await;
            match n {
                Ok(Ok(0)) | Err(_) => return out,
                Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
                Ok(Err(error)) => panic!("{error}"),
            }
        }
    }

    /// Decodes every header block in `bytes` (after the preface) with a fresh HPACK decoder.
    fn decoded_blocks(bytes: &[u8]) -> Vec<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut rest = &bytes[PREFACE_LEN..];
        let mut decoder = loona_hpack::Decoder::new();
        let mut blocks = Vec::new();
        let mut fragment = Vec::new();
        while let Some(len) = complete_frame_len(rest) {
            let (frame, after) = rest.split_at(len);
            if frame[3] == HEADERS || frame[3] == CONTINUATION {
                fragment.extend_from_slice(&frame[FRAME_HEADER_LEN..]);
                if frame[4] & END_HEADERS != 0 {
                    blocks.push(decoder.decode(&std::mem::take(&mut fragment)).unwrap());
                }
            }
            rest = after;
        }
        blocks
    }

    fn authority(block: &[(Vec<u8>, Vec<u8>)]) -> String {
        block.iter().find(|(n, _)| n == b":authority").map(|(_, v)| String::from_utf8_lossy(v).into_owned()).unwrap_or_default()
    }

    #[tokio::test]
    async fn a_percent_encoded_socket_path_becomes_localhost_in_every_block() {
        let mut encoder = loona_hpack::Encoder::new();
        let mut input = PREFACE.to_vec();
        input.extend(frame(0x4, 0, 0, &[])); // SETTINGS
        for stream in [1, 3, 5] {
            let block = encoder.encode(headers("tmp%2Fg18%2Fth.sock").iter().map(|(n, v)| (n.as_slice(), v.as_slice())));
            input.extend(frame(HEADERS, END_HEADERS, stream, &block));
            input.extend(frame(0x0, END_STREAM, stream, b"\0\0\0\0\0"));
        }
        for step in [1, 5, 4096] {
            let out = run(input.clone(), step).await;
            let blocks = decoded_blocks(&out);
            assert_eq!(blocks.len(), 3, "step {step}");
            assert!(blocks.iter().all(|b| authority(b) == "localhost"), "step {step}");
            assert!(blocks.iter().all(|b| b.iter().any(|(n, v)| n == b":path" && v.ends_with(b"ListServers"))));
        }
    }

    #[tokio::test]
    async fn a_valid_authority_passes_the_connection_through_untouched() {
        let mut encoder = loona_hpack::Encoder::new();
        let mut input = PREFACE.to_vec();
        let block = encoder.encode(headers("localhost").iter().map(|(n, v)| (n.as_slice(), v.as_slice())));
        // Padded, with a priority, split over a CONTINUATION.
        let (first, second) = block.split_at(block.len() / 2);
        let mut payload = vec![3u8];
        payload.extend_from_slice(&[0, 0, 0, 0, 16]);
        payload.extend_from_slice(first);
        payload.extend_from_slice(&[0, 0, 0]);
        input.extend(frame(HEADERS, PADDED | PRIORITY, 1, &payload));
        input.extend(frame(CONTINUATION, END_HEADERS, 1, second));
        input.extend(frame(0x0, END_STREAM, 1, b"data"));
        assert_eq!(run(input.clone(), 3).await, input);
    }

    #[tokio::test]
    async fn an_oversized_frame_is_never_buffered() {
        let mut input = PREFACE.to_vec();
        // A 16 MiB DATA frame announced, of which only the start is sent.
        input.extend_from_slice(&[0xff, 0xff, 0xff, 0x0, 0x0, 0, 0, 0, 1]);
        input.extend_from_slice(&[7u8; 1000]);
        assert_eq!(run(input.clone(), 64).await, input, "passed through as it came");
    }

    #[tokio::test]
    async fn garbage_goes_through_for_the_server_to_refuse() {
        let mut input = PREFACE.to_vec();
        input.extend(frame(HEADERS, END_HEADERS, 1, &[0xff, 0xff, 0xff, 0xff]));
        input.extend_from_slice(b"trailing bytes of no frame");
        assert_eq!(run(input.clone(), 10).await, input);
    }
}
