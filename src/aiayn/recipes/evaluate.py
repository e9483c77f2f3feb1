"""Scoring a saved run on data, whatever its task: what ``aiayn evaluate`` prints.

    translation   BLEU and chrF (sacrebleu, detokenized) and exact match     --data multi30k | TSV | two files
                                                                              [--beam N] [--weights FILE]
    lm            loss and perplexity on a text file                          --data FILE
    mlm           masked-token and next-sentence accuracy on a text file      --data FILE
    image         accuracy and the confusion matrix                           --data-dir MNIST files
    detect        mAP@0.5, mAP@[.5:.95] and the set loss                      --data-dir VOC folder [--split val]
    textclass     accuracy, precision, recall, F1 and the confusion matrix   --data class files | TSV
                                                                              [--split train|val|test|all]
                  (default: the test split of the run's own data; all of another file; ``split`` says which)

Each task's :class:`~aiayn.recipes.base.Evaluation` (``Recipe.evaluation``) says what it takes and scores the
run. Every task also takes ``device`` and ``quantize`` (``"int8"``: int8 weights on the CPU; see
:mod:`aiayn.pipelines.loading`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from aiayn.training.session import read_args


def evaluate(run: str | os.PathLike, **settings: Any) -> dict[str, Any]:
    """The numbers of the run folder ``run`` on the data ``settings`` name (see the table above), as its task's
    :class:`~aiayn.recipes.base.Evaluation` (``Recipe.evaluation``) scores them.

    Raises:
        ValueError: a setting the run's task does not take, or one it needs is missing.
    """
    from aiayn.recipes import TASKS

    folder = Path(run)
    if not (folder / "args.json").is_file() and (folder / "src_tokenizer.json").is_file():
        args: dict[str, Any] = {"recipe": "translation"}  # a converted Marian: a translation run never trained here
    else:
        args = read_args(run)
    task = args.get("recipe")
    scored = {name: recipe.evaluation for name, (_, recipe) in TASKS.items() if recipe.evaluation is not None}
    if task not in scored:
        raise ValueError(f"{run} is a {task} run; evaluate scores {', '.join(scored)} runs")
    evaluation = scored[task]
    takes = {*evaluation.takes, "device", "quantize"}
    extra = sorted(set(settings) - takes)
    if extra:
        raise ValueError(f"evaluating a {task} run takes {sorted(takes)}, not {extra}")
    if settings.get(evaluation.needs) is None:
        raise ValueError(f"evaluating a {task} run needs --{evaluation.needs.replace('_', '-')}")
    given = {k: v for k, v in settings.items() if v is not None or k == "quantize"}
    if evaluation.one_file and "data" in given:
        data = given["data"]
        file = data[0] if isinstance(data, list) and len(data) == 1 else data
        if not isinstance(file, (str, Path)):
            raise ValueError(f"evaluating a {task} run takes one file or folder as --data, got {data}")
        given["data"] = file
    return evaluation.score(folder, args, **given)
