"""Who may do what: permissions, the roles that carry them, grants of a role on an atespace or on
the cluster, and the principal a request acts for.

Roles (per atespace): `viewer` reads; `operator` also resumes, suspends, pauses, reverts and
tags, and reaches the actors through the router; `admin` also creates and deletes templates,
actors and tokens of that atespace; `user` only reaches actors (of the atespace, or one actor:
`user:<atespace>/<actor>`), for the callers of an agent rather than its operators. Cluster
roles: `cluster-viewer` reads everything (workers and nodes too); `cluster-operator` also drains
nodes and operates every actor; `cluster-admin` may do everything, atespaces included. `node` is
an atelet's own, proved by its node certificate (never issued as a token): it may register,
report and drain only its own node. `router` reads templates and actors, resumes actors,
reviews tokens (the router asks the API whether a caller may reach an actor), and registers its
replica and acknowledges the drains of actors being checkpointed.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass, field
from enum import StrEnum

from domain.labels import DNS_LABEL


class Permission(StrEnum):
    """What a REST route needs (each route declares one; tests/api/test_access.py walks them)."""

    ATESPACES_READ = "atespaces.read"
    ATESPACES_MANAGE = "atespaces.manage"
    TEMPLATES_READ = "templates.read"
    TEMPLATES_MANAGE = "templates.manage"
    ACTORS_READ = "actors.read"
    ACTORS_LOGS = "actors.logs"
    """Read an actor's output (`ate logs`): every role that reads actors, but not the router,
    which never needs what a workload printed."""
    SNAPSHOTS_READ = "snapshots.read"
    """List and describe snapshots (`ate get snapshots`): every role that reads actors, but not
    the router, which never needs them."""
    ACTORS_RESUME = "actors.resume"
    ACTORS_OPERATE = "actors.operate"
    ACTORS_MANAGE = "actors.manage"
    ACTORS_REACH = "actors.reach"
    TOKENS_MANAGE = "tokens.manage"
    SECRETS_READ = "secrets.read"
    SECRETS_MANAGE = "secrets.manage"
    TOKENS_REVIEW = "tokens.review"
    WORKERS_READ = "workers.read"
    NODES_DRAIN = "nodes.drain"
    NODES_REGISTER = "nodes.register"
    ROUTERS_REGISTER = "routers.register"


class Role(StrEnum):
    """A named set of permissions, granted on one atespace or on the cluster."""

    VIEWER = "viewer"
    USER = "user"
    OPERATOR = "operator"
    ADMIN = "admin"
    CLUSTER_VIEWER = "cluster-viewer"
    CLUSTER_OPERATOR = "cluster-operator"
    CLUSTER_ADMIN = "cluster-admin"
    NODE = "node"
    ROUTER = "router"


_VIEW = frozenset({Permission.ATESPACES_READ, Permission.TEMPLATES_READ, Permission.ACTORS_READ, Permission.ACTORS_LOGS,
                   Permission.SNAPSHOTS_READ})  # fmt: skip
_OPERATE = _VIEW | {Permission.ACTORS_RESUME, Permission.ACTORS_OPERATE, Permission.ACTORS_REACH, Permission.SECRETS_READ}
_ADMIN = _OPERATE | {
    Permission.TEMPLATES_MANAGE,
    Permission.ACTORS_MANAGE,
    Permission.TOKENS_MANAGE,
    Permission.SECRETS_MANAGE,
}

ROLE_PERMISSIONS: dict[Role, frozenset[Permission]] = {
    Role.VIEWER: _VIEW,
    Role.USER: frozenset({Permission.ACTORS_REACH}),
    Role.OPERATOR: _OPERATE,
    Role.ADMIN: _ADMIN,
    Role.CLUSTER_VIEWER: _VIEW | {Permission.WORKERS_READ},
    Role.CLUSTER_OPERATOR: _OPERATE | {Permission.WORKERS_READ, Permission.NODES_DRAIN},
    Role.CLUSTER_ADMIN: _ADMIN
    | {
        Permission.WORKERS_READ,
        Permission.NODES_DRAIN,
        Permission.ATESPACES_MANAGE,
        Permission.TOKENS_REVIEW,
        Permission.ROUTERS_REGISTER,
    },
    Role.NODE: frozenset({Permission.NODES_REGISTER, Permission.NODES_DRAIN}),
    Role.ROUTER: frozenset(
        {
            Permission.TOKENS_REVIEW,
            Permission.ACTORS_READ,
            Permission.ACTORS_RESUME,
            Permission.TEMPLATES_READ,
            Permission.ROUTERS_REGISTER,
        }
    ),
}
"""What each role may do."""

CLUSTER_ROLES = frozenset({Role.CLUSTER_VIEWER, Role.CLUSTER_OPERATOR, Role.CLUSTER_ADMIN, Role.ROUTER})
"""Roles granted on the whole cluster (no atespace)."""

ATESPACE_ROLES = frozenset({Role.VIEWER, Role.USER, Role.OPERATOR, Role.ADMIN})


@dataclass(frozen=True)
class Grant:
    """A role on one atespace (`atespace` set; `user` may narrow it to one `actor`), on the
    cluster, or for one node (`node` set)."""

    role: Role
    atespace: str | None = None
    node: str | None = None
    actor: str | None = None

    def __str__(self) -> str:
        if self.actor:
            return f"{self.role.value} of actor {self.atespace}/{self.actor}"
        if self.atespace:
            return f"{self.role.value} on atespace {self.atespace}"
        if self.node:
            return f"node {self.node}"
        return self.role.value

    @classmethod
    def parse(cls, text: str) -> Grant:
        """`<role>` for a cluster role, `<role>:<atespace>` for an atespace role,
        `user:<atespace>/<actor>` for one actor, `node:<name>`.

        Raises:
            ValueError: an unknown role, a cluster role given an atespace, or the reverse; the
                message lists what is allowed.
        """
        role_name, _, scope = text.partition(":")
        try:
            role = Role(role_name)
        except ValueError:
            allowed = ", ".join(r.value for r in Role)
            raise ValueError(f"unknown role {role_name!r} (roles: {allowed})") from None
        if role == Role.NODE:
            if not scope:
                raise ValueError("node needs its node: node:<name>")
            return cls(role=role, node=scope)
        if role in ATESPACE_ROLES:
            if not scope:
                raise ValueError(f"{role.value} is granted on an atespace: {role.value}:<atespace>")
            atespace, _, actor = scope.partition("/")
            for what, name in (("atespace", atespace), ("actor", actor)):
                if (name and not DNS_LABEL.fullmatch(name)) or (what == "atespace" and not name):
                    raise ValueError(f"{what} {name[:80]!r} in grant {text[:100]!r} is not a valid name")
            if actor and role != Role.USER:
                raise ValueError(f"{role.value} is granted on a whole atespace; only user may name one actor")
            return cls(role=role, atespace=atespace, actor=actor or None)
        if scope:
            raise ValueError(f"{role.value} is a cluster role: it takes no atespace")
        return cls(role=role)

    def text(self) -> str:
        """The form `parse` reads."""
        if self.actor:
            return f"{self.role.value}:{self.atespace}/{self.actor}"
        if self.atespace:
            return f"{self.role.value}:{self.atespace}"
        if self.node:
            return f"node:{self.node}"
        return self.role.value


@dataclass(frozen=True)
class Principal:
    """Who a request acts for: a name (the token's, or an OIDC subject) and its grants."""

    name: str
    grants: tuple[Grant, ...] = field(default_factory=tuple)

    def allows(
        self, permission: Permission, atespace: str | None = None, node: str | None = None, actor: str | None = None
    ) -> bool:
        """Whether a grant carries `permission` where it is asked: on `atespace` (an atespace
        grant of that atespace, or a cluster grant; a grant narrowed to one actor only for
        `actor`), on the cluster (`atespace` None: cluster grants only), or for `node` (a node
        grant of that very node)."""
        for grant in self.grants:
            if permission not in ROLE_PERMISSIONS[grant.role]:
                continue
            if grant.role == Role.NODE:
                if node is not None and grant.node == node:
                    return True
                continue
            if grant.atespace is None:
                return True
            if atespace is not None and grant.atespace == atespace and (grant.actor is None or grant.actor == actor):
                return True
        return False

    def atespaces(self, permission: Permission) -> set[str] | None:
        """The atespaces where `permission` is held; None when it is held on the whole cluster."""
        found: set[str] = set()
        for grant in self.grants:
            if permission in ROLE_PERMISSIONS[grant.role] and grant.role != Role.NODE and grant.actor is None:
                if grant.atespace is None:
                    return None
                found.add(grant.atespace)
        return found

    def covers(self, grant: Grant) -> bool:
        """Whether this principal may hand `grant` to a token it creates: a cluster admin any; an
        atespace admin the roles of its atespace."""
        if any(g.role == Role.CLUSTER_ADMIN for g in self.grants):
            return True
        return grant.atespace is not None and self.allows(Permission.TOKENS_MANAGE, grant.atespace)


def refusal(permission: Permission, atespace: str | None = None, node: str | None = None) -> str:
    """What a principal lacks for `permission` (on `atespace`, or for `node`), in words an operator
    can act on: `token lacks operator on atespace demo`. Never says more about the token."""
    if permission == Permission.NODES_REGISTER:
        return f"only node {node}'s own certificate may register or report node {node}"
    role = next((r for r in (Role.VIEWER, Role.OPERATOR, Role.ADMIN) if permission in ROLE_PERMISSIONS[r]), None)
    if atespace is not None and role is not None:
        return f"token lacks {role.value} on atespace {atespace}"
    if atespace is None and node is None and role is not None:
        return f"token lacks {role.value} on any atespace"
    cluster = next(
        r for r in (Role.CLUSTER_VIEWER, Role.CLUSTER_OPERATOR, Role.CLUSTER_ADMIN) if permission in ROLE_PERMISSIONS[r]
    )
    return f"token lacks {cluster.value}"


TOKEN_PREFIX = "ate_"


@dataclass(frozen=True)
class IssuedToken:
    """An ate token as shown once to its creator: `ate_<id>_<secret>`; only the secret's hash is
    stored."""

    token_id: str
    secret: str

    @property
    def text(self) -> str:
        """The token as the user writes it."""
        return f"{TOKEN_PREFIX}{self.token_id}_{self.secret}"

    @property
    def secret_hash(self) -> str:
        """What the store keeps (SHA-256: the secret is 256 random bits, so no slow hash is needed)."""
        return hash_secret(self.secret)


def new_token() -> IssuedToken:
    """A fresh token: a 12-hex-digit id and a 256-bit secret."""
    return IssuedToken(token_id=secrets.token_hex(6), secret=secrets.token_urlsafe(32))


def hash_secret(secret: str) -> str:
    """The stored form of a token's secret."""
    return hashlib.sha256(secret.encode()).hexdigest()


def parse_token(text: str) -> IssuedToken | None:
    """`ate_<id>_<secret>` into its parts; None when `text` is not an ate token (e.g. a JWT)."""
    if not text.startswith(TOKEN_PREFIX):
        return None
    token_id, sep, secret = text[len(TOKEN_PREFIX) :].partition("_")
    if not sep or len(token_id) != 12 or not secret or len(secret) > 128:
        return None
    return IssuedToken(token_id=token_id, secret=secret)


def same_secret(stored_hash: str, secret: str) -> bool:
    """Constant-time comparison of a stored hash with a presented secret."""
    return hmac.compare_digest(stored_hash, hash_secret(secret))
