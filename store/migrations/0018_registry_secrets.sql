-- Registry pull secrets (issue 29): a secret is `opaque` (an egress credential's header value) or
-- `registry` (a user name and password for one container registry, named here as image
-- references name it, `host[:port]`, for the templates that list the secret in imagePullSecrets).
-- The registry is metadata that may be shown; the credentials are in the sealed value.
ALTER TABLE secrets
    ADD COLUMN type text NOT NULL DEFAULT 'opaque' CHECK (type IN ('opaque', 'registry')),
    ADD COLUMN registry text,
    ADD CONSTRAINT secrets_registry_of_its_type CHECK ((type = 'registry') = (registry IS NOT NULL));
