//! The page around every view (navigation, who is signed in, the live region the catalog watch
//! refreshes) and the helpers views render text with. maud escapes everything interpolated, so
//! a tool's description or a server's error is text, never markup.

use maud::{DOCTYPE, Markup, html};

use crate::door::model::{Caller, confusable, is_invisible};

/// What every view of one request knows.
pub(super) struct Ctx<'a> {
    pub(super) caller: &'a Caller,
    /// The session's CSRF token, put in every form.
    pub(super) csrf: &'a str,
    /// Whether the caller signed in with a token (and so can sign out).
    pub(super) signed_in: bool,
    /// Only the live region is wanted (the page refreshing itself after a catalog change).
    pub(super) fragment: bool,
    pub(super) revision: u64,
    /// Fetch the live region this often (milliseconds) as well: what moves without a catalog
    /// change (a server's own page: its history).
    pub(super) poll_ms: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Tab {
    Servers,
    Catalog,
    Review,
    Audit,
    Tasks,
    Limits,
    Approvals,
}

impl Tab {
    /// How often the page's live region is fetched again besides catalog changes: tasks and
    /// limits move with every call, which the catalog watch does not tell.
    fn poll_ms(self) -> Option<u32> {
        match self {
            Tab::Tasks | Tab::Limits | Tab::Approvals => Some(2000),
            _ => None,
        }
    }
}

/// A whole page: `controls` (forms the reader is filling in) stay as they are when the page
/// refreshes itself; `live` is what a catalog change replaces. A fragment request gets `live`.
pub(super) fn page(ctx: &Ctx, tab: Tab, title: &str, controls: Markup, live: Markup) -> Markup {
    if ctx.fragment {
        return live;
    }
    let admin = ctx.caller.agent.admin;
    let tabs = [
        (Tab::Servers, "/servers", "Servers", true),
        (Tab::Catalog, "/catalog", "Catalog", true),
        (Tab::Tasks, "/tasks", "Tasks", true),
        (Tab::Limits, "/limits", "Limits", true),
        (Tab::Approvals, "/approvals", "Approvals", admin),
        (Tab::Review, "/review", "Review", admin),
        (Tab::Audit, "/audit", "Audit", admin),
    ];
    let poll = ctx.poll_ms.or(tab.poll_ms());
    html! {
        (DOCTYPE)
        html lang="en" {
            (head(title, true))
            body data-revision=(ctx.revision) data-poll=[poll] {
                header {
                    a.brand href="/servers" { "toolhost" }
                    nav {
                        @for (which, href, label, shown) in tabs {
                            @if shown {
                                a.current[which == tab] href=(href) { (label) }
                            }
                        }
                    }
                    div.who {
                        span title=(ctx.caller.identity.describe()) { "agent " strong { (ctx.caller.agent.name) } @if admin { " · operator" } }
                        @if ctx.signed_in {
                            form method="post" action="/logout" {
                                input type="hidden" name="csrf" value=(ctx.csrf);
                                button.link type="submit" { "Sign out" }
                            }
                        } @else {
                            a href="/login" { "Sign in with a token" }
                        }
                        span #live-status title="Live updates from the catalog watch" { "●" }
                    }
                }
                main {
                    h1 { (title) }
                    (controls)
                    div #live data-live { (live) }
                }
            }
        }
    }
}

/// A page with only a message (a refusal, an error), and a way on.
pub(super) fn message_page(title: &str, message: &str, login: bool) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            (head(title, false))
            body {
                header { a.brand href="/servers" { "toolhost" } }
                main.narrow {
                    h1 { (title) }
                    p.error { (message) }
                    @if login { p { a href="/login" { "Sign in with a token" } } }
                    p { a href="/servers" { "Back to the servers" } }
                }
            }
        }
    }
}

