//! `private_key_jwt` (RFC 7523): a short-lived assertion signed with the client's key proves
//! who is asking at the token endpoint, so no shared secret is sent. Signed with ring, which
//! rustls already builds; the JWS is three base64url parts, no more than a JWT crate would do.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, RSA_PKCS1_SHA256, RsaKeyPair};
use rustls::pki_types::PrivatePkcs8KeyDer;
use rustls::pki_types::pem::PemObject;

/// How a client assertion is signed (`signing_algorithm`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SigningAlgorithm {
    Es256,
    Rs256,
}

impl SigningAlgorithm {
    pub fn as_str(self) -> &'static str {
        match self {
            SigningAlgorithm::Es256 => "ES256",
            SigningAlgorithm::Rs256 => "RS256",
        }
    }
}

/// How long an assertion is valid: enough for one token request.
const ASSERTION_LIFETIME_SECS: u64 = 60;

/// A client's signing key, parsed once.
pub struct Signer {
    key: Key,
    rng: SystemRandom,
}

enum Key {
    Es256(EcdsaKeyPair),
    Rs256(RsaKeyPair),
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Signer([private key])")
    }
}

/// Why a private key cannot sign, or a signature could not be made (never the key itself).
#[derive(Debug, thiserror::Error)]
pub enum SignerError {
    #[error("is not a PEM \"PRIVATE KEY\" (PKCS#8); convert it with `openssl pkcs8 -topk8 -nocrypt`")]
    NotPkcs8,
    #[error("is not a P-256 key for ES256: {0}")]
    NotEs256(ring::error::KeyRejected),
    #[error("is not an RSA key for RS256: {0}")]
    NotRs256(ring::error::KeyRejected),
    #[error("the system clock is before 1970")]
    Clock,
    #[error("cannot read the system's random source")]
    Random,
    #[error("signing failed")]
    Signing,
}

impl Signer {
    /// Parses a PEM PKCS#8 private key for `algorithm`.
    ///
    /// # Errors
    /// Why the key cannot be used.
    pub fn new(pem: &str, algorithm: SigningAlgorithm) -> Result<Signer, SignerError> {
        let der = PrivatePkcs8KeyDer::from_pem_slice(pem.as_bytes()).map_err(|_| SignerError::NotPkcs8)?;
        let rng = SystemRandom::new();
        let key = match algorithm {
            SigningAlgorithm::Es256 => EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, der.secret_pkcs8_der(), &rng)
                .map(Key::Es256)
                .map_err(SignerError::NotEs256)?,
            SigningAlgorithm::Rs256 => RsaKeyPair::from_pkcs8(der.secret_pkcs8_der()).map(Key::Rs256).map_err(SignerError::NotRs256)?,
        };
        Ok(Signer { key, rng })
    }

    /// A client assertion: `iss` and `sub` are the client, `aud` the authorization server's
    /// issuer, with a fresh `jti`.
    ///
    /// # Errors
    /// The clock or the CSPRNG failed.
    pub fn assertion(&self, client_id: &str, audience: &str) -> Result<String, SignerError> {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_err(|_| SignerError::Clock)?.as_secs();
        let jti = crate::secrets::random_token().ok_or(SignerError::Random)?;
        let alg = match self.key {
            Key::Es256(_) => "ES256",
            Key::Rs256(_) => "RS256",
        };
        let header = serde_json::json!({ "alg": alg, "typ": "JWT" });
        let claims = serde_json::json!({
            "iss": client_id,
            "sub": client_id,
            "aud": audience,
            "jti": jti,
            "iat": now,
            "exp": now.saturating_add(ASSERTION_LIFETIME_SECS),
        });
        let mut jws = format!("{}.{}", URL_SAFE_NO_PAD.encode(header.to_string()), URL_SAFE_NO_PAD.encode(claims.to_string()));
        let signature = match &self.key {
            Key::Es256(key) => key.sign(&self.rng, jws.as_bytes()).map_err(|_| SignerError::Signing)?.as_ref().to_vec(),
            Key::Rs256(key) => {
                let mut signature = vec![0; key.public().modulus_len()];
                key.sign(&RSA_PKCS1_SHA256, &self.rng, jws.as_bytes(), &mut signature).map_err(|_| SignerError::Signing)?;
                signature
            }
        };
        jws.push('.');
        jws.push_str(&URL_SAFE_NO_PAD.encode(signature));
        Ok(jws)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ring::signature::{ECDSA_P256_SHA256_FIXED, KeyPair, UnparsedPublicKey};

    #[test]
    fn an_es256_assertion_verifies_with_the_public_key() {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let pem = format!(
            "-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n",
            base64::engine::general_purpose::STANDARD.encode(pkcs8.as_ref())
        );
        let signer = Signer::new(&pem, SigningAlgorithm::Es256).unwrap();
        let jwt = signer.assertion("client-1", "https://as.example").unwrap();
        let parts: Vec<&str> = jwt.split('.').collect();
        assert_eq!(parts.len(), 3);
        let claims: serde_json::Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[1]).unwrap()).unwrap();
        assert_eq!(
            (claims["iss"].as_str(), claims["sub"].as_str(), claims["aud"].as_str()),
            (Some("client-1"), Some("client-1"), Some("https://as.example"))
        );
        let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng).unwrap();
        let public = UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, key.public_key().as_ref().to_vec());
        public.verify(format!("{}.{}", parts[0], parts[1]).as_bytes(), &URL_SAFE_NO_PAD.decode(parts[2]).unwrap()).unwrap();
        let refused = Signer::new("not a key", SigningAlgorithm::Es256).unwrap_err();
        assert!(matches!(refused, SignerError::NotPkcs8) && refused.to_string().contains("PKCS#8"));
        let refused = Signer::new(&pem, SigningAlgorithm::Rs256).unwrap_err();
        assert!(matches!(refused, SignerError::NotRs256(_)) && refused.to_string().contains("RSA"));
    }
}
