"""Bus security: CURVE keys (``keys``), per-identity permissions (``acl``) and the secure
broker loop (``forwarder``). See docs/security.md, the threat model."""

from .acl import AccessPolicy, Permissions
from .forwarder import BrokerSecurity
from .keys import ClientCredentials, client_credentials, create_keypair, list_keys

__all__ = [
    "AccessPolicy",
    "BrokerSecurity",
    "ClientCredentials",
    "Permissions",
    "client_credentials",
    "create_keypair",
    "list_keys",
]