/// A page's `<head>`: its title, the stylesheet, and the script when the page is live.
pub(super) fn head(title: &str, live: bool) -> Markup {
    html! {
        head {
            meta charset="utf-8";
            meta name="viewport" content="width=device-width, initial-scale=1";
            title { (title) " · toolhost" }
            link rel="icon" href="/static/icon.svg" type="image/svg+xml";
            link rel="stylesheet" href="/static/console.css";
            @if live { script src="/static/console.js" defer {} }
        }
    }
}

/// A hidden CSRF field for a form.
pub(super) fn csrf_field(ctx: &Ctx) -> Markup {
    html! { input type="hidden" name="csrf" value=(ctx.csrf); }
}

/// A time as UTC RFC 3339 (seconds).
pub(super) fn when(unix_ms: i64) -> String {
    if unix_ms <= 0 {
        return "–".to_owned();
    }
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(u64::try_from(unix_ms).unwrap_or(0));
    humantime::format_rfc3339_seconds(at).to_string()
}

/// The first 12 hex digits of a definition hash, as `toolhost tools` prints them.
pub(super) fn short_hash(hash: &str) -> &str {
    hash.get(..12).unwrap_or(hash)
}

/// Text with what a reader could not see, or could mistake, made visible: invisible and
/// bidirectional-control characters as their code points, control characters too, and
/// look-alikes of ASCII letters marked with what they imitate.
pub(super) fn marked(text: &str) -> Markup {
    if text.bytes().all(|b| b.is_ascii_graphic() || b == b' ' || b == b'\n') {
        return html! { (text) };
    }
    html! {
        @for (start, piece) in pieces(text) {
            @match piece {
                Piece::Plain(end) => (&text[start..end]),
                Piece::Invisible(c) => span.inv title=(format!("invisible character U+{:04X}", u32::from(c))) { (format!("U+{:04X}", u32::from(c))) },
                Piece::Confusable(c, looks_like) => span.conf title=(format!("U+{:04X}, looks like {looks_like:?}", u32::from(c))) { (c) },
            }
        }
    }
}

/// Whether `text` holds anything [`marked`] marks.
pub(super) fn has_marks(text: &str) -> bool {
    pieces(text).into_iter().any(|(_, piece)| !matches!(piece, Piece::Plain(_)))
}

#[derive(Debug, PartialEq, Eq)]
enum Piece {
    /// Plain text from the piece's start to this byte offset.
    Plain(usize),
    Invisible(char),
    Confusable(char, char),
}

fn pieces(text: &str) -> Vec<(usize, Piece)> {
    let mut out: Vec<(usize, Piece)> = Vec::new();
    for (at, c) in text.char_indices() {
        let piece = if is_invisible(c) || (c.is_control() && c != '\n' && c != '\t') {
            Piece::Invisible(c)
        } else if let Some(ascii) = confusable(c) {
            Piece::Confusable(c, ascii)
        } else {
            let end = at + c.len_utf8();
            match out.last_mut() {
                Some((_, Piece::Plain(last_end))) if *last_end == at => *last_end = end,
                _ => out.push((at, Piece::Plain(end))),
            }
            continue;
        };
        out.push((at, piece));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invisible_and_confusable_characters_are_shown_as_such() {
        let text = "pay\u{200B}pal р<b>";
        let shown = marked(text).into_string();
        assert!(shown.contains(r#"<span class="inv" title="invisible character U+200B">U+200B</span>"#), "{shown}");
        assert!(shown.contains(r#"<span class="conf" title="U+0440, looks like &quot;p&quot;"#) || shown.contains("looks like"), "{shown}");
        assert!(shown.contains("&lt;b&gt;"), "escaped: {shown}");
        assert!(has_marks(text));
        assert!(!has_marks("plain ascii, and é"));
        assert_eq!(marked("a\u{202E}b").into_string(), r#"a<span class="inv" title="invisible character U+202E">U+202E</span>b"#);
        assert_eq!(marked("<plain>").into_string(), "&lt;plain&gt;");
    }
}
