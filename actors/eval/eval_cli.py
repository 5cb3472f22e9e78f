"""``python -m bench eval`` / ``xrmq eval``: the compaction-quality eval from the shell.

A run generates the seeded session, runs it once per compaction-prompts variant,
prints the table, and writes ``results.json``, ``calls.jsonl`` (every model call) and
``eval-recall-by-depth.png`` to ``--out``. ``--replay LOG`` runs the same session and
variants from a log's header with the logged responses instead of models, so the
scores of a logged run can be reproduced (and rescored after a scorer change) offline;
with ``--answers-from MODEL`` the logged summaries are replayed and MODEL answers the
probes, which tells what compaction kept apart from how the logged model answered.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import json
import platform
import sys
import tomllib
from pathlib import Path
from typing import Any

import msgspec

from xrmq.actors.models import PRESETS, LLMService, ModelSpec, create_llm, parse_model_spec
from xrmq.actors.models.recording import CallLog, CallRecord, RecordingLLM, ReplayLLM, read_log
from xrmq.schemas import CompactionPrompts

from . import report
from .eval_session import QUICK_CONFIG, SessionConfig, generate_session
from .runner import RunResult, run_variant

DEFAULT_SEED = 7
DEFAULT_VARIANT = "default"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="session seed (default 7)")
    parser.add_argument(
        "--quick", action="store_true", help="CI size: 2 participants, seconds offline"
    )
    parser.add_argument("--participants", type=int, help="participants (default 6, quick 2)")
    parser.add_argument(
        "--exchanges", type=int, help="dialogue exchanges per participant (default 260, quick 170)"
    )
    parser.add_argument(
        "--facts-per-kind", type=int, help="planted facts of each kind (default 4, quick 2)"
    )
    parser.add_argument(
        "--model",
        default="offline",
        help="answers model: 'offline', a preset (hosted, local), a litellm model "
        "string, or a JSON table of ModelSpec fields (default offline)",
    )
    parser.add_argument(
        "--compaction-model", help="compaction model, same forms (default: --model)"
    )
    parser.add_argument("--api-base", help="server URL for a litellm model string")
    parser.add_argument("--api-key-env", help="environment variable holding the API key")
    parser.add_argument(
        "--prompts",
        type=Path,
        help="TOML file of CompactionPrompts variants, one table each, compared "
        "with the default in one run",
    )
    parser.add_argument(
        "--only",
        action="append",
        metavar="VARIANT",
        help="run only this prompts variant (repeatable; 'default' or a --prompts table): "
        "a slow model measures one variant at a time",
    )
    parser.add_argument(
        "--replay",
        type=Path,
        metavar="LOG",
        help="rerun a logged run from its calls.jsonl with no model",
    )
    parser.add_argument(
        "--answers-from",
        metavar="MODEL",
        help="with --replay: answer the probes with MODEL (same forms as --model) instead of "
        "the logged answers, the compaction still replayed: what the logged summaries are "
        "worth to another answering model",
    )
    parser.add_argument(
        "--guards",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the summary guards (check, fallback, no unchanged resends), on by default as "
        "on a box; --no-guards compacts as the seed's table alone says",
    )
    parser.add_argument("--concurrency", type=int, default=4, help="participants run at once")
    parser.add_argument(
        "--out", type=Path, default=Path("bench-results/eval"), help="output directory"
    )


def model_spec(value: str, api_base: str | None, api_key_env: str | None) -> ModelSpec:
    """A ``ModelSpec`` from a preset name, a litellm model string or a JSON table.

    The offline model runs unpaced here: the eval measures content, not latency.
    """
    if value.lstrip().startswith("{"):
        try:
            spec = parse_model_spec(json.loads(value))
        except json.JSONDecodeError as error:
            raise ValueError(f"--model: not a JSON table: {error}") from None
    elif value in PRESETS:
        spec = PRESETS[value]
    else:
        spec = ModelSpec(model=value, api_base=api_base, api_key_env=api_key_env)
    if spec.model == "offline":
        spec = msgspec.structs.replace(spec, time_to_first_token_s=0.0, tokens_per_second=0.0)
    return spec


def load_prompt_variants(path: Path | None) -> dict[str, CompactionPrompts]:
    """The default prompts, then every table of ``path`` as a named variant.

    A table names only the prompts it changes (the others keep their defaults).
    Raises ``ValueError`` naming the file, the variant and the field.
    """
    variants = {DEFAULT_VARIANT: CompactionPrompts()}
    if path is None:
        return variants
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise ValueError(f"{path}: {error}") from None
    for name, table in document.items():
        if not isinstance(table, dict):
            raise ValueError(f"{path}: {name}: must be a table of CompactionPrompts fields")
        try:
            variants[name] = msgspec.convert(table, CompactionPrompts)
        except (msgspec.ValidationError, ValueError) as error:
            raise ValueError(f"{path}: [{name}]: {error}") from None
    return variants


def _versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for package in ("xrmq", "litellm", "msgspec", "pyzmq"):
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            found[package] = "not installed"
    return found


def _session_config(args: argparse.Namespace) -> SessionConfig:
    """The session size: the full or quick size, with any size flag applied (a small
    model needs a small session to finish in minutes)."""
    config = QUICK_CONFIG if args.quick else SessionConfig()
    sizes = {
        "participants": args.participants,
        "exchanges": args.exchanges,
        "facts_per_kind": args.facts_per_kind,
    }
    for name, value in sizes.items():
        if value is not None and value < 1:
            raise ValueError(f"--{name.replace('_', '-')}: must be a positive integer, got {value}")
    return msgspec.structs.replace(
        config, **{name: value for name, value in sizes.items() if value is not None}
    )


async def _run_all(
    header: dict[str, Any],
    variants: dict[str, CompactionPrompts],
    compaction_llm: LLMService,
    answers_llm: LLMService,
    concurrency: int,
) -> list[RunResult]:
    config = msgspec.convert(header["config"], SessionConfig)
    session = generate_session(header["seed"], config)
    return [
        await run_variant(
            session,
            name,
            prompts,
            compaction_llm=compaction_llm,
            answers_llm=answers_llm,
            concurrency=concurrency,
            guarded=bool(header.get("guards", False)),
        )
        for name, prompts in variants.items()
    ]


def run(args: argparse.Namespace) -> int:
    """Run (or replay) the eval; print the table; write the results. Returns 0."""
    args.out.mkdir(parents=True, exist_ok=True)
    log: CallLog | None = None
    logged: list[CallRecord] = []
    if args.replay is not None:
        header, records = read_log(args.replay)
        if not header:
            raise ValueError(f"{args.replay}: no run header; is it a calls.jsonl of this eval?")
        variants = {
            name: msgspec.convert(p, CompactionPrompts) for name, p in header["prompts"].items()
        }
        logged = records
        compaction_llm: LLMService = ReplayLLM([r for r in records if r.service == "compaction"])
        header = {**header, "replayed_from": str(args.replay)}
        if args.answers_from is None:
            answers_llm: LLMService = ReplayLLM([r for r in records if r.service == "answers"])
        else:
            answers = model_spec(args.answers_from, args.api_base, args.api_key_env)
            answers_llm = create_llm(answers)
            logged = [r for r in records if r.service == "compaction"]
            header["models"] = {**header["models"], "answers": msgspec.to_builtins(answers)}
    else:
        if args.answers_from is not None:
            raise ValueError("--answers-from: goes with --replay (or use --model)")
        answers = model_spec(args.model, args.api_base, args.api_key_env)
        compaction = (
            answers
            if args.compaction_model is None
            else model_spec(args.compaction_model, args.api_base, args.api_key_env)
        )
        variants = load_prompt_variants(args.prompts)
        if args.only:
            unknown = sorted(set(args.only) - set(variants))
            if unknown:
                raise ValueError(f"--only: no prompts variant {', '.join(unknown)}")
            variants = {name: p for name, p in variants.items() if name in args.only}
        header = {
            "seed": args.seed,
            "quick": args.quick,
            "config": msgspec.to_builtins(_session_config(args)),
            "models": {
                "answers": msgspec.to_builtins(answers),
                "compaction": msgspec.to_builtins(compaction),
            },
            "prompts": msgspec.to_builtins(variants),
            "guards": args.guards,
            "versions": _versions(),
        }
        log = CallLog(args.out / "calls.jsonl", header)
        compaction_llm = RecordingLLM(create_llm(compaction), log, "compaction")
        answers_llm = RecordingLLM(create_llm(answers), log, "answers")
    header.pop("type", None)
    try:
        results = asyncio.run(
            _run_all(header, variants, compaction_llm, answers_llm, args.concurrency)
        )
    finally:
        if log is not None:
            log.close()
    all_figures = [report.figures(result) for result in results]
    print(
        f"compaction eval: seed {header['seed']}, models {_model_names(header)}, "
        f"variants {', '.join(variants)}"
    )
    print(report.table(all_figures))
    if log is not None:
        logged = log.records
    latency = report.latency(logged, list(variants.values()))
    print(report.latency_line(latency))
    document = {**report.results_document(header, results, all_figures), "latency": latency}
    (args.out / "results.json").write_bytes(msgspec.json.format(msgspec.json.encode(document)))
    plot = report.write_plots(all_figures, args.out)
    where = f"{args.out / 'results.json'}" + (
        "" if log is None else f", {args.out / 'calls.jsonl'}"
    )
    print(
        f"\nwrote {where}" + (f", {plot}" if plot else " (plots skipped: no matplotlib)"),
        file=sys.stderr,
    )
    return 0


def _model_names(header: dict[str, Any]) -> str:
    models = header.get("models", {})
    return ", ".join(f"{role}={spec.get('model')}" for role, spec in models.items())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench eval", description=__doc__.splitlines()[0]
    )
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run(args)
    except ValueError as error:
        print(f"eval: {error}", file=sys.stderr)
        return 2


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    """``xrmq eval``: the same command under the ``xrmq`` CLI."""
    parser = subparsers.add_parser(
        "eval",
        help="compaction-quality eval (python -m bench eval)",
        description=__doc__.splitlines()[0],
    )
    add_arguments(parser)
    parser.set_defaults(func=run)
