//! Questions toolhost puts to a 2025-era client on its session: when an upstream answers a call
//! with `input_required` (2026-07-28 multi-round-trip requests) and the client cannot read that
//! result shape, toolhost sends it each input request (`elicitation/create`, `sampling/createMessage`,
//! `roots/list`) as a request of its own, as a 2025 server would, and routes the client's
//! responses back to the waiting call.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::sync::{mpsc, oneshot};

use super::reply;

/// How long a client has to answer one question (a person may be answering it).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(300);
/// Questions one session may have unanswered at once.
const MAX_WAITING: usize = 64;
/// Questions of one round toolhost puts to a client; a server asking more is refused.
const MAX_QUESTIONS: usize = 16;
/// Longest capabilities object kept from `initialize`.
const MAX_CAPABILITIES_BYTES: usize = 16 << 10;

/// One session's channel for questions to its client.
#[derive(Default)]
pub struct ClientLink {
    /// What the client declared in `initialize`, read once.
    declared: Mutex<Option<Declaration>>,
    next_id: AtomicU64,
    waiting: Mutex<HashMap<String, oneshot::Sender<Answer>>>,
}

/// What a client answered: its `result`, or its `error`, raw.
type Answer = Result<Box<RawValue>, Box<RawValue>>;

/// Why a question could not be put or was not answered.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AskError {
    #[error(
        "the server needs input ({method}) that this client did not declare it can give ({capability}); a 2026-07-28 client gets the questions as an input_required result"
    )]
    NotCapable { method: String, capability: &'static str },
    #[error("the server's inputRequests are not a JSON object of at most {MAX_QUESTIONS} {{method, params}} entries")]
    Malformed,
    #[error("this transport cannot carry questions to the client (use the SSE response: Accept: text/event-stream)")]
    NoChannel,
    #[error("the client did not answer the server's question ({0}) in time")]
    Timeout(String),
    #[error("the client answered the server's question ({method}) with an error: {error}")]
    Refused { method: String, error: String },
    #[error("the client went away before answering")]
    Gone,
    #[error("too many questions are waiting for this client")]
    TooMany,
}

#[derive(Deserialize)]
struct InputRequest<'a> {
    #[serde(borrow)]
    method: std::borrow::Cow<'a, str>,
    #[serde(borrow, default)]
    params: Option<&'a RawValue>,
}

#[derive(Deserialize, Default)]
struct Declared<'a> {
    #[serde(borrow, default)]
    elicitation: Option<&'a RawValue>,
    #[serde(borrow, default)]
    sampling: Option<&'a RawValue>,
    #[serde(borrow, default)]
    roots: Option<&'a RawValue>,
}

/// A client's `capabilities` as JSON (told to a 2026 server), and which of them toolhost can
/// put a question under.
struct Declaration {
    raw: Arc<RawValue>,
    elicitation: bool,
    sampling: bool,
    roots: bool,
}

impl ClientLink {
    /// Keeps the `capabilities` of a client's `initialize` params.
    pub fn declare(&self, initialize_params: Option<&RawValue>) {
        #[derive(Deserialize)]
        struct Initialize<'a> {
            #[serde(borrow, default)]
            capabilities: Option<&'a RawValue>,
        }
        let declaration = initialize_params
            .and_then(|params| serde_json::from_str::<Initialize<'_>>(params.get()).ok())
            .and_then(|init| init.capabilities)
            .filter(|caps| caps.get().len() <= MAX_CAPABILITIES_BYTES && caps.get().starts_with('{'))
            .map(|caps| {
                let declared = serde_json::from_str::<Declared<'_>>(caps.get()).unwrap_or_default();
                Declaration {
                    raw: Arc::from(caps.to_owned()),
                    elicitation: declared.elicitation.is_some(),
                    sampling: declared.sampling.is_some(),
                    roots: declared.roots.is_some(),
                }
            });
        *self.declared.lock().unwrap_or_else(PoisonError::into_inner) = declaration;
    }

    /// The declared capabilities, to tell a 2026 server what this client can answer.
    pub fn capabilities(&self) -> Option<Arc<RawValue>> {
        self.declared.lock().unwrap_or_else(PoisonError::into_inner).as_ref().map(|declared| declared.raw.clone())
    }

    /// Whether the client declared any capability toolhost could put a question under.
    pub fn can_be_asked(&self) -> bool {
        self.declared.lock().unwrap_or_else(PoisonError::into_inner).as_ref().is_some_and(|d| d.elicitation || d.sampling || d.roots)
    }

    /// Puts every input request of `requests` to the client, in turn, on `out`, and returns
    /// `inputResponses`: the client's results under the same keys.
    ///
    /// # Errors
    /// [`AskError`]; nothing is asked when a capability is missing.
    pub async fn ask_all(&self, out: Option<&mpsc::Sender<String>>, requests: &RawValue) -> Result<String, AskError> {
        let requests: HashMap<String, InputRequest<'_>> = serde_json::from_str(requests.get()).map_err(|_| AskError::Malformed)?;
        if requests.len() > MAX_QUESTIONS {
            return Err(AskError::Malformed);
        }
        for request in requests.values() {
            self.check_capable(&request.method)?;
        }
        let out = out.ok_or(AskError::NoChannel)?;
        let mut responses = serde_json::Map::new();
        for (key, request) in requests {
            let result = self.ask(out, &request.method, request.params).await?;
            let value: serde_json::Value = serde_json::from_str(result.get()).map_err(|_| AskError::Malformed)?;
            responses.insert(key, value);
        }
        Ok(serde_json::Value::Object(responses).to_string())
    }

