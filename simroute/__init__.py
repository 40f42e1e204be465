"""simroute: a discrete-event cluster simulator of cross-instance attention, calibrated by hardware probes.

Layers (arrows point down only): model -> calib -> network -> workload -> sim -> study -> cli.
"""

__version__ = "0.1.0"

if __import__("os").environ.get("SIMROUTE_PURE_PYTHON", "") not in ("", "0"):   # simroute.compiled: run as Python
    from simroute.compiled import prefer_sources as _prefer_sources
    _prefer_sources()
