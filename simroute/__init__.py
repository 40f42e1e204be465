"""simroute: a discrete-event cluster simulator of cross-instance attention, calibrated by hardware probes.

Layers (arrows point down only): model -> calib -> network -> workload -> sim -> study -> cli.
"""

__version__ = "0.1.0"

from simroute.compiled import follow_environment as _follow_environment   # SIMROUTE_PURE_PYTHON: run as Python

_follow_environment()
