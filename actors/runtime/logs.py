"""The runtime's logging names, from the leaf module ``xrmq.actors.logs``.

Logging lives in a leaf so that layers below the runtime (the model services, the pure
context core) can log without importing the runtime and its ZeroMQ sockets.
"""

from xrmq.actors.logs import configure_logging, get_logger

__all__ = ["configure_logging", "get_logger"]
