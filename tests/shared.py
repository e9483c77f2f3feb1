"""Where the shared data sets live: ``$AIAYN_SHARED_DATA``, else ``../shared/data`` beside the checkout,
else ``/work/shared/data``. Tests that need them skip when none exists; the package never needs them."""

import os
from pathlib import Path


def shared_data() -> Path:
    candidates = [os.environ.get("AIAYN_SHARED_DATA"), Path(__file__).resolve().parents[1].parent / "shared" / "data",
                  "/work/shared/data"]
    for c in candidates:
        if c and Path(c).is_dir():
            return Path(c)
    return Path(candidates[1])


DATA = shared_data()
