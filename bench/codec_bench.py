"""Codec suite: msgspec encode/decode of the hot messages vs the json standard library.

For the record (no bar). Messages: a ``ResponseOutput`` stream fragment (the most
frequent message of a turn), a ``UserQuery``, a ``ConversationContextUpdate`` and the
``MessageMetadata`` frame every message carries. Subjects:

- msgspec MessagePack, the wire codec (reused typed ``Encoder``/``Decoder``);
- msgspec JSON (typed), to separate format from library;
- stdlib json: ``json.dumps`` of the message as a ready-made dict (its floor: the
  conversion from the struct is not counted) and ``Type(**json.loads(...))`` (typed,
  validated by the same ``__post_init__``), the equal footing for decoding.

Each figure is ns per operation: the median over repetitions of a timed loop.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import msgspec

from xrmq.schemas import ConversationContextUpdate, MessageMetadata, UserQuery

from .bus_workers import FRAGMENT
from .stats import median
from .suite import Row, Suite, SuiteContext, SuiteResult

METADATA = MessageMetadata(
    message_id="dialogue-host:65a1f3c2b9d40:1f3a",
    source="conversation",
    sender="dialogue-host",
    epoch=1_767_000_000_123_456,
    seq=8123,
    timestamp_us=1_767_000_004_567_890,
    correlation_id="router-host:65a1f3c2b9d40:7",
    parent_message_id="router-host:65a1f3c2b9d40:7",
    participant_id="p1",
)
MESSAGES = {
    "ResponseOutput fragment": FRAGMENT,
    "UserQuery": UserQuery(
        text="Which room did Alice book for the review?", timestamp_us=1_767_000_000_000_000
    ),
    "ConversationContextUpdate": ConversationContextUpdate(
        "[14:59] camera: Alice is holding a red folder; the whiteboard shows the Q3 launch plan"
    ),
    "MessageMetadata": METADATA,
}


def per_op_ns(operation: Callable[[], object], loops: int) -> float:
    began = time.perf_counter_ns()
    for _ in range(loops):
        operation()
    return (time.perf_counter_ns() - began) / loops


def subjects(
    message: msgspec.Struct,
) -> dict[str, tuple[Callable[[], object], Callable[[], object], int]]:
    """(encode, decode, encoded size) per codec, for one message."""
    kind = type(message)
    as_dict = msgspec.to_builtins(message)
    packer, unpacker = msgspec.msgpack.Encoder(), msgspec.msgpack.Decoder(kind)
    jencoder, jdecoder = msgspec.json.Encoder(), msgspec.json.Decoder(kind)
    packed, jpacked, text = packer.encode(message), jencoder.encode(message), json.dumps(as_dict)
    return {
        "msgspec msgpack": (
            lambda: packer.encode(message),
            lambda: unpacker.decode(packed),
            len(packed),
        ),
        "msgspec json": (
            lambda: jencoder.encode(message),
            lambda: jdecoder.decode(jpacked),
            len(jpacked),
        ),
        "stdlib json": (
            lambda: json.dumps(as_dict),
            lambda: kind(**json.loads(text)),
            len(text.encode()),
        ),
    }


def run(ctx: SuiteContext) -> SuiteResult:
    loops = 2_000 if ctx.quick else 100_000
    rows = []
    for name, message in MESSAGES.items():
        codecs = subjects(message)
        for direction, index in (("encode", 0), ("decode", 1)):
            for subject, parts in codecs.items():
                operation = parts[1] if index else parts[0]
                per_op_ns(operation, loops // 10)  # warm-up
                reps = [per_op_ns(operation, loops) for _ in range(ctx.repetitions)]
                rows.append(
                    Row(
                        group=f"{direction} {name}",
                        subject=subject,
                        unit="ns/op",
                        median=median(reps),
                        repetitions=reps,
                        higher_is_better=False,
                        extra={"bytes": parts[2]},
                    )
                )
        ctx.progress(f"codec: {name} done")
    for row in rows:
        baseline = next(r for r in rows if r.group == row.group and r.subject == "stdlib json")
        row.extra["x stdlib json"] = row.median / baseline.median
    return SuiteResult(rows=rows)


SUITE = Suite("codec", "Codec: msgspec vs the json standard library on the hot messages", run)
