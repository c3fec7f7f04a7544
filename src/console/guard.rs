//! The checks every console request passes before anything else, without I/O: the `Host` is
//! this machine's (DNS rebinding), a request from a page of another origin is refused, an action
//! comes from a page of the console's own origin (`Origin`, else `Sec-Fetch-Site`) and carries
//! its session's CSRF token; and the headers every response carries (a strict
//! Content-Security-Policy: scripts and styles from the console's own files only).

use http::{HeaderMap, HeaderValue, Method, header};
use subtle::ConstantTimeEq;

use super::error::ConsoleError;
use crate::listen::Origins;

/// The session cookie's name.
pub(super) const COOKIE: &str = "toolhost_console";

/// No inline script or style, nothing from elsewhere, no framing, forms post here only.
pub(super) const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
     connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// Checks `Host` and `Origin` for any request, and for an action (any method but GET and HEAD)
/// that it comes from one of the console's own pages.
///
/// # Errors
/// [`ConsoleError::WrongHost`] or [`ConsoleError::CrossSite`].
pub(super) fn check(method: &Method, headers: &HeaderMap, origins: &Origins) -> Result<(), ConsoleError> {
    let host = headers.get(header::HOST).and_then(|value| value.to_str().ok()).unwrap_or_default();
    if !origins.host_allowed(host) {
        return Err(ConsoleError::WrongHost(shorten(host)));
    }
    let safe = matches!(*method, Method::GET | Method::HEAD);
    match headers.get(header::ORIGIN).map(|value| value.to_str().unwrap_or_default()) {
        // Same origin: the scheme's authority is the Host this request was sent to.
        Some(origin) => {
            let authority = origin.strip_prefix("http://").or_else(|| origin.strip_prefix("https://"));
            if !(origins.origin_allowed(origin) && authority.is_some_and(|authority| authority.eq_ignore_ascii_case(host))) {
                return Err(ConsoleError::CrossSite(shorten(origin)));
            }
        }
        // A browser sends Origin with every POST; without one, only its fetch metadata can
        // vouch for the page. A client that is not a browser has no session cookie to abuse.
        None if !safe => {
            let site = headers.get("sec-fetch-site").and_then(|value| value.to_str().ok());
            if site.is_some_and(|site| site != "same-origin") {
                return Err(ConsoleError::CrossSite(format!("Sec-Fetch-Site: {}", shorten(site.unwrap_or_default()))));
            }
        }
        None => {}
    }
    Ok(())
}

/// Whether the CSRF token a form carried is its session's (compared in constant time).
pub(super) fn csrf_matches(expected: &str, given: Option<&str>) -> bool {
    given.is_some_and(|given| !expected.is_empty() && bool::from(expected.as_bytes().ct_eq(given.as_bytes())))
}

/// The session id in the request's cookies.
pub(super) fn session_cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find_map(|(name, value)| (name == COOKIE && !value.is_empty() && value.len() <= 64).then_some(value))
}

/// The `Set-Cookie` value for a session: script cannot read it, no other site's request carries it.
pub(super) fn set_cookie(id: &str, max_age_secs: u64) -> Option<HeaderValue> {
    HeaderValue::from_str(&format!("{COOKIE}={id}; Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age_secs}")).ok()
}

/// The `Set-Cookie` value that ends the session in the browser.
pub(super) fn clear_cookie() -> HeaderValue {
    HeaderValue::from_static("toolhost_console=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0")
}

/// Headers on every response.
pub(super) fn protect(headers: &mut HeaderMap) {
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    // Not `no-referrer`: under it a browser sends `Origin: null` with the console's own forms.
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    headers.insert("cross-origin-opener-policy", HeaderValue::from_static("same-origin"));
    headers.insert("cross-origin-resource-policy", HeaderValue::from_static("same-origin"));
    headers.entry(header::CACHE_CONTROL).or_insert(HeaderValue::from_static("no-store"));
}

/// Caller input echoed in an error, bounded.
fn shorten(text: &str) -> String {
    text.chars().take(100).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn hosts_and_origins_are_this_consoles_own() {
        let origins = Origins::default();
        let own = [("host", "127.0.0.1:7070"), ("origin", "http://127.0.0.1:7070")];
        assert!(check(&Method::POST, &headers(&own), &origins).is_ok());
        assert!(check(&Method::GET, &headers(&[("host", "localhost:7070")]), &origins).is_ok());
        // DNS rebinding: a name that resolved to loopback is still not loopback's.
        assert!(matches!(check(&Method::GET, &headers(&[("host", "evil.example:7070")]), &origins), Err(ConsoleError::WrongHost(_))));
        assert!(matches!(check(&Method::GET, &HeaderMap::new(), &origins), Err(ConsoleError::WrongHost(_))));
        // Another loopback port is another origin (another local web app).
        let other = [("host", "127.0.0.1:7070"), ("origin", "http://127.0.0.1:3000")];
        assert!(matches!(check(&Method::POST, &headers(&other), &origins), Err(ConsoleError::CrossSite(_))));
        assert!(matches!(check(&Method::GET, &headers(&other), &origins), Err(ConsoleError::CrossSite(_))));
        let null = [("host", "127.0.0.1:7070"), ("origin", "null")];
        assert!(check(&Method::POST, &headers(&null), &origins).is_err());
        let cross = [("host", "127.0.0.1:7070"), ("sec-fetch-site", "cross-site")];
        assert!(check(&Method::POST, &headers(&cross), &origins).is_err());
        let proxied = Origins::new(vec!["https://tools.example".into()]);
        let behind = [("host", "tools.example"), ("origin", "https://tools.example")];
        assert!(check(&Method::POST, &headers(&behind), &proxied).is_ok());
    }

    #[test]
    fn csrf_tokens_and_cookies() {
        assert!(csrf_matches("abc", Some("abc")));
        assert!(!csrf_matches("abc", Some("abd")));
        assert!(!csrf_matches("abc", None));
        assert!(!csrf_matches("", Some("")));
        let map = headers(&[("cookie", "a=1; toolhost_console=xyz; b=2")]);
        assert_eq!(session_cookie(&map), Some("xyz"));
        assert_eq!(session_cookie(&headers(&[("cookie", "toolhost_console=")])), None);
        let cookie = set_cookie("xyz", 60).unwrap();
        let cookie = cookie.to_str().unwrap();
        assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"), "{cookie}");
    }
}
