"""The serving frameworks an engine preset can name (`--engine`): every module of this package is imported
(`discover`) and registers its class in `FRAMEWORKS`; a new framework is one new module here and its presets'
files under calib/engines/ (docs/ENGINES.md)."""

from simroute.sim.frameworks.base import FRAMEWORKS, Deployment, Framework, Setting
from simroute.sim.registry import discover

discover(__name__, __path__)

__all__ = ["FRAMEWORKS", "Deployment", "Framework", "Setting"]
