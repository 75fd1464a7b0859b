"""Settings of `ate controller` (environment prefix `ATE_CONTROLLER_`, except the shared
`ATE_DATABASE_URL`)."""

from __future__ import annotations

from pathlib import Path

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class ControllerSettings(BaseSettings):
    """Where the controller watches and what it writes.

    - ``namespace``: the namespace of the WorkerPools and their worker pods ("" = every namespace).
    - ``image``: the image of the worker pods (the one image of every ate process).
    - ``api_server``: the ate REST API the worker pods' atelets register with, and where drains go.
    - ``api_token_file`` / ``api_token``: the controller's bearer token for the API (role
      ``cluster-operator``: it drains the nodes of evicted worker pods).
    - ``database_url``: PostgreSQL, for the worker records (``ATE_DATABASE_URL``).
    - ``kubeconfig``: a kubeconfig file; empty: the in-cluster service account.
    - ``metrics_listen``: ``host:port`` of ``/metrics``; empty disables it.
    - ``resync_seconds``: how often everything is listed again and reconciled, events or not.
    - ``worker_service_account``: the service account of the worker pods (it needs no API access).
    - ``object_store_locations``: the object storage locations of the worker pods' atelets (JSON
      list; e.g. ``["s3://ate-snapshots/prod"]``); their credentials stay in the Secret
      ``ate-object-store``.
    - ``worker_subnet``: the IPv4 network of each worker pod's inner link ("" keeps the atelet's
      default, 10.88.0.0/16); pick one your pod and service networks do not use.
    - ``images_claim``: the PersistentVolumeClaim with the OCI image layouts templates name,
      mounted read-only in the worker pods.
    - ``worker_tls_issuer`` / ``worker_tls_issuer_kind``: the cert-manager issuer (``Issuer`` in
      the pool's namespace, or ``ClusterIssuer``) that gives each worker pod its node certificate
      through cert-manager's csi-driver (docs/security.md).
    """

    model_config = SettingsConfigDict(env_prefix="ATE_CONTROLLER_")

    namespace: str = "ate-system"
    image: str = "ate:latest"
    api_server: str = "http://ate-api-server.ate-system.svc:8080"
    api_token_file: Path | None = None
    api_token: str | None = None
    database_url: str = Field(
        default="postgresql://postgres@127.0.0.1:5432/ate",
        validation_alias=AliasChoices("ATE_CONTROLLER_DATABASE_URL", "ATE_DATABASE_URL", "database_url"),
    )
    kubeconfig: str = ""
    metrics_listen: str = "0.0.0.0:9090"
    resync_seconds: float = Field(default=300.0, gt=0)
    worker_service_account: str = "ate-worker"
    images_claim: str = "ate-images"
    object_store_locations: list[str] = []
    worker_subnet: str = ""
    worker_tls_issuer: str = "ate-ca"
    worker_tls_issuer_kind: str = "Issuer"

    def read_api_token(self) -> str | None:
        """The API token, from ``api_token`` or ``api_token_file``.

        Raises:
            ValueError: the file is unreadable or empty.
        """
        if self.api_token_file is None:
            return self.api_token
        try:
            token = self.api_token_file.read_text().strip()
        except OSError as error:
            raise ValueError(f"api_token_file {self.api_token_file}: {error.strerror}") from None
        if not token:
            raise ValueError(f"api_token_file {self.api_token_file} is empty")
        return token
