//! Hex SHA-256: the one digest toolhost names things by (definition hashes, configuration
//! fingerprints, hashed audit arguments).

use sha2::{Digest, Sha256};

/// The lowercase hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    sha256_hex_of(&[bytes])
}

/// The lowercase hex SHA-256 of `parts` one after the other, without joining them first.
pub fn sha256_hex_of(parts: &[&[u8]]) -> String {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update(part);
    }
    hex::encode(hasher.finalize())
}
