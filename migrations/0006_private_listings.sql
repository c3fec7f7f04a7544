-- A listing the server marked `cacheScope: "private"` belongs to the credential it was made
-- with: the fingerprint of that credential (a SHA-256, never the secret), or NULL for a listing
-- any credential may see. A stored private listing is not served under another credential.
ALTER TABLE servers ADD COLUMN private_to TEXT;
