"""`python -m simroute.probes.worker module:function args.json result.json`: run one probe, write its result.

The result is JSON with a status the runner reports as one line: ok, skipped (the machine cannot run it),
missing-dep (a library is not importable) or failed (the probe raised; the traceback goes to the log).
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import traceback
from pathlib import Path

from simroute.ioutil import write_text_atomic
from simroute.probes.framework import MissingDependency, ProbeSkipped


def _write(path: Path, obj: dict) -> None:
    write_text_atomic(path, json.dumps(obj, default=float))


def main(argv: list[str]) -> int:
    target, args_path, result_path = argv[0], Path(argv[1]), Path(argv[2])
    args = json.loads(args_path.read_text())
    if args.get("backend") == "reference":           # a dry run: numpy stand-ins for the GPU libraries
        from simroute.probes.gpu_common import BACKEND_ENV
        os.environ[BACKEND_ENV] = "reference"
    try:
        mod_name, fn_name = target.split(":")
        func = getattr(importlib.import_module(mod_name), fn_name)
        out = func(args) or {}
        _write(result_path, {"status": "ok", "message": out.pop("message", "done"), **out})
        return 0
    except MissingDependency as exc:
        _write(result_path, {"status": "missing-dep", "message": str(exc)})
    except ModuleNotFoundError as exc:
        _write(result_path, {"status": "missing-dep", "message": str(MissingDependency(exc.name or str(exc)))})
    except ProbeSkipped as exc:
        _write(result_path, {"status": "skipped", "message": str(exc)})
    except Exception as exc:  # the probe's own failure: reported as one line, details in the log
        traceback.print_exc()
        _write(result_path, {"status": "failed", "message": f"{type(exc).__name__}: {exc}"})
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
