"""Time to first chunk: what the model layer itself costs, with no model latency.

Measures, in one process, offline (no network):

- ``provider``: a zero-delay litellm ``CustomLLM`` streaming generator called directly,
  the floor;
- ``litellm``: ``litellm.acompletion(stream=True)`` over that provider, to its first
  content chunk (litellm's own per-call cost);
- ``LiteLLMService``: the same through ``LiteLLMService.stream`` (litellm plus ours);
- ``OfflineLLM``: the built-in model with zero delays (its extractive work on a
  realistic prompt, plus the stream machinery);
- ``OfflineLLM defaults``: the built-in model's default pacing, to show the configured
  time to first token is what a caller sees;
- ``offline_turn_cpu``: the CPU of ``OfflineLLM.respond`` plus its usage count per turn
  on turn-suite-like requests (``bench.offline_reference.turn_requests``: a ~6 KB context
  mostly repeated from turn to turn, a new question each turn), the model with its
  per-line caches against the uncached reference in the same run.

Run: ``python -m bench.models_bench [--iterations N]``. Each figure is p50/p99 over N
calls after a warm-up (litellm's first call initializes lazily and takes ~1 s).
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import statistics
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from xrmq.actors.models import ChatMessage, ChatRequest, LiteLLMService, OfflineLLM
from xrmq.actors.models.litellm_service import import_litellm

from .offline_reference import reference_respond, reference_usage, turn_requests

PROVIDER = "xrmq-bench"
CONTEXT_LINES = [
    f"[14:{minute:02d}] camera: object {minute} seen on shelf {minute % 7}" for minute in range(60)
]
MESSAGES = [
    ChatMessage("system", "You are a helpful assistant for an XR headset user."),
    ChatMessage(
        "user",
        "\n".join(
            [*CONTEXT_LINES, "[14:30] notes: Alice booked room 4B for 15:30", "Current time: 14:59"]
        ),
    ),
    ChatMessage("user", "Which room did Alice book?"),
]
RAW_MESSAGES = [{"role": message.role, "content": message.content} for message in MESSAGES]


def make_provider() -> Any:
    litellm: Any = import_litellm()

    class ZeroDelay(litellm.CustomLLM):
        async def astreaming(self, *args: Any, **kwargs: Any) -> AsyncIterator[dict[str, Any]]:
            for text in ("From ", "what ", "I ", "have."):
                yield {
                    "text": text,
                    "is_finished": False,
                    "finish_reason": "",
                    "usage": None,
                    "index": 0,
                }
            yield {
                "text": "",
                "is_finished": True,
                "finish_reason": "stop",
                "usage": None,
                "index": 0,
            }

    provider = ZeroDelay()
    litellm.custom_provider_map = [{"provider": PROVIDER, "custom_handler": provider}]
    return provider


async def time_first_chunk(
    start: Callable[[], Awaitable[AsyncIterator[Any]]], is_content: Callable[[Any], bool]
) -> float:
    """Seconds from the call to the first content chunk; the rest is drained untimed."""
    began = time.perf_counter()
    stream = await start()
    elapsed = None
    async for item in stream:
        if elapsed is None and is_content(item):
            elapsed = time.perf_counter() - began
    assert elapsed is not None
    return elapsed


def summarize(name: str, samples: list[float]) -> dict[str, Any]:
    samples = sorted(samples)
    p99 = samples[min(len(samples) - 1, int(len(samples) * 0.99))]
    return {
        "name": name,
        "n": len(samples),
        "p50_ms": statistics.median(samples) * 1e3,
        "p99_ms": p99 * 1e3,
    }


async def interleaved(
    paths: dict[str, Callable[[], Awaitable[float]]], iterations: int, warmup: int
) -> list[dict[str, Any]]:
    """Run every path once per round, so drift and cache effects hit all of them alike."""
    samples: dict[str, list[float]] = {name: [] for name in paths}
    for round_number in range(warmup + iterations):
        for name, run in paths.items():
            elapsed = await run()
            if round_number >= warmup:
                samples[name].append(elapsed)
    return [summarize(name, values) for name, values in samples.items()]


async def main(iterations: int) -> list[dict[str, Any]]:
    litellm = import_litellm()
    provider = make_provider()
    service = LiteLLMService(f"{PROVIDER}/bench")
    offline = OfflineLLM(time_to_first_token_s=0, tokens_per_second=0)
    paced = OfflineLLM()

    async def direct_provider() -> AsyncIterator[Any]:
        return provider.astreaming(
            model="bench",
            messages=RAW_MESSAGES,
            api_base=None,
            custom_prompt_dict={},
            model_response=None,
            print_verbose=print,
            encoding=None,
            api_key=None,
            logging_obj=None,
            optional_params={},
        )

    async def via_litellm() -> AsyncIterator[Any]:
        return await litellm.acompletion(
            model=f"{PROVIDER}/bench", messages=RAW_MESSAGES, stream=True
        )

    async def via_litellm_service_arguments() -> AsyncIterator[Any]:
        return await litellm.acompletion(
            model=f"{PROVIDER}/bench",
            messages=RAW_MESSAGES,
            stream=True,
            stream_options={"include_usage": True},
            timeout=60.0,
            drop_params=True,
        )

    async def service_stream() -> AsyncIterator[str]:
        return service.stream(MESSAGES)

    async def offline_stream() -> AsyncIterator[str]:
        return offline.stream(MESSAGES)

    async def paced_stream() -> AsyncIterator[str]:
        return paced.stream(MESSAGES)

    def litellm_content(chunk: Any) -> bool:
        return bool(chunk.choices and chunk.choices[0].delta.content)

    rows = await interleaved(
        {
            "provider (direct)": lambda: time_first_chunk(
                direct_provider, lambda chunk: bool(chunk["text"])
            ),
            "litellm.acompletion": lambda: time_first_chunk(via_litellm, litellm_content),
            "litellm.acompletion, service's arguments": lambda: time_first_chunk(
                via_litellm_service_arguments, litellm_content
            ),
            "LiteLLMService": lambda: time_first_chunk(service_stream, bool),
        },
        iterations,
        warmup=20,
    )
    # let litellm's background logging tasks finish before timing OfflineLLM
    await asyncio.sleep(0.5)
    rows += await interleaved(
        {"OfflineLLM (zero delays)": lambda: time_first_chunk(offline_stream, bool)},
        iterations,
        warmup=20,
    )
    rows += await interleaved(
        {"OfflineLLM (defaults)": lambda: time_first_chunk(paced_stream, bool)}, 10, warmup=1
    )
    return rows


def offline_turn_cpu(turns: int, rounds: int, window: int = 30) -> dict[str, list[float]]:
    """CPU µs per turn of respond + usage, per round: ``cached`` (``OfflineLLM``) and
    ``reference`` (uncached), one after the other. Each round is a participant of its own
    (its turns are numbered apart from every other round's, so no line of it is cached
    yet): its first ``window`` turns fill the context untimed, then ``turns`` turns are
    timed. The replies and counts of both are checked equal."""
    model = OfflineLLM(time_to_first_token_s=0, tokens_per_second=0)

    def cached(request: ChatRequest) -> tuple[str, object]:
        text = model.respond(request)
        return text, model._usage(request, len(text.split()))

    def reference(request: ChatRequest) -> tuple[str, object]:
        text = reference_respond(request)
        return text, reference_usage(request, len(text.split()))

    per_turn: dict[str, list[float]] = {"cached": [], "reference": []}
    for round_number in range(rounds):
        first = round_number * 10 * (window + turns)
        requests = turn_requests(window + turns, first=first, window=window)
        answers = {}
        for name, run in (("cached", cached), ("reference", reference)):
            for request in requests[:window]:
                run(request)
            began = time.process_time()
            answers[name] = [run(request) for request in requests[window:]]
            per_turn[name].append((time.process_time() - began) / turns * 1e6)
        if answers["cached"] != answers["reference"]:
            raise AssertionError("offline_turn_cpu: the cached model answered differently")
    return per_turn


def report(rows: list[dict[str, Any]]) -> str:
    lines = [
        f"python {platform.python_version()} on {platform.machine()}",
        "",
        "| path | n | p50 ms | p99 ms |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {row['name']} | {row['n']} | {row['p50_ms']:.3f} | {row['p99_ms']:.3f} |"
        for row in rows
    ]
    by_name = {row["name"]: row for row in rows}
    overhead = by_name["LiteLLMService"]["p50_ms"] - by_name["litellm.acompletion"]["p50_ms"]
    litellm_cost = by_name["litellm.acompletion"]["p50_ms"] - by_name["provider (direct)"]["p50_ms"]
    lines += [
        "",
        f"litellm per-call cost over the bare provider (p50): {litellm_cost:.3f} ms",
        f"LiteLLMService over litellm.acompletion (p50): {overhead:.3f} ms",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=300)
    args = parser.parse_args()
    print(report(asyncio.run(main(args.iterations))))
    cpu = offline_turn_cpu(turns=300, rounds=5)
    cached, reference = (statistics.median(cpu[name]) for name in ("cached", "reference"))
    print(
        f"\nOfflineLLM respond + usage CPU per turn (median of 5 rounds of 300 turns): "
        f"{cached:.0f} µs cached, {reference:.0f} µs uncached reference, "
        f"{reference / cached:.1f}x"
    )
