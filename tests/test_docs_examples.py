"""Every fenced block of README.md and docs/*.md is run or checked, so the docs cannot go stale.

A block's info string (the word after the opening fence) says what it is and what this test
does with it:

- ``python``: a program, run as a script (``python -`` in a subprocess on the embedded bus,
  timeout ``BLOCK_TIMEOUT_S``); it must exit 0.
- ``python excerpt:PATH``: an excerpt of the program at ``PATH`` (run by its own test); each
  of its lines must be a line of that file, in order (indentation aside).
- ``toml`` / ``toml NAME``: an edge-box config, written to the document's working directory
  (as ``NAME`` when given, for the shell blocks after it) and validated by
  ``xrmq up --check`` (the box config loader and the checks ``xrmq up`` makes before it
  starts anything). Every ``api_key_env`` it names is set to a dummy value: the check is of
  the file, not of a remote model.
- ``toml fragment``: tables of a config, added to the config its first line names
  (``# in examples/secure-edge-box.toml``; a table of the same name is replaced) and checked
  as above, beside that config (with ``--init-keys`` when its bus is CURVE-secured).
- ``sh``: commands, one a line (``\\`` continues a line, ``&&`` chains), run in order in the
  document's working directory (a copy of ``examples/`` beside it), each with timeout
  ``BLOCK_TIMEOUT_S`` and exit code 0:

  - ``xrmq up [CONFIG]`` (without ``--check``, ``--print-systemd``) runs until the end of the
    block: started, waited for until its ``xrmq up: ready`` line, stopped with SIGINT at the
    block's end, and must then exit 0;
  - ``export NAME=VALUE`` holds for the rest of the document;
  - ``python3 -m venv .venv`` and ``. .venv/bin/activate`` are skipped (this test runs in
    the venv they make); ``pip install`` is checked, not run: its constraints file exists and
    each extra it names is one of ``pyproject.toml``'s;
  - ``python -m pytest ...`` (the suite itself) must be, character for character, the test
    command of ``.ci/run``;
  - anything else (``xrmq ...``, ``python examples/...``) runs through bash.

- ``text`` and ``console``: not run. ``text`` is a picture or a sample of text; ``console`` a
  terminal session shown with its output (``$`` prompts), for commands that need what a test
  does not have (a model provider's key, a microphone, a terminal left open).

Every process runs with a private runtime directory (``XRMQ_RUNTIME_DIR``) and state
directory (``XDG_STATE_HOME``), so the default bus of a document is its own.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK_TIMEOUT_S = 60.0
README_MAX_LINES = 200
KINDS = {"python", "toml", "sh", "text", "console"}
FENCE = re.compile(r"^(`{3,})(.*)$")
UP_READY = re.compile(r"^xrmq up: ready ", re.MULTILINE)


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    kind: str
    options: tuple[str, ...]
    text: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def blocks_of(path: Path) -> list[Block]:
    """The fenced blocks of a markdown file, in order."""
    found: list[Block] = []
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        opened = FENCE.match(lines[i])
        if opened is None:
            i += 1
            continue
        fence, info = opened.groups()
        body: list[str] = []
        j = i + 1
        while j < len(lines) and lines[j].strip() != fence:
            body.append(lines[j])
            j += 1
        assert j < len(lines), f"{path.relative_to(ROOT)}:{i + 1}: fence never closed"
        words = info.split()
        kind = words[0] if words else ""
        found.append(Block(path, i + 1, kind, tuple(words[1:]), "\n".join(body) + "\n"))
        i = j + 1
    return found


def test_every_block_says_what_it_is():
    unknown = [
        f"{block.where}: {block.kind or '(no info string)'}"
        for path in DOCS
        for block in blocks_of(path)
        if block.kind not in KINDS
    ]
    assert not unknown, f"a fenced block's info string must be one of {sorted(KINDS)}: {unknown}"


def test_the_readme_is_a_front_page():
    lines = len((ROOT / "README.md").read_text().splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines (at most {README_MAX_LINES})"


def test_the_docs_link_only_to_files_that_exist():
    missing = [
        f"{path.relative_to(ROOT)}: {target}"
        for path in DOCS
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", path.read_text())
        if "://" not in target and not (path.parent / target).exists()
    ]
    assert not missing, f"links to missing files: {missing}"


# ------------------------------------------------------------------------------- running


class Document:
    """One markdown file's working directory, environment and background processes."""

    def __init__(self, path: Path, workdir: Path) -> None:
        self.path = path
        self.workdir = workdir
        shutil.copytree(ROOT / "examples", workdir / "examples", ignore=_no_keys)
        shutil.copy(ROOT / "constraints.txt", workdir)
        runtime_dir = workdir / "run"
        runtime_dir.mkdir(mode=0o700)
        state_dir = workdir / "state"
        state_dir.mkdir(mode=0o700)
        bindir = str(Path(sys.executable).parent)
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("XRMQ_", "PYTEST_", "OPENAI_", "ANTHROPIC_"))
        }
        self.env = {
            **env,
            "PATH": bindir + os.pathsep + env.get("PATH", ""),
            "XRMQ_RUNTIME_DIR": str(runtime_dir),
            "XDG_STATE_HOME": str(state_dir),
            "PYTHONUNBUFFERED": "1",
            "PYTHONPATH": str(ROOT),  # `python -m bench`: the benchmarks are not installed
        }
        self.background: list[tuple[str, subprocess.Popen[str]]] = []

    def run(self, block: Block) -> None:
        if block.kind == "python":
            if block.options and block.options[0].startswith("excerpt:"):
                _check_excerpt(block, ROOT / block.options[0].removeprefix("excerpt:"))
            else:
                self._python(block)
        elif block.kind == "toml":
            self._toml(block)
        elif block.kind == "sh":
            try:
                for command in _commands(block.text):
                    self._command(block, command)
            finally:
                self.stop_background(block)

    def _python(self, block: Block) -> None:
        done = subprocess.run(
            [sys.executable, "-"],
            input=block.text,
            cwd=self.workdir,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=BLOCK_TIMEOUT_S,
        )
        assert done.returncode == 0, f"{block.where}: exit {done.returncode}\n{done.stderr}"

    def _toml(self, block: Block) -> None:
        text = block.text
        if block.options[:1] == ("fragment",):
            first = text.splitlines()[0]
            named = re.fullmatch(r"#\s*in\s+(\S+)", first.strip())
            assert named, f"{block.where}: a fragment's first line names its config: # in FILE"
            text = _merge(ROOT / named.group(1), text)
            # beside its config, whose relative paths (keys) it keeps
            name = str(Path(named.group(1)).parent / f"fragment-{block.line}.toml")
        else:
            name = block.options[0] if block.options else f"block-{block.line}.toml"
        tomllib.loads(text)  # a clear error for a syntax mistake before the check's
        (self.workdir / name).write_text(text)
        keys = dict.fromkeys(re.findall(r'api_key_env\s*=\s*"(\w+)"', text), "doc-test-dummy")
        curve = re.search(r'^mode\s*=\s*"curve"', text, re.MULTILINE) is not None
        done = subprocess.run(
            ["xrmq", "up", "--check", *(["--init-keys"] if curve else []), name],
            cwd=self.workdir,
            env={**self.env, **keys},
            capture_output=True,
            text=True,
            timeout=BLOCK_TIMEOUT_S,
        )
        assert done.returncode == 0, f"{block.where}: xrmq up --check: {done.stderr}{done.stdout}"

    def _command(self, block: Block, command: str) -> None:
        words = shlex.split(command, comments=True)
        if not words:
            return
        if words[0] == "export":
            for assignment in words[1:]:
                key, _, value = assignment.partition("=")
                self.env[key] = value
        elif words[:3] == ["python3", "-m", "venv"] or words[0] in (".", "source"):
            return  # this test runs in the venv these make
        elif words[0] == "pip":
            _check_pip(block, words)
        elif words[:3] == ["python", "-m", "pytest"]:
            assert command.strip() == _ci_test_command(), (
                f"{block.where}: the test command differs from .ci/run's"
            )
        elif words[:2] == ["xrmq", "up"] and not {"--check", "--print-systemd"} & set(words):
            self._start_up(block, command)
        else:
            done = subprocess.run(
                ["bash", "-c", command],
                cwd=self.workdir,
                env=self.env,
                capture_output=True,
                text=True,
                timeout=BLOCK_TIMEOUT_S,
            )
            assert done.returncode == 0, (
                f"{block.where}: `{command}` exit {done.returncode}\n{done.stdout}\n{done.stderr}"
            )

    def _start_up(self, block: Block, command: str) -> None:
        log = self.workdir / f"up-{block.line}.log"
        with log.open("w") as out:
            process = subprocess.Popen(
                ["bash", "-c", "exec " + command],
                cwd=self.workdir,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                text=True,
            )
        self.background.append((command, process))
        deadline = time.monotonic() + BLOCK_TIMEOUT_S
        while not UP_READY.search(log.read_text()):
            assert process.poll() is None, f"{block.where}: `{command}` exited\n{log.read_text()}"
            assert time.monotonic() < deadline, f"{block.where}: `{command}` never ready"
            time.sleep(0.1)

    def stop_background(self, block: Block | None = None) -> None:
        where = block.where if block is not None else str(self.path)
        while self.background:
            command, process = self.background.pop()
            if process.poll() is None:
                process.send_signal(signal.SIGINT)
            try:
                code = process.wait(timeout=BLOCK_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
                raise AssertionError(f"{where}: `{command}` did not stop on SIGINT") from None
            assert code == 0, f"{where}: `{command}` exited {code} when stopped"


def _no_keys(directory: str, names: list[str]) -> list[str]:
    return [name for name in names if name in ("keys", "__pycache__")]


def _commands(text: str) -> list[str]:
    """A shell block's commands: continued lines joined, ``&&`` chains split."""
    joined = re.sub(r"\\\n\s*", " ", text)
    commands: list[str] = []
    for line in joined.splitlines():
        commands.extend(part.strip() for part in line.split(" && ") if part.strip())
    return commands


def _check_pip(block: Block, words: list[str]) -> None:
    assert words[1] == "install", f"{block.where}: pip {words[1]}: only pip install is checked"
    if "-c" in words:
        constraints = words[words.index("-c") + 1]
        assert (ROOT / constraints).is_file(), f"{block.where}: no {constraints}"
    extras = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    )
    for word in words[2:]:
        named = re.fullmatch(r"\.\[([\w,-]+)\]", word)
        if named:
            unknown = set(named.group(1).split(",")) - extras
            assert not unknown, f"{block.where}: no extra {sorted(unknown)} in pyproject.toml"


