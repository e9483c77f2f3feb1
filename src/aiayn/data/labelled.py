"""Labelled texts for classification: read, cleaned of duplicates and contradictions, split.

    texts, labels, classes = read_labelled("data/chinese-reviews-sentiment")   # neg.txt.gz, pos.txt.gz
    texts, labels, report = clean(texts, labels)     # each text once; texts found under two labels dropped
    train, val, test = split(texts, labels, 0.1, 0.1, seed=0)

A folder holds one file per class (``neg.txt``, ``pos.txt.gz``, ...: one text per line; the file's name, less
``.txt`` and ``.gz``, names the class; README, SOURCE and LICENSE are not classes); a file is a TSV of
``label<TAB>text`` lines. Duplicates matter: a review kept twice can land on both sides of a split, and one found
under two labels is noise that no model can fit.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

from aiayn.data.corpus import read_lines

NOT_CLASSES = {"README", "SOURCE", "LICENSE"}  # files a data folder may hold beside its classes
Split = tuple[list[str], list[int]]  # texts, labels


def read_labelled(path: str | os.PathLike) -> tuple[list[str], list[int], list[str]]:
    """``(texts, labels, class names)`` of a folder of one file per class, or of a ``label<TAB>text`` file; the
    classes are sorted by name and ``labels`` index them.

    Raises:
        FileNotFoundError: no such folder or file, or a folder with no ``.txt`` / ``.txt.gz`` file.
        ValueError: a TSV line without a tab, or fewer than two classes.
    """
    path = Path(path)
    pairs: list[tuple[str, str]] = []  # (class, text)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.name.endswith((".txt", ".txt.gz"))
                       and p.name.split(".")[0].upper() not in NOT_CLASSES)
        if not files:
            raise FileNotFoundError(f"{path} holds no .txt or .txt.gz file (one file of texts per class)")
        for file in files:
            name = file.name.removesuffix(".gz").removesuffix(".txt")
            pairs += [(name, line) for line in read_lines(file)]
    elif path.is_file():
        for n, line in enumerate(read_lines(path), start=1):
            if line.strip():
                if "\t" not in line:
                    raise ValueError(f"{path}, line {n}: expected label<TAB>text")
                label, text = line.split("\t", 1)
                pairs.append((label.strip(), text))
    else:
        raise FileNotFoundError(f"no folder or file at {path}")
    classes = sorted({c for c, _ in pairs})
    if len(classes) < 2:
        raise ValueError(f"{path} holds {len(classes)} class ({classes}); a classifier needs at least two")
    index = {c: i for i, c in enumerate(classes)}
    texts = [t.strip() for _, t in pairs]
    keep = [i for i, t in enumerate(texts) if t]
    return [texts[i] for i in keep], [index[pairs[i][0]] for i in keep], classes


def clean(texts: list[str], labels: list[int]) -> tuple[list[str], list[int], dict[str, int]]:
    """Each text once (the first time it occurs), and none found under two labels.

    Returns:
        ``(texts, labels, {"read", "duplicates", "conflicting", "kept"})``: the counts of texts read, copies
        dropped, distinct texts dropped for carrying two labels, and texts kept.
    """
    seen: dict[str, set[int]] = {}
    for text, label in zip(texts, labels):
        seen.setdefault(text, set()).add(label)
    conflicting = {t for t, ls in seen.items() if len(ls) > 1}
    kept = [(t, next(iter(ls))) for t, ls in seen.items() if len(ls) == 1]  # dicts keep the first-seen order
    report = {"read": len(texts), "duplicates": len(texts) - len(seen), "conflicting": len(conflicting),
              "kept": len(kept)}
    return [t for t, _ in kept], [label for _, label in kept], report


def split(texts: list[str], labels: list[int], val: float, test: float, seed: int = 0) -> tuple[Split, Split, Split]:
    """``(train, validation, test)``, shuffled by ``seed`` and cut at the fractions ``val`` and ``test``.

    Raises:
        ValueError: fractions outside (0, 1) or together 1 or more, or a split left empty.
    """
    if not (0 < val < 1 and 0 < test < 1 and val + test < 1):
        raise ValueError(f"val={val} and test={test} must be fractions in (0, 1) that leave some to train on")
    order = list(range(len(texts)))
    random.Random(seed).shuffle(order)
    n_test, n_val = round(len(order) * test), round(len(order) * val)
    if min(n_test, n_val, len(order) - n_test - n_val) < 1:
        raise ValueError(f"{len(order)} texts cannot be split into train, val={val} and test={test}")
    parts = order[n_test + n_val:], order[n_test : n_test + n_val], order[:n_test]
    train, validation, held_out = (([texts[i] for i in p], [labels[i] for i in p]) for p in parts)
    return train, validation, held_out


__all__ = ["clean", "read_labelled", "split"]
