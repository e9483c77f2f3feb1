"""Start-up time: how long ``import aiayn`` and ``aiayn --help`` make a user wait, beside ``import torch``.

    python benchmarks/startup.py              # 7 rounds of each, in fresh interpreters
    python benchmarks/startup.py --quick      # 1 round (a smoke test)

The package imports its names on first use (PEP 562 ``__getattr__`` in ``aiayn/__init__.py`` and
``aiayn/viz/__init__.py``), so the command line parses and answers ``--help`` before PyTorch is loaded;
``import aiayn.models`` is the price of the first model, shown for comparison. Each command runs in a new
interpreter, alternating, and the median with the lower and upper quartile is reported, with each time as a
ratio to ``import torch``'s median. Results go to ``<out>/startup.json``.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

from aiayn.benchmark.scripts import script_args, write_results

RESULTS = Path(__file__).parent / "results"  # a full run writes here unless --out says
COMMANDS = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "import aiayn": [sys.executable, "-c", "import aiayn"],
    "aiayn --help": [sys.executable, "-m", "aiayn", "--help"],
    "aiayn count --help": [sys.executable, "-m", "aiayn", "count", "--help"],
    "import aiayn.models": [sys.executable, "-c", "import aiayn.models"],
    "import torch": [sys.executable, "-c", "import torch"],
}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=7)
    args = script_args(p, argv, {"rounds": 1}, "startup", results=RESULTS)
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for _ in range(args.rounds):  # alternate, so a busy moment hurts every command alike
        for name, cmd in COMMANDS.items():
            start = time.perf_counter()
            subprocess.run(cmd, check=True, capture_output=True)
            times[name].append(time.perf_counter() - start)

    def quartiles(xs: list[float]) -> tuple[float, float, float]:
        if len(xs) == 1:
            return xs[0], xs[0], xs[0]
        q = statistics.quantiles(xs, n=4)
        return q[0], statistics.median(xs), q[2]

    torch_median = statistics.median(times["import torch"])
    results = {"name": "startup", "rounds": args.rounds, "seconds": {}, "vs_import_torch": {},
               "machine": {"cpu": platform.processor() or platform.machine(), "python": platform.python_version()}}
    for name, xs in times.items():
        lo, mid, hi = quartiles(xs)
        results["seconds"][name] = {"median": round(mid, 3), "q1": round(lo, 3), "q3": round(hi, 3)}
        results["vs_import_torch"][name] = round(mid / torch_median, 3)
        print(f"{name:22s} {mid:6.3f} s ({lo:.3f}-{hi:.3f})  {mid / torch_median:5.2f}x import torch")
    write_results(args.out, "startup", results)


if __name__ == "__main__":
    main()
