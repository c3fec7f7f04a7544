//! Which package launcher an entry runs and the registry its settings send it to: the hosts its
//! sandbox's proxy lets it reach besides any allow-list (`upstream::confinement::egress`).
//! Decided when the file is read, so that a setting toolhost cannot read, or one naming a place
//! no server may reach through the proxy, is a configuration error naming its key: never a
//! silent fall-back to the public registry, never a way to the metadata service or the daemon's
//! own machine.

use std::net::IpAddr;
use std::path::Path;

use super::sandbox::HostPattern;

/// Which package launcher a program is, by its ecosystem, if it is one that fetches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fetcher {
    /// `npx`, `npm exec`, `pnpm dlx`, `bunx`: npm's registry.
    Npm,
    /// `uvx`, `uv tool run`, `pipx run`: the Python package index.
    Python,
}

/// The package launcher `program` is, with the words it was called by ("npx", "uv tool").
pub fn fetcher(program: &Path, args: &[String]) -> Option<(Fetcher, String)> {
    let name = program.file_name()?.to_str()?;
    let first = args.iter().find(|arg| !arg.starts_with('-')).map(String::as_str);
    match (name, first) {
        ("npx" | "bunx", _) => Some((Fetcher::Npm, name.to_owned())),
        ("npm" | "pnpm", Some(verb @ ("exec" | "dlx"))) => Some((Fetcher::Npm, format!("{name} {verb}"))),
        ("uvx", _) => Some((Fetcher::Python, name.to_owned())),
        ("uv", Some("tool")) => Some((Fetcher::Python, "uv tool".to_owned())),
        ("pipx", Some("run")) => Some((Fetcher::Python, "pipx run".to_owned())),
        _ => None,
    }
}

/// A registry setting that cannot be a server's registry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    #[error(
        "{key}{from} = {shown} is not a registry URL (scheme://host[:port]/…, a host name or address, a port from 1 to 65535): \
         fix it; its launcher is not sent to the public registry instead"
    )]
    Unreadable { key: String, from: &'static str, shown: String },
    #[error(
        "{key}{from} names {host}, {what}: a server's registry is reached through the daemon's proxy, which never leads there \
         (a cloud's metadata service, the daemon's own services); name the registry by a host name or another address"
    )]
    Internal { key: String, from: &'static str, host: String, what: &'static str },
}

impl RegistryError {
    /// The setting it is about ("UV_DEFAULT_INDEX").
    #[must_use]
    pub fn key(&self) -> &str {
        match self {
            RegistryError::Unreadable { key, .. } | RegistryError::Internal { key, .. } => key,
        }
    }
}

/// The hosts a launcher fetches from: the registry its settings name (`npm_config_registry`;
/// `UV_DEFAULT_INDEX`, `UV_INDEX_URL`, `PIP_INDEX_URL`, the first set, read from the server's
/// `env`, else the daemon's), else the public one. The Python index's own host (`pypi.org`)
/// serves its files from `files.pythonhosted.org`, which comes with it.
///
/// # Errors
/// The setting used is no URL with a host and a port toolhost can read, or names a link-local
/// address or one of this machine's.
pub fn registries<'a>(fetcher: Fetcher, env: impl Iterator<Item = (&'a str, &'a str)> + Clone) -> Result<Vec<HostPattern>, RegistryError> {
    let names: &[&str] = match fetcher {
        Fetcher::Npm => &["npm_config_registry"],
        Fetcher::Python => &["UV_DEFAULT_INDEX", "UV_INDEX_URL", "PIP_INDEX_URL"],
    };
    let configured = names.iter().find_map(|name| {
        let own = env.clone().find(|(key, _)| key.eq_ignore_ascii_case(name)).map(|(key, value)| (key.to_owned(), "", value.to_owned()));
        own.or_else(|| std::env::var(name).ok().map(|value| ((*name).to_owned(), " (the daemon's environment)", value)))
    });
    let Some((key, from, value)) = configured else {
        let public = match fetcher {
            Fetcher::Npm => NPM_PUBLIC,
            Fetcher::Python => PYTHON_PUBLIC,
        };
        return Ok(public.iter().filter_map(|host| HostPattern::parse(host).ok()).collect());
    };
    let Some((registry, address)) = url_host(&value) else {
        // A URL with a password is not repeated into a log.
        let shown = if super::carries_credentials(&value) { "(a URL with credentials)".to_owned() } else { format!("{value:?}") };
        return Err(RegistryError::Unreadable { key, from, shown });
    };
    if let Some(what) = address.and_then(internal) {
        return Err(RegistryError::Internal { key, from, host: registry.to_string(), what });
    }
    // pypi.org's files are on files.pythonhosted.org: the one comes with the other.
    let pypi = HostPattern::parse(PYTHON_PUBLIC[0]).ok();
    let mut hosts = vec![registry];
    if fetcher == Fetcher::Python && pypi.as_ref() == hosts.first() {
        hosts.extend(PYTHON_PUBLIC[1..].iter().filter_map(|host| HostPattern::parse(host).ok()));
    }
    Ok(hosts)
}

