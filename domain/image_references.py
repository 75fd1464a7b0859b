"""Image references of a container registry, as a template's `image` names them (issue 29), besides
the local OCI layouts `oci:<path>:<tag>` (`atelet.images`).

    registry.example.com/team/agent:v3
    registry.example.com:5000/team/agent@sha256:<64 hex digits>
    127.0.0.1:5000/examples/counter:v1@sha256:<...>   (tag kept for the reader, digest used)
    python:3.12                                       (docker.io/library/python:3.12)

The grammar is the one of the distribution project's `reference` package, which Docker,
containers/image and Kubernetes share: `[domain[:port]/]path[:tag][@digest]`; the first
component is a domain when it holds a `.` or a `:` or is `localhost`, else the image is on
`docker.io` (and a one-component path there is under `library/`), as Kubernetes resolves it. Path
components are lower-case letters and digits, separated by `.`, `_`, `__` or dashes; a tag is at
most 128 of `[A-Za-z0-9_.-]`, not starting with `.` or `-`; a digest is `sha256:` and 64 hex digits.

When a template is created, a reference by tag is resolved to its manifest's digest and recorded
as `<name>:<tag>@<digest>` (`pinned`), so every actor and snapshot of the template runs the same
bits. Standard library only.
"""

from __future__ import annotations

import ipaddress
import platform
import re
from dataclasses import dataclass

DEFAULT_REGISTRY = "docker.io"
MAX_NAME_LENGTH = 255
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = re.compile(rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[0-9a-fA-F:]+\])(?::[0-9]{{1,5}})?")
_PATH_COMPONENT = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*")
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_DIGEST = re.compile(r"sha256:[a-f0-9]{64}")
EXAMPLE = "registry.example.com/team/agent:v3"


@dataclass(frozen=True)
class RegistryImage:
    """An image of a registry: `registry` (host, with `:port` when given), `repository` (the path),
    `tag` and/or `digest` (`sha256:...`); at least one of them (a reference with neither means
    `latest`, as Docker does, and gets that tag)."""

    registry: str
    repository: str
    tag: str | None = None
    digest: str | None = None

    @property
    def name(self) -> str:
        """`registry/repository`."""
        return f"{self.registry}/{self.repository}"

    @property
    def host(self) -> str:
        """The registry's host, without its port or IPv6 brackets."""
        if self.registry.startswith("["):
            return self.registry[1 : self.registry.index("]")]
        return self.registry.rsplit(":", 1)[0] if ":" in self.registry else self.registry

    @property
    def loopback(self) -> bool:
        """Whether the registry is on this machine's loopback (`localhost`, 127.0.0.0/8, ::1):
        it may then speak plain HTTP, as Docker and containers/image allow."""
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False

    def pinned(self, digest: str) -> RegistryImage:
        """This image at `digest` (the tag kept for whoever reads the reference)."""
        return RegistryImage(self.registry, self.repository, self.tag, digest)

    def transport_reference(self) -> str:
        """What containers/image's `docker` transport takes: `docker://name@digest` when pinned
        (it refuses a tag and a digest together), else `docker://name:tag`."""
        return f"docker://{self.name}@{self.digest}" if self.digest else f"docker://{self.name}:{self.tag}"

    def __str__(self) -> str:
        return self.name + (f":{self.tag}" if self.tag else "") + (f"@{self.digest}" if self.digest else "")


def parse_registry_host(text: str) -> str:
    """`text` when it is a registry as image references name it: `host[:port]` (a DNS name,
    `localhost`, an IPv4 address or a bracketed IPv6 one), e.g. `registry.example.com:5000`.

    Raises:
        ValueError: what is wrong, with an example.
    """
    if not text or not _DOMAIN.fullmatch(text):
        raise ValueError(f"{text!r} is not a registry host[:port] (e.g. registry.example.com or 127.0.0.1:5000)")
    return text


def is_registry_reference(text: str) -> bool:
    """Whether `text` names a registry image rather than a local layout (`oci:...`)."""
    return not text.startswith("oci:")


