-- Secrets (issue 28): one value per name in an atespace, encrypted by the api-server (AES-256-GCM,
-- api/secret_box.py) with the key `key_id` of its key ring; `sealed` is the nonce followed by the
-- ciphertext and its tag. The value itself is never stored, nor a hash of it (a hash of a short
-- value would give it away). Deleting an atespace deletes its secrets.
CREATE TABLE secrets (
    atespace    text NOT NULL REFERENCES atespaces (name) ON DELETE CASCADE,
    name        text NOT NULL,
    key_id      text NOT NULL,
    sealed      bytea NOT NULL,
    size_bytes  integer NOT NULL,
    created_by  text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (atespace, name)
);
