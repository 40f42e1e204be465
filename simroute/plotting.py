"""Small matplotlib helpers shared by the CLI and reports: headless backend and atomic PNG writes."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend (no display needed), imported lazily."""
    import matplotlib
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    return plt


def save_png(fig: Any, path: str | Path, dpi: int = 120) -> Path:
    from simroute.ioutil import atomic_path
    path = Path(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=dpi, bbox_inches="tight")
    pyplot().close(fig)
    return path


def write_csv(columns: dict[str, Any], path: str | Path) -> Path:
    import pandas as pd
    from simroute.ioutil import atomic_path
    path = Path(path)
    with atomic_path(path) as tmp:
        pd.DataFrame(columns).to_csv(tmp, index=False)
    return path
