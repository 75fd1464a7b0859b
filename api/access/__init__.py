"""Who is calling and whether they may: bearer-token authentication (ate tokens, the bootstrap
token, OIDC JWTs, node certificates) and the per-route permission guard (domain.access holds the
roles)."""
