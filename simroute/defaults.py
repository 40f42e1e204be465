"""The one default deployment every command models when it is told nothing (issue: one default, one place).

`simroute run`, `predict`, `model step`, a study that names no model and the library's `RunConfig` all read
these names, so a sweep never silently simulates another model than the run it is compared with. The
default is the shipped scenario of the README: DeepSeek-V3 (FP8 weights) at TP 8 on HGX H200 hosts of the
shipped leaf-spine, fabric constants of the paper's H100 IBGDA box. A leaf module: it imports nothing.
"""

from __future__ import annotations

DEFAULT_MODEL = "deepseek-v3"          # model geometry (simroute/model/geometry.py)
DEFAULT_TP = 8                         # GPUs per instance: one HGX host
DEFAULT_GPU = "h200-sxm"               # GPU entry (calib/gpus/h200-sxm.yaml): what the default topology's hosts are
DEFAULT_TOPOLOGY = "fattree"           # shipped topology: 8 HGX H200 hosts, 2-tier leaf-spine
DEFAULT_CALIB = "h100-ibgda"           # shipped profile: the paper's fabric constants (HGX H200 keeps H100's fabric)
DEFAULT_TRACE = "agents-default"       # shipped trace: sub-agents forking pinned documents
DEFAULT_FABRIC = "h100-ibgda"          # a requester-holder path for `predict`


def deployment(model: str = DEFAULT_MODEL, tp: int = DEFAULT_TP, gpu: str = DEFAULT_GPU) -> str:
    """The header words every command prints: what is being modelled, defaults or not."""
    return f"{model} at TP {tp} on {gpu}"

# The papers' measured deployment: DeepSeek-V2-Lite (the model of the route/fetch measurements) on one GPU per
# instance, served by the papers' own prototype, not one of the frameworks an engine preset models (`engine`
# "none": the engine of the flags, docs/ENGINES.md). Scenarios that reproduce the papers' figures, and tests that
# need a small model on any topology, ask for it by this name; it is never a silent default.
PAPER_MODEL = "deepseek-v2-lite"
PAPER_DEPLOYMENT: dict[str, object] = {"model": PAPER_MODEL, "tp": 1, "engine": "none"}

# A run that completes fewer of its requests is no answer to a capacity question: `run` exits 1 below it, and
# studies and plans mark such points and keep them out of frontiers and answers.
MIN_COMPLETION = 0.9
