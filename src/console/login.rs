//! The sign-in page, for callers the kernel cannot identify (or who want to act as the agent a
//! token names): a token, posted once with the page's CSRF token; the session keeps it on the
//! daemon's side and the browser only ever holds the session's id.

use maud::{DOCTYPE, Markup, html};

use super::html::head;

/// `who`: the agent the caller is now, if the kernel identified it; `problem`: why the last
/// attempt (or the request that led here) was refused.
pub(super) fn view(csrf: &str, who: Option<&str>, problem: Option<&str>) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            (head("Sign in", false))
            body {
                header { a.brand href="/servers" { "toolhost" } }
                main.narrow {
                    h1 { "Sign in" }
                    @if let Some(problem) = problem { p.error { (problem) } }
                    @if let Some(who) = who { p { "This machine knows you as agent " strong { (who) } "; a token signs you in as the agent it names." } }
                    form.login method="post" action="/login" {
                        input type="hidden" name="csrf" value=(csrf);
                        label for="token" { "Token" }
                        input #token type="password" name="token" autocomplete="off" required maxlength="4096";
                        button type="submit" { "Sign in" }
                    }
                    p.hint { "The token is one of an [access] agent entry's tokens. It stays on the daemon's side: the browser holds only a session cookie." }
                }
            }
        }
    }
}
