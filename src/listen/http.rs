//! What the HTTP front doors (the MCP endpoint, the console) share: the response body type and
//! server-sent event streams whose feeder lives inside the body.

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Response, header};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use tokio::sync::mpsc;
use tokio_stream::StreamExt;

/// Every response body the front doors send.
pub type Body = UnsyncBoxBody<Bytes, Infallible>;

/// SSE comments on an idle stream, so that proxies and clients see it alive.
const KEEPALIVE: Duration = Duration::from_secs(15);

pub type Feeder = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// An SSE response carrying `lines` as events named `event`. `feeder` (what sends them) runs as
/// part of the body: when the client closes the stream, the body is dropped and the feeder
/// with it (a call still running is cancelled upstream).
pub fn sse(lines: mpsc::Receiver<String>, event: &'static str, feeder: Option<Feeder>) -> Response<Body> {
    let keepalive = tokio::time::interval_at(tokio::time::Instant::now() + KEEPALIVE, KEEPALIVE);
    let events = EventStream { feeder, lines, event, keepalive };
    let body = StreamBody::new(events.map(|bytes| Ok::<_, Infallible>(Frame::data(bytes))));
    let mut response = Response::new(BodyExt::boxed_unsync(body));
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

/// The events of an SSE response: each line from `lines`, keep-alive comments while idle, and
/// the end once the feeder is done and every line is out.
struct EventStream {
    feeder: Option<Feeder>,
    lines: mpsc::Receiver<String>,
    event: &'static str,
    keepalive: tokio::time::Interval,
}

impl tokio_stream::Stream for EventStream {
    type Item = Bytes;

    fn poll_next(self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Option<Bytes>> {
        use std::task::Poll;
        let this = self.get_mut();
        if let Some(feeder) = this.feeder.as_mut()
            && feeder.as_mut().poll(cx).is_ready()
        {
            // Dropping the feeder drops its sender: the lines end once drained.
            this.feeder = None;
        }
        match this.lines.poll_recv(cx) {
            Poll::Ready(Some(line)) => {
                this.keepalive.reset();
                return Poll::Ready(Some(Bytes::from(format!("event: {}\ndata: {}\n\n", this.event, line.trim_end()))));
            }
            Poll::Ready(None) => return Poll::Ready(None),
            Poll::Pending => {}
        }
        match this.keepalive.poll_tick(cx) {
            Poll::Ready(_) => Poll::Ready(Some(Bytes::from_static(b": keep-alive\n\n"))),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// How long a connection being closed at shutdown has to finish what it is answering.
const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// Serves one HTTP/1.1 connection until the client closes it or `cancel`; at `cancel` the
/// connection finishes the exchange in progress (at most [`CLOSE_GRACE`]) and closes.
pub async fn serve_connection<I, S>(io: I, service: S, header_timeout: Duration, cancel: &tokio_util::sync::CancellationToken)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    S: hyper::service::Service<http::Request<hyper::body::Incoming>, Response = Response<Body>>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(header_timeout)
        .serve_connection(hyper_util::rt::TokioIo::new(io), service);
    tokio::pin!(connection);
    tokio::select! {
        _ = connection.as_mut() => {}
        () = cancel.cancelled() => {
            connection.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(CLOSE_GRACE, connection).await;
        }
    }
}
