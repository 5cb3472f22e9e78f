"""A long realtime session that rolls over before the provider's limit, offline.

Starts the offline realtime server (the OpenAI Realtime protocol on loopback, with a
small context window and a provider-like connect latency), a ``RealtimeConversation`` on
an embedded bus, and talks to it: facts first, many turns, then questions about the
first facts. Prints each answer, each rollover and the figures; exits 0 when the first
facts were still answered after the last rollover and the server truncated nothing.

    python examples/realtime_session.py [--max-context-tokens 400] [--connect-latency 1.1]
"""

from __future__ import annotations

import argparse
import sys

from xrmq.actors.context import ContextManager
from xrmq.actors.models import OfflineLLM
from xrmq.actors.realtime.conversation import RealtimeConversation
from xrmq.actors.realtime.openai_realtime import OpenAIRealtime
from xrmq.actors.realtime.pressure import RealtimeLimits
from xrmq.actors.realtime.server import Faults, OfflineRealtimeServer, ServerSettings
from xrmq.actors.runtime import AgentRuntime, run
from xrmq.actors.tools.summary import llm_summarizer
from xrmq.schemas import AgentTurn
from xrmq.topics import VOICE_OUTPUT_TOPIC

FACTS = [
    "My badge number is 4417.",
    "I parked on level 3.",
    "My sister lives in Lyon.",
    "The router password is on the fridge.",
    "My dentist is Dr. Okafor.",
    "The printer is in room 12.",
    "My flight leaves at nine.",
    "The plant needs water on Fridays.",
    "The spare battery is in the red case.",
]
QUESTIONS = [
    ("What is my badge number?", "4417"),
    ("Which level did I park on?", "level 3"),
    ("Where does my sister live?", "Lyon"),
]


async def _started() -> None:
    return None


async def main(max_tokens: int, latency_s: float) -> int:
    llm = OfflineLLM(time_to_first_token_s=0, tokens_per_second=0)
    context = ContextManager(llm)
    runtime = AgentRuntime()
    settings = ServerSettings(max_context_tokens=max_tokens)
    async with OfflineRealtimeServer(
        settings, faults=Faults(connect_latency_s=latency_s)
    ) as server:
        provider = OpenAIRealtime(
            base_url=server.url, limits=RealtimeLimits(max_context_tokens=max_tokens)
        )
        realtime = RealtimeConversation(
            provider,
            context=context,
            runtime=runtime,
            output_topic=VOICE_OUTPUT_TOPIC,
            summarize=llm_summarizer(llm, limit_bytes=max_tokens * 6 // 5, sections=()),
        )
        runtime.register("realtime", realtime)
        await runtime.start()
        ok = True
        turns = [(fact, None) for fact in FACTS * 2] + list(QUESTIONS)
        for index, (text, expected) in enumerate(turns):
            turn = AgentTurn("p1", f"turn-{index}", text)
            result = await realtime.answer(turn, started=_started)
            session = realtime.participants["p1"].session
            print(
                f"[epoch {session.epoch} pressure {session.pressure():.2f}] {text} "
                f"-> {result.response}"
            )
            if expected is not None and expected not in (result.response or ""):
                ok = False
        session = realtime.participants["p1"].session
        for record in session.rollovers:
            print(
                f"rollover to epoch {record.epoch}: waited {record.waited_s * 1000:.0f} ms, "
                f"connect {record.connect_s * 1000:.0f} ms, backlog {record.backlog}"
            )
        print(
            f"rollovers {session.counts['rollovers']}, server truncated "
            f"{server.stats['truncated_items']} items, "
            f"stale events {session.counts['stale_events']}"
        )
        ok = ok and session.counts["rollovers"] > 0 and server.stats["truncated_items"] == 0
        await realtime.close()
        await runtime.stop()
    await context.close()
    print("ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-context-tokens", type=int, default=400)
    parser.add_argument("--connect-latency", type=float, default=0.2)
    args = parser.parse_args()
    sys.exit(run(main(args.max_context_tokens, args.connect_latency)))
