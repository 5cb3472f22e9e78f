"""Brokers of the curve suite that ``xrmq bus`` does not offer, to split the secure broker's cost.

``python -m bench.curve_workers MODE BUS KEYS``, MODE one of:

- ``curve-proxy``: every socket a CURVE server (pyzmq's authenticator, the same keys),
  forwarding with libzmq's own proxy and no ACL: what encryption alone costs;
- ``curve-loop``: the secure broker's Python loop with every check answered "allowed":
  what the loop costs, so the secure broker's remaining difference is the metadata check.

Both admit identity ``bench`` (``KEYS/bench.key``) and print ``xrmq bus: ready`` once bound.
"""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path

import zmq

from xrmq.actors.runtime.address import parse_bus
from xrmq.actors.runtime.broker import Broker
from xrmq.actors.runtime.security import AccessPolicy, BrokerSecurity, Permissions
from xrmq.actors.runtime.security.forwarder import BUS_DOMAIN, IdentityAuthenticator
from xrmq.actors.runtime.security.keys import load_public, load_secret

BENCH = Permissions(publish=["bench.*"], sources=["*"], subscribe=["bench.*"])


def security(keys: Path) -> BrokerSecurity:
    public, secret = load_secret(keys / "broker.key_secret")
    return BrokerSecurity(public, secret, {"bench": (load_public(keys / "bench.key"), BENCH)})


def curve_proxy(bus: str, keys: Path) -> None:
    address, chosen = parse_bus(bus), security(keys)
    context = zmq.Context()
    authenticator = IdentityAuthenticator(context, chosen, AccessPolicy({"bench": BENCH}))
    authenticator.start()
    frontend, backend = context.socket(zmq.XSUB), context.socket(zmq.XPUB)
    for sock in (frontend, backend):
        sock.setsockopt(zmq.SNDHWM, 1_000_000)
        sock.setsockopt(zmq.RCVHWM, 1_000_000)
        chosen.serve(sock, BUS_DOMAIN)
    frontend.bind(address.publish)
    frontend.send(b"\x01")
    backend.bind(address.subscribe)
    print(f"xrmq bus: ready publish={address.publish} (curve, libzmq proxy, no ACL)", flush=True)
    threading.Thread(target=zmq.proxy, args=(frontend, backend), daemon=True).start()
    signal.sigwait({signal.SIGTERM, signal.SIGINT})
    authenticator.stop()


def curve_loop(bus: str, keys: Path) -> None:
    AccessPolicy.check_message = lambda self, *args: None  # type: ignore[method-assign]
    AccessPolicy.check_subscription = lambda self, *args: None  # type: ignore[method-assign]
    broker = Broker(parse_bus(bus), security=security(keys)).start()
    print(
        f"xrmq bus: ready publish={broker.address.publish} (curve, Python loop, no check)",
        flush=True,
    )
    signal.sigwait({signal.SIGTERM, signal.SIGINT})
    broker.stop()


if __name__ == "__main__":
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    mode, bus_arg, keys_arg = sys.argv[1:4]
    {"curve-proxy": curve_proxy, "curve-loop": curve_loop}[mode](bus_arg, Path(keys_arg))
