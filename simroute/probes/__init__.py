"""Hardware probes and the calibrate pipeline.

Host probes (shared memory, loopback TCP) always run; GPU probes (cupy, FlashMLA, nvshmem4py) import their
libraries lazily inside their own subprocess and report `skipped` / `missing-dep` where they cannot run.
`reference` holds the numpy ground truth every GPU kernel is checked against before it is timed.
"""

from simroute.probes.framework import Probe, ProbeOutcome, run_probe
from simroute.probes.registry import PROBES

__all__ = ["PROBES", "Probe", "ProbeOutcome", "run_probe"]
