//! What is wrong with one value of the file, whatever key holds it: the shared checks (counts,
//! sizes, globs, names, listeners, sinks) say it as a [`ValueError`], and the section that
//! called them names the key (`KeyProblem`), which `ConfigError` completes with the file.

use std::path::PathBuf;

use super::MAX_SERVER_NAME_LEN;

/// How a `[audit] export` entry names its sink, when it names none (or two).
const GIVE_ONE_SINK: &str = "give one of file = \"/absolute/path\", unix = \"/absolute/path\", syslog = \"host:port\" \
                             (with tls = true and ca = \"/absolute/path\" for TLS) or otlp = \"http://host:port\"";

/// A value refused, in the words the operator reads after its key.
#[derive(Debug, thiserror::Error)]
pub enum ValueError {
    // --- numbers and sizes ---
    #[error("must be greater than 0")]
    Zero,
    #[error("{value} is below the smallest useful value, {floor}")]
    BelowFloor { value: u32, floor: u32 },
    #[error("{text:?} is not a size (\"512MiB\", \"2GiB\")")]
    NotASize { text: String },
    #[error("{text:?} is below the smallest useful size, {} MiB", floor >> 20)]
    SizeBelowFloor { text: String, floor: u64 },

    // --- names and globs ---
    #[error("a server name must be 1 to {} characters of letters, digits, '_' and '-'", MAX_SERVER_NAME_LEN)]
    ServerNameChars,
    #[error("a server name must not contain \"__\" or end with '_' (it prefixes tool names as SERVER__TOOL)")]
    ServerNameSeparator,
    #[error("{text:?} is not \"accept\" or \"hold\"")]
    NotHoldOrAccept { text: String },
    #[error("{pattern:?} is not a glob of letters, digits, _ - . @ : * and ?")]
    NotAGlob { pattern: String },
    #[error("{pattern:?} names the server {server:?}, which is not configured")]
    UnknownServer { pattern: String, server: String },
    #[error("{text:?} is not host[:port] (\"api.github.com:443\", \"*.example.com\", \"10.0.0.5:8080\")")]
    NotAHost { text: String },
    #[error("must be a non-empty token of visible ASCII characters")]
    NotAToken,

    // --- listeners ---
    #[error("a unix: address needs a path")]
    UnixWithoutPath,
    #[error("{addr:?} is neither unix:/path nor host:port with a numeric IP")]
    NotAnAddress { addr: String },
    #[error("tls applies to TCP listeners, not unix: sockets")]
    TlsOnUnix,
    #[error("tls: cannot read {}: {source}", path.display())]
    TlsFile { path: PathBuf, source: std::io::Error },
    #[error(
        "{address:?} is not a loopback address: tool calls run with the daemon's privileges, so off loopback the API \
         needs tls = {{ cert, key, client_ca }} (or use a Unix socket)"
    )]
    OffLoopback { address: String },
    #[error("mode and group apply to unix: sockets only")]
    ModeOnTcp,
    #[error("mode {mode:?} is not octal permission bits like \"0660\"")]
    NotAMode { mode: String },
    #[error("mode {mode:?} leaves the daemon's own user unable to use its socket")]
    ModeLocksOutOwner { mode: String },
    #[error("there is no group {group:?} on this machine")]
    NoSuchGroup { group: String },
    #[error("cannot look up the group {group:?}: {source}")]
    GroupLookup { group: String, source: nix::Error },

    // --- audit export sinks ---
    #[error("tls and ca apply to a syslog sink only")]
    TlsWithoutSyslog,
    #[error("{}", GIVE_ONE_SINK)]
    NoSink,
    #[error("syslog = {addr:?} is not host:port")]
    NotSyslogAddress { addr: String },
    #[error("ca = {path:?} is not an absolute path")]
    CaNotAbsolute { path: String },
    #[error("ca is for TLS: add tls = true")]
    CaWithoutTls,
    #[error("otlp = {endpoint:?} is not http://host:port (a collector's OTLP/gRPC endpoint)")]
    NotOtlpEndpoint { endpoint: String },
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The words an operator reads (and scripts may match) stay as they were written before
    /// the checks were typed.
    #[test]
    fn each_refusal_reads_as_before() {
        let io = || std::io::Error::from(std::io::ErrorKind::NotFound);
        let cases = [
            (ValueError::Zero, "must be greater than 0".to_owned()),
            (ValueError::BelowFloor { value: 1, floor: 2 }, "1 is below the smallest useful value, 2".to_owned()),
            (ValueError::NotASize { text: "lots".into() }, r#""lots" is not a size ("512MiB", "2GiB")"#.to_owned()),
            (
                ValueError::SizeBelowFloor { text: "1K".into(), floor: 16 << 20 },
                r#""1K" is below the smallest useful size, 16 MiB"#.to_owned(),
            ),
            (
                ValueError::ServerNameChars,
                format!("a server name must be 1 to {MAX_SERVER_NAME_LEN} characters of letters, digits, '_' and '-'"),
            ),
            (
                ValueError::NotAHost { text: "a b".into() },
                r#""a b" is not host[:port] ("api.github.com:443", "*.example.com", "10.0.0.5:8080")"#.to_owned(),
            ),
            (ValueError::TlsFile { path: "/x/cert.pem".into(), source: io() }, format!("tls: cannot read /x/cert.pem: {}", io())),
            (
                ValueError::OffLoopback { address: "0.0.0.0:1".into() },
                "\"0.0.0.0:1\" is not a loopback address: tool calls run with the daemon's privileges, so off loopback the API needs \
                 tls = { cert, key, client_ca } (or use a Unix socket)"
                    .to_owned(),
            ),
            (ValueError::NotAMode { mode: "9".into() }, r#"mode "9" is not octal permission bits like "0660""#.to_owned()),
            (ValueError::NoSink, GIVE_ONE_SINK.to_owned()),
        ];
        for (error, expected) in cases {
            assert_eq!(error.to_string(), expected);
        }
    }
}
