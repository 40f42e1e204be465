"""Validated reading: an input is a readable regular file of bounded size; YAML and JSON load with their
errors naming the file and line, YAML's nesting and alias expansion bounded (no file makes a loader hang);
a trace's lines bounded in length."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from simroute.errors import ConfigurationError


MAX_CONFIG_BYTES = 16 << 20      # a topology, profile or study bigger than this is not a config file


def check_input_file(path: str | Path, *, what: str = "file", max_bytes: int | None = None) -> Path:
    """An input that must be a readable regular file (not missing, not a directory, not too big)."""
    path = Path(path)
    if not path.exists():
        raise ConfigurationError(f"{what} not found", file=path)
    if path.is_dir():
        raise ConfigurationError(f"is a directory; expected a {what}", file=path)
    if not path.is_file():          # a pipe, a socket or a device: reading it could block forever or never end
        raise ConfigurationError(f"is not a regular file (a pipe, socket or device); expected a {what}", file=path)
    if not os.access(path, os.R_OK):
        raise ConfigurationError("is not readable (permission denied)", file=path)
    if max_bytes is not None and path.stat().st_size > max_bytes:
        raise ConfigurationError(f"is {path.stat().st_size:,} bytes; a {what} is at most {max_bytes:,}", file=path)
    return path


def read_text(path: str | Path, *, what: str = "file", max_bytes: int | None = MAX_CONFIG_BYTES) -> str:
    """A UTF-8 text file, or a ConfigurationError naming it (missing, a directory, binary, not UTF-8)."""
    path = check_input_file(path, what=what, max_bytes=max_bytes)
    data = path.read_bytes()
    if b"\x00" in data:
        raise ConfigurationError(f"is a binary file, not a {what}", file=path)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise ConfigurationError(f"is not UTF-8 text (byte {exc.start})", file=path, line=line) from None


MAX_NESTING = 100


def _check_nesting(text: str, path: Path) -> None:
    """Refuse flow collections nested absurdly deep before the parser recurses into them (slow, then a crash)."""
    if text.count("[") + text.count("{") <= MAX_NESTING:
        return
    depth = 0
    for ch in text:
        if ch in "[{":
            depth += 1
            if depth > MAX_NESTING:
                raise ConfigurationError(f"not valid YAML: nested deeper than {MAX_NESTING} levels", file=path)
        elif ch in "]}":
            depth = max(depth - 1, 0)


MAX_YAML_NODES = 100_000       # values a document may expand to through aliases beyond 10x its own count


def _expanded_size(root: yaml.Node, path: Path) -> None:
    """Refuse a document whose aliases expand it past MAX_YAML_NODES (a "billion laughs"): PyYAML shares the
    repeated object, but every consumer that walks it (validation, copying, JSON) walks each repetition."""
    sizes: dict[int, int] = {}
    unique = 0
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:               # post-order without recursion: children's sizes before their parent's
        node, done = stack.pop()
        if id(node) in sizes:
            continue
        children: list[yaml.Node] = []
        if isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            children = [item for pair in node.value for item in pair]
        if not done:
            stack.append((node, True))
            stack.extend((child, False) for child in children if id(child) not in sizes)
            continue
        unique += 1
        sizes[id(node)] = 1 + sum(sizes[id(child)] for child in children)
        if sizes[id(node)] > max(MAX_YAML_NODES, 10 * unique):
            raise ConfigurationError(f"not a config file: its aliases expand it past {MAX_YAML_NODES:,} values "
                                     "(an alias bomb?)", file=path)


def _safe_load(text: str, path: Path) -> Any:
    """yaml.safe_load, with the alias expansion measured on the composed nodes before anything is built.

    Through libyaml where installed (the calibration profile and its includes parse 5-10x faster); a document
    libyaml refuses is parsed again by the pure loader, whose error messages are the ones users see."""
    fast = getattr(yaml, "CSafeLoader", None)
    if fast is not None:
        try:
            return _load_checked(fast, text, path)
        except yaml.YAMLError:
            pass
    return _load_checked(yaml.SafeLoader, text, path)


def _load_checked(loader_class: Any, text: str, path: Path) -> Any:
    loader = loader_class(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if "*" in text:     # an alias is written `*name`: a document without one holds each node once
            _expanded_size(node, path)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def load_yaml(path: str | Path) -> Any:
    """Load a YAML file, turning I/O, encoding and syntax errors into a ConfigurationError naming the file.

    The one YAML loader of every config (topologies, profiles, studies, generator presets): nesting and
    alias expansion are bounded, so no file makes it hang."""
    path = Path(path)
    text = read_text(path, what="YAML file")
    _check_nesting(text, path)
    try:
        return _safe_load(text, path)
    except yaml.YAMLError as exc:
        line = getattr(getattr(exc, "problem_mark", None), "line", None)
        raise ConfigurationError(f"not valid YAML: {getattr(exc, 'problem', None) or exc}", file=path,
                                 line=None if line is None else line + 1) from None
    except RecursionError:
        raise ConfigurationError("not valid YAML: nested too deeply", file=path) from None


def load_json(path: str | Path, *, what: str = "JSON file", max_bytes: int | None = MAX_CONFIG_BYTES) -> Any:
    """Load a JSON file (e.g. a run's summary.json), errors naming the file and line."""
    path = Path(path)
    text = read_text(path, what=what, max_bytes=max_bytes)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigurationError(f"not valid JSON: {exc.msg}", file=path, line=exc.lineno) from None
    except RecursionError:
        raise ConfigurationError("not valid JSON: nested too deeply", file=path) from None


MAX_LINE_BYTES = 64 << 20     # a line of a trace longer than this is not a record (no real trace has one)


def bounded_lines(stream: Any, file: Path, *, max_bytes: int = MAX_LINE_BYTES) -> Iterator[tuple[int, bytes]]:
    """(line number, line) of a binary stream, never holding more than `max_bytes` of one line."""
    lineno = 0
    while True:
        raw = stream.readline(max_bytes + 1)
        if not raw:
            return
        lineno += 1
        if len(raw) > max_bytes:
            raise ConfigurationError(f"line is longer than {max_bytes:,} bytes: not a trace record", file=file,
                                     line=lineno)
        yield lineno, raw


def check_line_lengths(file: Path, *, max_bytes: int = MAX_LINE_BYTES, block: int = 1 << 20) -> None:
    """Refuse a text file with a line longer than `max_bytes`, reading it in bounded blocks (a parser handed
    a 2 GiB line would hold it whole)."""
    block = min(block, max_bytes)          # a line inside one block is then never too long by itself
    run, lineno = 0, 1                     # bytes of the current line so far, its number
    with file.open("rb") as f:
        while data := f.read(block):
            first = data.find(b"\n")
            if first < 0:
                run += len(data)
            else:
                if run + first > max_bytes:
                    break
                lineno += data.count(b"\n")
                run = len(data) - data.rfind(b"\n") - 1
            if run > max_bytes:
                break
        else:
            return
    raise ConfigurationError(f"line is longer than {max_bytes:,} bytes: not a trace record", file=file, line=lineno)
