//! What a client command tells an operator when it fails: the error, its exit code, its JSON
//! form for `--json`, and what to do about it where toolhost knows (a held tool's commands, "did
//! you mean", the socket for a caller refused over TCP).

use crate::config::ListenAddr;

pub const EXIT_TOOL_ERROR: u8 = 1;
pub const EXIT_USAGE: u8 = 2;
pub const EXIT_RPC_ERROR: u8 = 3;
pub const EXIT_CONFIG: u8 = 64;

/// Why a client command failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error("cannot reach toolhost at {addr}: {reason}")]
    Connect { addr: String, reason: String },
    #[error("{}", describe_status(.0))]
    Rpc(#[from] tonic::Status),
    /// An RPC error and what to do about it.
    #[error("{}\n{hint}", describe_status(status))]
    Hinted { status: Box<tonic::Status>, hint: String },
    #[error("the tool reported an error")]
    ToolError,
    #[error(transparent)]
    Login(#[from] super::login::LoginError),
    #[error("cannot write the output: {0}")]
    Output(#[from] std::io::Error),
}

impl ClientError {
    pub fn exit_code(&self) -> u8 {
        match self {
            ClientError::Usage(_) => EXIT_USAGE,
            ClientError::Config(_) => EXIT_CONFIG,
            ClientError::Connect { .. } | ClientError::Rpc(_) | ClientError::Hinted { .. } | ClientError::Output(_) => EXIT_RPC_ERROR,
            ClientError::ToolError | ClientError::Login(_) => EXIT_TOOL_ERROR,
        }
    }

    /// The error as a `--json` caller's script reads it (on stdout, beside the message on stderr).
    pub fn json(&self) -> serde_json::Value {
        use tonic_types::StatusExt;
        let kind = match self {
            ClientError::Usage(_) => "usage",
            ClientError::Config(_) => "config",
            ClientError::Connect { .. } => "connect",
            ClientError::Rpc(_) | ClientError::Hinted { .. } => "rpc",
            ClientError::ToolError => "tool_error",
            ClientError::Login(_) => "login",
            ClientError::Output(_) => "output",
        };
        let mut error = serde_json::json!({"kind": kind, "message": self.to_string(), "exit_code": self.exit_code()});
        let status = match self {
            ClientError::Rpc(status) => Some(status),
            ClientError::Hinted { status, hint } => {
                error["hint"] = hint.clone().into();
                Some(&**status)
            }
            _ => None,
        };
        if let Some(status) = status {
            error["code"] = code_name(status.code()).into();
            error["message"] = status.message().into();
            if let Some(info) = status.get_details_error_info() {
                error["reason"] = info.reason.into();
                error["details"] = serde_json::json!(info.metadata);
            }
        }
        serde_json::json!({ "error": error })
    }
}

/// `NOT_FOUND (UNKNOWN_TOOL): no tool "x" [server=a tool=x]`: the code, toolhost's reason
/// (unless it is the code again) and the details (if any), so that scripts can match on the
/// first two words.
fn describe_status(status: &tonic::Status) -> String {
    use tonic_types::StatusExt;
    let code = code_name(status.code());
    let Some(info) = status.get_details_error_info() else { return format!("{code}: {}", status.message()) };
    let reason = if info.reason == code || info.reason.is_empty() { String::new() } else { format!(" ({})", info.reason) };
    let mut metadata: Vec<String> = info.metadata.iter().filter(|(_, v)| !v.is_empty()).map(|(k, v)| format!("{k}={v}")).collect();
    metadata.sort();
    let details = if metadata.is_empty() { String::new() } else { format!(" [{}]", metadata.join(" ")) };
    format!("{code}{reason}: {}{details}", status.message())
}

/// `NotFound` as `NOT_FOUND`.
fn code_name(code: tonic::Code) -> String {
    format!("{code:?}").chars().fold(String::new(), |mut acc, c| {
        if c.is_uppercase() && !acc.is_empty() {
            acc.push('_');
        }
        acc.push(c.to_ascii_uppercase());
        acc
    })
}

/// What an operator can do about `status`, when toolhost knows: the commands that review and
/// approve a held tool, the socket for a caller refused over TCP.
pub(super) fn hint(status: &tonic::Status, addr: &ListenAddr) -> Option<String> {
    use tonic_types::StatusExt;
    let info = status.get_details_error_info();
    let reason = info.as_ref().map_or("", |info| info.reason.as_str());
    let fact = |key: &str| info.as_ref().and_then(|info| info.metadata.get(key).cloned()).unwrap_or_default();
    match reason {
        "DEFINITION_HELD" => {
            let (server, tool) = (fact("server"), fact("tool"));
            let offered = fact("offered_hash");
            let short = offered.get(..12).unwrap_or(&offered);
            Some(format!(
                "an operator reviews it with `toolhost diff {server} {tool}` and approves exactly that definition with `toolhost approve {server} {tool} --hash {short}`"
            ))
        }
        "UNAUTHENTICATED" if matches!(addr, ListenAddr::Tcp(_)) => Some(
            "over TCP a caller presents a token (TOOLHOST_TOKEN); on this host, the daemon's Unix socket identifies you without one (--addr unix:PATH, or --config)"
                .to_owned(),
        ),
        _ => None,
    }
}

/// The tool names closest to `wanted`, for "did you mean": at most three, each a likely typo of
/// it (edit distance) or containing it. Only names the caller may see are ever offered, so a
/// suggestion says nothing about tools it may not use.
pub(super) fn closest<'a>(wanted: &str, names: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let contains = |name: &str| wanted.len() >= 4 && name.contains(wanted);
    let mut scored: Vec<(f64, &str)> = names
        .map(|name| (strsim::normalized_damerau_levenshtein(wanted, name), name))
        .filter(|(score, name)| *score >= 0.75 || contains(name))
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(b.1)));
    scored.into_iter().take(3).map(|(_, name)| name).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_says_its_code_once_and_no_empty_details() {
        use tonic_types::{ErrorDetails, StatusExt};
        let status = |reason: &str, metadata: Vec<(&str, &str)>| {
            let metadata: std::collections::HashMap<String, String> =
                metadata.into_iter().map(|(k, v)| (k.to_owned(), v.to_owned())).collect();
            tonic::Status::with_error_details(
                tonic::Code::Unauthenticated,
                "no token",
                ErrorDetails::with_error_info(reason, "toolhost", metadata),
            )
        };
        assert_eq!(describe_status(&status("UNAUTHENTICATED", vec![])), "UNAUTHENTICATED: no token");
        assert_eq!(
            describe_status(&status("OTHER", vec![("b", "2"), ("a", "1"), ("c", "")])),
            "UNAUTHENTICATED (OTHER): no token [a=1 b=2]"
        );
        assert_eq!(describe_status(&tonic::Status::not_found("gone")), "NOT_FOUND: gone");
    }

    #[test]
    fn did_you_mean_finds_typos_and_parts() {
        let names = ["files__read_file", "files__write_file", "github__create_issue"];
        assert_eq!(closest("files__read_fle", names.into_iter()), ["files__read_file"]);
        assert_eq!(closest("create_issue", names.into_iter()), ["github__create_issue"]);
        assert!(closest("zzz", names.into_iter()).is_empty());
    }
}
