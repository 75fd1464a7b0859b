-- Bearer tokens ate issues itself (`ate create token`): only the SHA-256 of each secret is kept.
-- Grants are `<role>[:<atespace>[/<actor>]]` or `node:<name>` (domain.access.Grant).
CREATE TABLE tokens (
    id            text PRIMARY KEY,
    name          text NOT NULL,
    secret_hash   text NOT NULL,
    grants        jsonb NOT NULL,
    created_by    text NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    expires_at    timestamptz,
    revoked_at    timestamptz
);
