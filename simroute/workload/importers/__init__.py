"""Importers of public traces into `simroute.trace/1`: mooncake, azure, burstgpt, agent.

Every importer streams its input (bounded batches of lines or CSV rows) into a TraceWriter, checks
each batch vectorised and reports the first bad line with its file, line number and reason. The
output exists only if the whole input was good (atomic directory rename).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from simroute import __version__
from simroute.errors import ConfigurationError, UnknownNameError
from simroute.checks import check_number
from simroute.ioutil import check_output_path, sha256_file
from simroute.workload.importers.common import IMPORTERS_BY_NAME, ImporterFn, ImportOptions
from simroute.workload.writer import TraceWriter, open_trace_writer

def _registry() -> dict[str, ImporterFn]:
    """Every registered importer (the registry imports this package's modules on first read; each registers
    itself with `register_importer`)."""
    return IMPORTERS_BY_NAME.variants


IMPORTERS = ("agent", "azure", "burstgpt", "mooncake")   # format names, importable without the importers


def _expand(inputs: Sequence[str | Path], fmt: str) -> list[Path]:
    """Files as given; a directory stands for its *.json (agent) or all regular files, sorted."""
    files: list[Path] = []
    for item in inputs:
        path = Path(item)
        if not path.exists():
            raise ConfigurationError("input not found", file=path)
        if path.is_dir():
            pattern = "*.json" if fmt == "agent" else "*"
            found = sorted(p for p in path.glob(pattern) if p.is_file())
            if not found:
                raise ConfigurationError(f"no {pattern} files in directory", file=path)
            files.extend(found)
        else:                               # a regular file (not a pipe that would block the hash below)
            from simroute.ioutil import check_input_file
            files.append(check_input_file(path, what="trace file"))
    if not files:
        raise ConfigurationError("no input files given")
    if len(files) > 1 and fmt != "agent":
        raise ConfigurationError(f"format '{fmt}' imports one file at a time", file=files[1])
    return files


def import_trace(fmt: str, inputs: str | Path | Sequence[str | Path], output: str | Path, *,
                 time_scale: float = 1.0, load_scale: float = 1.0, strict: bool = False,
                 block_tokens: int | None = None, warn: Callable[[str], None] | None = None) -> Path:
    """Import `inputs` of format `fmt` into the trace directory `output`; returns the path.

    time_scale multiplies every time (arrivals and think times); load_scale multiplies the offered
    open-loop rate (arrivals are divided by it; think times are kept).
    """
    registry = _registry()
    if fmt not in registry:
        raise UnknownNameError("trace format", fmt, list(registry))
    check_number(time_scale, "--time-scale", minimum=0, exclusive_minimum=True, maximum=1e12)
    check_number(load_scale, "--load-scale", minimum=0, exclusive_minimum=True, maximum=1e12)
    if block_tokens is not None:
        check_number(block_tokens, "--block-tokens", integer=True, minimum=1, maximum=1 << 20)
    if isinstance(inputs, (str, Path)):
        inputs = [inputs]
    files = _expand(inputs, fmt)
    check_output_path(output, directory=True, inputs=[*files, *inputs], flag="--output")
    opts = ImportOptions(time_scale=time_scale, load_scale=load_scale, strict=strict,
                         block_tokens=block_tokens)
    meta: dict[str, Any] = {
        "producer": "importer", "name": fmt, "seed": None, "simroute_version": __version__,
        "params": {"time_scale": time_scale, "load_scale": load_scale, "strict": strict,
                   "block_tokens": block_tokens},
        "source_files": [p.name for p in files],
        "source_sha256": sha256_file(files[0]) if len(files) == 1 else [sha256_file(p) for p in files],
    }
    with open_trace_writer(output, meta, strict=strict, source=files[0], warn=warn) as writer:
        registry[fmt](writer, files, opts)
        if writer.n_requests == 0:
            raise ConfigurationError("no requests in the input", file=files[0])
    return Path(output)
