"""The bootstrap token the test suite's api-servers are started with (a cluster-admin credential,
as `ate dev` and a cluster's Secret give one), and the headers that carry it."""

from __future__ import annotations

BOOTSTRAP_TOKEN = "bootstrap-token-of-the-test-suite-0123456789abcdef"
"""At least 32 characters, as the api-server requires."""

BOOTSTRAP_HEADERS = {"Authorization": f"Bearer {BOOTSTRAP_TOKEN}"}
"""Request headers acting as cluster-admin."""

BOOTSTRAP_ENV = {"ATE_BOOTSTRAP_TOKEN": BOOTSTRAP_TOKEN}
"""The api-server's environment for it."""