/// What an address a registry may not be is: link-local (169.254.0.0/16, where clouds serve
/// their metadata, and fe80::/10) or this machine's (loopback, unspecified, an interface's).
/// Read once, where the configuration is: `listen::machine` is the daemon's live view, above
/// this layer, and the proxy refuses such an address for any name besides.
fn internal(address: IpAddr) -> Option<&'static str> {
    let address = address.to_canonical();
    let link_local = match address {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => v6.is_unicast_link_local(),
    };
    if link_local {
        return Some("a link-local address");
    }
    if address.is_loopback() || address.is_unspecified() {
        return Some("this machine's address");
    }
    let interfaces = nix::ifaddrs::getifaddrs().ok()?;
    let ours = interfaces.filter_map(|interface| interface.address).any(|sockaddr| {
        let theirs = match (sockaddr.as_sockaddr_in(), sockaddr.as_sockaddr_in6()) {
            (Some(v4), _) => IpAddr::V4(v4.ip()),
            (None, Some(v6)) => IpAddr::V6(v6.ip()),
            (None, None) => return false,
        };
        theirs.to_canonical() == address
    });
    ours.then_some("this machine's address")
}

/// The public registries' hosts, npm's and the Python package index's (its own first).
const NPM_PUBLIC: &[&str] = &["registry.npmjs.org"];
const PYTHON_PUBLIC: &[&str] = &["pypi.org", "files.pythonhosted.org"];
/// Other public registries' hosts a refusal is recognised by (Yarn's mirror of npm's).
const OTHER_PUBLIC: &[&str] = &["registry.yarnpkg.com"];

/// Whether `host` is a public package registry's (a refusal of it looks like a package fetch).
#[must_use]
pub fn is_public_registry(host: &str) -> bool {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    NPM_PUBLIC.iter().chain(PYTHON_PUBLIC).chain(OTHER_PUBLIC).any(|public| *public == host)
}

