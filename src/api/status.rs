//! The one place where errors become gRPC statuses. Each status carries a `google.rpc.ErrorInfo`
//! (domain `toolhost`) whose reason is stable and whose metadata names the server, the tool and
//! the generations involved.

use std::collections::HashMap;

use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

use crate::door::SearchError;
use crate::door::approvals::DecideError;
use crate::door::error::{DoorError, Kind};
use crate::door::model::{CallError, Refusal, redact_owned};
use crate::door::tasks::TaskError;

const DOMAIN: &str = "toolhost";

/// The gRPC code of each kind of failure: the door classified it, this says it in gRPC's words.
fn code_of(kind: Kind) -> Code {
    match kind {
        Kind::InvalidArgument => Code::InvalidArgument,
        Kind::NotFound => Code::NotFound,
        Kind::FailedPrecondition => Code::FailedPrecondition,
        Kind::PermissionDenied => Code::PermissionDenied,
        Kind::Unauthenticated => Code::Unauthenticated,
        Kind::ResourceExhausted => Code::ResourceExhausted,
        Kind::Unavailable => Code::Unavailable,
        Kind::DeadlineExceeded => Code::DeadlineExceeded,
        Kind::Upstream => Code::Unknown,
        Kind::Internal => Code::Internal,
    }
}

impl From<DoorError> for Status {
    fn from(error: DoorError) -> Status {
        let mut status = status(code_of(error.kind), error.message, error.reason, error.facts);
        if let Some(retry_after) = error.retry_after {
            // RetryInfo beside the ErrorInfo: what gRPC clients' retry policies read.
            let mut details = status.get_error_details();
            details.set_retry_info(Some(retry_after));
            status = Status::with_error_details(status.code(), status.message().to_owned(), details);
        }
        status
    }
}

/// Every failure a door method returns becomes a status through [`DoorError`].
macro_rules! through_the_door {
    ($($error:ty),*) => {$(
        impl From<$error> for Status {
            fn from(error: $error) -> Status {
                DoorError::from(error).into()
            }
        }
    )*};
}

through_the_door!(CallError, Refusal, TaskError, DecideError, SearchError);

/// Whether a status is toolhost's or the server's failure rather than the caller's (the span
/// of a request refused before its call is judged by it).
pub(super) fn is_fault(code: Code) -> bool {
    matches!(code, Code::Unknown | Code::DeadlineExceeded | Code::Unimplemented | Code::Internal | Code::Unavailable | Code::DataLoss)
}

/// Longest message, and longest metadata value, a status carries: errors echo caller input (a
/// tool name) and upstream text, and a status must stay well inside a client's metadata limit.
const MAX_MESSAGE_BYTES: usize = 1024;
const MAX_METADATA_VALUE_BYTES: usize = 256;

fn status(code: Code, message: String, reason: &str, metadata: Vec<(&'static str, String)>) -> Status {
    // Scrubbed again at the door: whatever an upstream echoed, no secret leaves in a status.
    let clean = |text: String, max: usize| truncate(redact_owned(text), max);
    let metadata: HashMap<String, String> = metadata.into_iter().map(|(k, v)| (k.to_owned(), clean(v, MAX_METADATA_VALUE_BYTES))).collect();
    Status::with_error_details(code, clean(message, MAX_MESSAGE_BYTES), ErrorDetails::with_error_info(reason, DOMAIN, metadata))
}

pub(crate) use crate::door::truncate;

/// A gRPC status code as the RPC conventions name it in `rpc.response.status_code`.
pub(super) fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echoed_input_is_cut_to_a_bound() {
        let status = Status::from(CallError::UnknownTool { server: None, tool: "é".repeat(500_000) });
        assert!(status.message().len() <= MAX_MESSAGE_BYTES);
        let (_, metadata) = {
            let info = status.get_details_error_info().unwrap();
            (info.reason, info.metadata)
        };
        assert!(metadata["tool"].len() <= MAX_METADATA_VALUE_BYTES && metadata["tool"].ends_with('…'));
        assert_eq!(truncate("short".to_owned(), 10), "short");
    }
}