    fn check_capable(&self, method: &str) -> Result<(), AskError> {
        let capability = match method {
            "elicitation/create" => "elicitation",
            "sampling/createMessage" => "sampling",
            "roots/list" => "roots",
            _ => return Err(AskError::NotCapable { method: reply::clip(method).to_owned(), capability: "none known" }),
        };
        let declared = self.declared.lock().unwrap_or_else(PoisonError::into_inner);
        let has = declared.as_ref().is_some_and(|d| match capability {
            "elicitation" => d.elicitation,
            "sampling" => d.sampling,
            _ => d.roots,
        });
        if has { Ok(()) } else { Err(AskError::NotCapable { method: method.to_owned(), capability }) }
    }

    async fn ask(&self, out: &mpsc::Sender<String>, method: &str, params: Option<&RawValue>) -> Result<Box<RawValue>, AskError> {
        let id = format!("\"toolhost-{}\"", self.next_id.fetch_add(1, Ordering::Relaxed));
        let (tx, rx) = oneshot::channel();
        {
            let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
            if waiting.len() >= MAX_WAITING {
                return Err(AskError::TooMany);
            }
            waiting.insert(id.clone(), tx);
        }
        let method_json = serde_json::to_string(method).map_err(|_| AskError::Malformed)?;
        let line = match params {
            Some(params) => format!(r#"{{"jsonrpc":"2.0","id":{id},"method":{method_json},"params":{}}}"#, params.get()) + "\n",
            None => format!(r#"{{"jsonrpc":"2.0","id":{id},"method":{method_json}}}"#) + "\n",
        };
        let answered = match out.send(line).await {
            Err(_) => Err(AskError::Gone),
            Ok(()) => match tokio::time::timeout(ANSWER_TIMEOUT, rx).await {
                Ok(Ok(Ok(result))) => Ok(result),
                Ok(Ok(Err(error))) => Err(AskError::Refused { method: method.to_owned(), error: reply::clip(error.get()).to_owned() }),
                Ok(Err(_)) => Err(AskError::Gone),
                Err(_) => Err(AskError::Timeout(method.to_owned())),
            },
        };
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner).remove(&id);
        answered
    }

    /// Routes a client's response to the question waiting for it; other responses are ignored.
    pub fn on_response(&self, id: Option<&RawValue>, result: Option<&RawValue>, error: Option<&RawValue>) {
        let Some(id) = id else { return };
        let Some(waiting) = self.waiting.lock().unwrap_or_else(PoisonError::into_inner).remove(id.get()) else { return };
        let answer = match (result, error) {
            (Some(result), _) => Ok(result.to_owned()),
            (None, Some(error)) => Err(error.to_owned()),
            (None, None) => return,
        };
        let _ = waiting.send(answer);
    }
}

/// The error for a call whose server needs input the client could not give.
pub(super) fn ask_error(id: &RawValue, problem: &AskError) -> String {
    let reason = match problem {
        AskError::NotCapable { .. } | AskError::NoChannel => "INPUT_REQUIRED_UNSUPPORTED",
        _ => "INPUT_REQUIRED_UNANSWERED",
    };
    reply::error(id, reply::SERVER_ERROR, &problem.to_string(), Some(&reply::reason_data(reason, &[])))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(text: &str) -> Box<RawValue> {
        RawValue::from_string(text.to_owned()).unwrap()
    }

    #[tokio::test]
    async fn a_question_goes_out_with_an_id_of_its_own_and_its_answer_comes_back() {
        let link = std::sync::Arc::new(ClientLink::default());
        link.declare(Some(&raw(r#"{"capabilities":{"elicitation":{}}}"#)));
        assert!(link.can_be_asked());
        let (out, mut sent) = mpsc::channel(4);
        let requests = raw(r#"{"q":{"method":"elicitation/create","params":{"message":"ok?"}}}"#);
        let asking = {
            let link = link.clone();
            tokio::spawn(async move { link.ask_all(Some(&out), &requests).await })
        };
        let line = sent.recv().await.unwrap();
        let question: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(question["method"], "elicitation/create");
        assert_eq!(question["params"]["message"], "ok?");
        let id = raw(&question["id"].to_string());
        link.on_response(Some(&raw(r#""someone-else""#)), Some(&raw("{}")), None);
        link.on_response(Some(&id), Some(&raw(r#"{"action":"accept"}"#)), None);
        assert_eq!(asking.await.unwrap().unwrap(), r#"{"q":{"action":"accept"}}"#);
    }

    #[tokio::test]
    async fn nothing_is_asked_that_the_client_did_not_declare() {
        let link = ClientLink::default();
        link.declare(Some(&raw(r#"{"capabilities":{"roots":{}}}"#)));
        let (out, mut sent) = mpsc::channel(4);
        let asked = link.ask_all(Some(&out), &raw(r#"{"a":{"method":"roots/list"},"b":{"method":"sampling/createMessage"}}"#)).await;
        assert_eq!(asked.unwrap_err(), AskError::NotCapable { method: "sampling/createMessage".into(), capability: "sampling" });
        assert!(sent.try_recv().is_err(), "not even the question it could answer");
        assert_eq!(link.ask_all(Some(&out), &raw("[1]")).await.unwrap_err(), AskError::Malformed);
        let many: serde_json::Map<String, serde_json::Value> =
            (0..=MAX_QUESTIONS).map(|i| (i.to_string(), serde_json::json!({"method": "roots/list"}))).collect();
        let many = raw(&serde_json::Value::Object(many).to_string());
        assert_eq!(link.ask_all(Some(&out), &many).await.unwrap_err(), AskError::Malformed);
        assert!(!ClientLink::default().can_be_asked());
    }
}
