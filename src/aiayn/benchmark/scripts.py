"""What the scripts in the repository's ``benchmarks/`` share: the ``--out`` and ``--quick`` flags, one results
file written where ``--out`` says, a timing loop for kernels, and the reviews data set split as ``aiayn train
textclass`` splits it.

    RESULTS = Path(__file__).parent / "results"          # the script's own folder for committed results
    args = script_args(p, argv, QUICK, "vision-mnist", results=RESULTS)
    ...
    write_results(args.out, "vision_mnist", {...})

A full run writes into ``results`` (each script names its own: this package knows no repository path); a
``--quick`` run, whose toy numbers must never replace measured ones, into a new temporary folder unless ``--out``
says where. The scripts import these from the package, not from each other.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def script_args(p: argparse.ArgumentParser, argv: list[str] | None, quick: dict[str, Any], name: str, *,
                results: str | Path) -> argparse.Namespace:
    """Add ``--out`` and ``--quick`` to ``p`` and parse ``argv``.

    Args:
        p: the script's parser, holding its own flags.
        argv: the arguments (``None``: ``sys.argv[1:]``).
        quick: the defaults ``--quick`` gives (toy sizes); a flag given on the command line still wins.
        name: the temporary folder's prefix under ``--quick``.
        results: ``--out``'s default for a full run (the script's ``benchmarks/results``).

    Returns:
        The parsed arguments; ``out`` is ``--out``, else a new temporary folder under ``--quick``, else
        ``results``, as a string.
    """
    p.add_argument("--out", help=f"folder for the results (default {results}; --quick: a new temporary one)")
    p.add_argument("--quick", action="store_true", help="toy sizes, seconds: checks that it runs, measures nothing")
    args = p.parse_args(argv)
    if args.quick:
        p.set_defaults(**quick)
        args = p.parse_args(argv)
    if args.out is None:
        args.out = tempfile.mkdtemp(prefix=f"{name}-quick-") if args.quick else str(results)
    return args


def write_results(out: str | Path, name: str, results: dict[str, Any]) -> Path:
    """``results`` as ``<out>/<name>.json`` (the folder made if needed); says where, returns the path."""
    path = Path(out) / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {path}")
    return path


def median_times(calls: dict[str, Callable[[], object]], rounds: int, per_round: int) -> dict[str, float]:
    """``name -> median microseconds per call`` of each of ``calls``: a warm-up call each, then ``rounds`` rounds
    of ``per_round`` calls, the calls taking their rounds in turn (so that what else the machine does weighs on
    all alike)."""
    times: dict[str, list[float]] = {name: [] for name in calls}
    for f in calls.values():
        f()
    for _ in range(rounds):
        for name, f in calls.items():
            start = time.perf_counter()
            for _ in range(per_round):
                f()
            times[name].append((time.perf_counter() - start) / per_round * 1e6)
    return {name: round(statistics.median(t), 1) for name, t in times.items()}


Split = tuple[list[str], list[int]]  # (texts, labels)


def reviews(path: Path, work: Path, quick_texts: int | None = None
            ) -> tuple[Path, Split, Split, Split, list[str], dict[str, int]]:
    """The reviews folder (for ``--quick``, a copy of its first ``quick_texts`` reviews, half of each class, written
    under ``work``), deduplicated and split as ``aiayn train textclass`` splits it by default: ``(data folder,
    train, validation, test, class names, what cleaning dropped, counted)``, each split ``(texts, labels)``."""
    from aiayn.data.corpus import read_lines  # (here: the flags above need neither torch nor the data modules)
    from aiayn.data.labelled import clean, read_labelled, split

    data = path
    if quick_texts:  # a small copy of the data, the same format
        data = work / "data"
        data.mkdir()
        for file in sorted(path.glob("*.txt.gz")):
            lines = read_lines(file)[: quick_texts // 2]
            (data / file.name.removesuffix(".gz")).write_text("\n".join(lines) + "\n", encoding="utf-8")
    texts, labels, classes = read_labelled(data)
    texts, labels, report = clean(texts, labels)
    train, val, test = split(texts, labels, 0.1, 0.1, seed=0)  # textclass's defaults
    return data, train, val, test, classes, report


__all__ = ["median_times", "reviews", "script_args", "write_results"]