def parse_registry_image(text: str) -> RegistryImage:
    """The `RegistryImage` of `text` (module doc), normalized: the default registry and
    `library/` filled in, `latest` when neither tag nor digest is given.

    Raises:
        ValueError: `text` is not a reference; the message says which part is wrong and shows
            the expected form.
    """
    if not text or any(c.isspace() or not c.isprintable() for c in text):
        raise ValueError(f"{text!r} is not an image reference: it is empty or holds spaces or control characters "
                         f"(e.g. {EXAMPLE})")  # fmt: skip
    rest, _, digest = text.partition("@")
    if digest and not _DIGEST.fullmatch(digest):
        raise ValueError(f"{text!r}: the digest {digest!r} must be sha256: and 64 lower-case hex digits")
    registry = DEFAULT_REGISTRY
    first, slash, remainder = rest.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost" or first.startswith("[")):
        if not _DOMAIN.fullmatch(first):
            raise ValueError(f"{text!r}: {first!r} is not a registry host[:port]")
        registry, rest = first, remainder
    path, tag = rest, None
    last_slash = path.rfind("/")
    colon = path.rfind(":")
    if colon > last_slash:
        path, tag = path[:colon], path[colon + 1 :]
        if not _TAG.fullmatch(tag):
            raise ValueError(f"{text!r}: the tag {tag!r} must be 1-128 of letters, digits, '_', '.' and '-', "
                             "not starting with '.' or '-'")  # fmt: skip
    components = path.split("/")
    bad = [c for c in components if not _PATH_COMPONENT.fullmatch(c)]
    if bad:
        raise ValueError(f"{text!r}: the path component {bad[0]!r} must be lower-case letters and digits, separated "
                         f"by '.', '_', '__' or '-' (e.g. {EXAMPLE})")  # fmt: skip
    if registry == DEFAULT_REGISTRY and len(components) == 1:
        path = f"library/{path}"
    if len(f"{registry}/{path}") > MAX_NAME_LENGTH:
        raise ValueError(f"{text!r}: the name is longer than {MAX_NAME_LENGTH} characters")
    if tag is None and not digest:
        tag = "latest"
    return RegistryImage(registry, path, tag, digest or None)


_ARCHITECTURES = {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm", "ppc64le": "ppc64le", "s390x": "s390x"}

RUNTIME_PLATFORM = f"linux/{_ARCHITECTURES.get(platform.machine(), platform.machine())}"
"""The OCI platform (`os/architecture`, as image configs and manifest lists write it) of the
machine this runs on, e.g. `linux/amd64`: the platform a template's registry image must offer,
since ate's nodes run the api-server's architecture (one architecture per cluster)."""

PULL_FAILURES = (
    ("unauthorized", ("unauthorized", "authentication required", "denied", "401", "403 forbidden")),
    ("no such image", ("manifest unknown", "name unknown", "repository name not known", "not found")),
    ("not for this platform", ("no image found in manifest list", "choosing image instance", "architecture")),
    ("disk full", ("no space left on device",)),
    ("registry speaks plain HTTP", ("http response to https client",)),
    ("registry's certificate not trusted", ("x509:", "certificate signed by unknown authority")),
    ("registry unreachable", ("connection refused", "no such host", "i/o timeout", "dial tcp", "network is unreachable",
                              "timeout", "tls handshake", "eof", "pinging container registry")),
)  # fmt: skip
"""What a pull's failure was, by the words containers/image (skopeo) writes: the first match wins."""

PULL_HINTS = {
    "no such image": "check the name and the tag (or digest) exist in the registry",
    "unauthorized": "the registry wants credentials: create a pull secret for it ('ate create secret NAME -a "
                    "ATESPACE --type registry --registry HOST[:PORT] --username USER --password-stdin') and list it "
                    "in the template's spec.imagePullSecrets",
    "not for this platform": f"the image has no {RUNTIME_PLATFORM} variant, the platform ate's nodes run; "
                             "build or push one",
    "disk full": "free space on the node (its image cache) and try again",
    "registry speaks plain HTTP": "only a registry on loopback may use plain HTTP; give the registry TLS, or list "
                                  "it as insecure (ATE_INSECURE_REGISTRIES / the atelet's --insecure-registry)",
    "registry's certificate not trusted": "give the registry a certificate the system trusts, or list it as insecure",
    "registry unreachable": "check the registry's address and that it runs and is reachable from here",
    "pull failed": "see the message for what the registry said",
}
"""What the user should do, by failure kind."""


def pull_failure(output: str) -> tuple[str, str]:
    """(kind, hint) of a failed skopeo run's `output` (its stderr): `PULL_FAILURES`' first kind
    whose words it holds (case-insensitive), else `pull failed`."""
    lowered = output.lower()
    for kind, words in PULL_FAILURES:
        if any(word in lowered for word in words):
            return kind, PULL_HINTS[kind]
    return "pull failed", PULL_HINTS["pull failed"]


def skopeo_message(output: str) -> str:
    """The last `msg="..."` of skopeo's log output, or its last line (what the registry said)."""
    found = re.findall(r'msg="((?:[^"\\]|\\.)*)"', output)
    if found:
        return str(found[-1]).replace('\\"', '"')
    lines = [line for line in output.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "no output"