def _ci_test_command() -> str:
    run = (ROOT / ".ci/run").read_text().splitlines()
    marker = next(i for i, line in enumerate(run) if "README test command" in line)
    return run[marker + 1].split(" && ", 1)[1].strip()


def _check_excerpt(block: Block, source: Path) -> None:
    wanted = [line.strip() for line in block.text.splitlines() if line.strip()]
    have = iter(line.strip() for line in source.read_text().splitlines())
    missing = [line for line in wanted if not any(line == other for other in have)]
    assert not missing, f"{block.where}: not lines of {source.name}, in order: {missing}"


def _merge(config: Path, fragment: str) -> str:
    """The config with the fragment's tables appended (a table it already has is replaced)."""
    tables = set(re.findall(r"^\[([^\]]+)\]", fragment, re.MULTILINE))
    kept: list[str] = []
    skipping = False
    for line in config.read_text().splitlines():
        header = re.match(r"^\[([^\]]+)\]", line)
        if header:
            skipping = header.group(1) in tables
        if not skipping:
            kept.append(line)
    return "\n".join(kept) + "\n" + fragment


@pytest.mark.timeout(240)
@pytest.mark.parametrize("path", DOCS, ids=lambda path: str(path.relative_to(ROOT)))
def test_every_block_of_the_document_runs(path: Path, tmp_path: Path) -> None:
    document = Document(path, tmp_path)
    try:
        for block in blocks_of(path):
            document.run(block)
    finally:
        document.stop_background()
