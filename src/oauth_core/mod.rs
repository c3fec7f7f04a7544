//! The I/O-free part of OAuth, below the configuration: which URLs may carry tokens, and the
//! private keys that sign client assertions. The flows themselves live in `upstream::oauth`.

pub mod jwt;
pub mod urls;