/// `scheme://[user@]host[:port]/…` as an allow-list entry (port 443, or 80 for `http:`, unless
/// given), with its address where the host is one; `None` for anything else: no scheme, no
/// host, a wildcard, a port out of range.
fn url_host(url: &str) -> Option<(HostPattern, Option<IpAddr>)> {
    let (scheme, rest) = url.trim().split_once("://")?;
    if scheme.is_empty() || !scheme.bytes().all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'+' | b'-' | b'.')) {
        return None;
    }
    let authority = rest.split(['/', '?', '#']).next()?.rsplit('@').next()?;
    // An IPv6 address stands in brackets in a URL; bare, its colons would read as a port.
    let bare_v6 = !authority.starts_with('[') && authority.matches(':').count() > 1;
    if authority.is_empty() || authority.contains('*') || bare_v6 {
        return None;
    }
    let default_port = if scheme.eq_ignore_ascii_case("http") { 80 } else { 443 };
    let has_port = match authority.strip_prefix('[') {
        Some(bracketed) => bracketed.split_once(']').is_some_and(|(_, after)| after.starts_with(':')),
        None => authority.contains(':'),
    };
    let host = match authority.strip_prefix('[') {
        Some(bracketed) => bracketed.split_once(']').map_or(bracketed, |(host, _)| host),
        None => authority.rsplit_once(':').map_or(authority, |(host, _)| host),
    };
    let text = if has_port { authority.to_owned() } else { format!("{authority}:{default_port}") };
    Some((HostPattern::parse(&text).ok()?, host.parse().ok()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|arg| (*arg).to_owned()).collect()
    }

    fn shown(patterns: Vec<HostPattern>) -> Vec<String> {
        patterns.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn launchers_that_fetch_reach_their_registry_and_the_one_their_settings_name() {
        let (npm, _) = fetcher(Path::new("/usr/bin/npx"), &args(&["-y", "@modelcontextprotocol/server-filesystem"])).unwrap();
        let public_npm = [("npm_config_registry", "https://registry.npmjs.org/")];
        assert_eq!(shown(registries(npm, public_npm.into_iter()).unwrap()), ["registry.npmjs.org:443"]);
        let (python, said) = fetcher(Path::new("uv"), &args(&["tool", "run", "mcp-server-time"])).unwrap();
        assert_eq!((python, said.as_str()), (Fetcher::Python, "uv tool"));
        let private = [("UV_INDEX_URL", "http://user:pw@pypi.internal.example:8081/simple/")];
        assert_eq!(shown(registries(python, private.into_iter()).unwrap()), ["pypi.internal.example:8081"]);
        let address = [("PIP_INDEX_URL", "https://[2001:db8::5]:8443/simple")];
        assert_eq!(shown(registries(python, address.into_iter()).unwrap()), ["[2001:db8::5]:8443"]);
        assert!(fetcher(Path::new("npm"), &args(&["install"])).is_none() && fetcher(Path::new("python3"), &args(&["-m", "x"])).is_none());
        assert!(is_public_registry("PyPI.org.") && is_public_registry("registry.npmjs.org") && !is_public_registry("api.example.com"));
    }

    /// Issue: `UV_DEFAULT_INDEX = "https://pypi.org/simple"` reached pypi.org alone, and uv,
    /// refused files.pythonhosted.org, restarted for ever.
    #[test]
    fn the_python_index_named_by_its_url_brings_the_host_of_its_files() {
        for url in ["https://pypi.org/simple", "https://PyPI.org/simple/", "https://pypi.org:443/simple"] {
            let named = [("UV_DEFAULT_INDEX", url)];
            assert_eq!(
                shown(registries(Fetcher::Python, named.into_iter()).unwrap()),
                ["pypi.org:443", "files.pythonhosted.org:443"],
                "{url}"
            );
        }
        // Another index (a mirror) serves its own files: nothing comes with it.
        let mirror = [("UV_DEFAULT_INDEX", "https://pypi.example.com/simple")];
        assert_eq!(shown(registries(Fetcher::Python, mirror.into_iter()).unwrap()), ["pypi.example.com:443"]);
    }

    #[test]
    fn a_registry_setting_toolhost_cannot_read_is_an_error_naming_its_key() {
        for (key, value) in [
            ("UV_DEFAULT_INDEX", "not a url"),
            ("UV_INDEX_URL", "https://pypi.example.com:99999/simple"),
            ("PIP_INDEX_URL", "https:///simple"),
            ("UV_DEFAULT_INDEX", "https://*.example.com/simple"),
            ("UV_DEFAULT_INDEX", "pypi.example.com/simple"),
            ("UV_DEFAULT_INDEX", "http://fe80::1/simple"),
        ] {
            let error = registries(Fetcher::Python, [(key, value)].into_iter()).unwrap_err();
            assert_eq!(error.key(), key, "{value}");
            assert!(matches!(error, RegistryError::Unreadable { .. }), "{value}: {error}");
            assert!(error.to_string().contains(key) && error.to_string().contains("not a registry URL"), "{error}");
        }
        let error = registries(Fetcher::Npm, [("npm_config_registry", "https://u:secret@:0/")].into_iter()).unwrap_err();
        assert!(!error.to_string().contains("secret"), "{error}");
    }

    /// A registry is reached through the daemon's proxy, from the daemon's side: one at the
    /// metadata service or this machine's own address would be a way there for any launcher.
    #[test]
    fn a_registry_at_a_link_local_or_this_machines_address_is_refused() {
        let mut refused = vec![
            "http://169.254.169.254/latest/meta-data/",
            "https://[fe80::1]:8443/simple",
            "http://127.0.0.1:3141/root/pypi/+simple/",
            "http://[::1]:4873/",
            "http://0.0.0.0:4873/",
            "http://[::ffff:169.254.169.254]/",
        ]
        .into_iter()
        .map(str::to_owned)
        .collect::<Vec<_>>();
        let own = nix::ifaddrs::getifaddrs()
            .unwrap()
            .filter_map(|interface| interface.address?.as_sockaddr_in().map(|v4| v4.ip()))
            .find(|address| !address.is_loopback());
        refused.extend(own.map(|own| format!("http://{own}:8081/simple")));
        for url in &refused {
            let error = registries(Fetcher::Npm, [("npm_config_registry", url.as_str())].into_iter()).unwrap_err();
            assert!(matches!(error, RegistryError::Internal { .. }) && error.key() == "npm_config_registry", "{url}: {error}");
            assert!(error.to_string().contains("metadata service"), "{error}");
        }
        // A private registry elsewhere on the network is the operator's to name.
        let private = [("npm_config_registry", "http://10.255.0.7:4873/")];
        assert_eq!(shown(registries(Fetcher::Npm, private.into_iter()).unwrap()), ["10.255.0.7:4873"]);
    }
}
