"""What every picture shares: matplotlib on the Agg backend (no display needed) and an atomic PNG write."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from aiayn.io import atomic_write


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend (imported on first use: the package never needs a display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig: Any, path: str | os.PathLike, dpi: int = 110) -> Path:
    """Write ``fig`` as a PNG at ``path`` (its folders created, the file replaced atomically) and close it."""
    path = atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=dpi))
    pyplot().close(fig)
    return path
