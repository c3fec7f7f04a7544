//! Which URLs may carry OAuth tokens: what the configuration checks at load and the flows check
//! on every URL a server's metadata names.

/// HTTPS, or plain HTTP to a loopback address.
pub fn is_secure(url: &str) -> bool {
    if url.starts_with("https://") {
        return true;
    }
    // `host_of` refuses user information: `http://127.0.0.1:80@evil.example/` goes to evil.example.
    url.starts_with("http://") && host_of(url).is_some_and(is_loopback_host)
}

/// The host of an `http(s)://` URL, without brackets; `None` for anything else, or an authority
/// with user information (`https://127.0.0.1@evil.example/` is not the host it looks like).
pub fn host_of(url: &str) -> Option<&str> {
    let rest = url.strip_prefix("https://").or_else(|| url.strip_prefix("http://"))?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.contains('@') {
        return None;
    }
    let host = match authority.strip_prefix('[') {
        Some(bracketed) => bracketed.split_once(']')?.0,
        None => authority.rsplit_once(':').map_or(authority, |(host, _)| host),
    };
    (!host.is_empty()).then_some(host)
}

/// `localhost` or a loopback address (`127.0.0.0/8`, `::1`), written without brackets or port:
/// the one rule for "this machine" wherever a name is checked (token URLs, the endpoint's `Host`
/// and `Origin`).
pub fn is_loopback_host(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost") || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}
