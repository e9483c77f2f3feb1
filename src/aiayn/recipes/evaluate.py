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

Every task also takes ``device`` and ``quantize`` (``"int8"``: int8 weights on the CPU; see
:mod:`aiayn.recipes.loading`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from aiayn.training.session import read_args

# the settings each task's evaluation takes
TAKES = {
    "translation": {"data", "data_dir", "split", "src_lang", "tgt_lang", "beam", "weights", "device", "quantize"},
    "lm": {"data", "device", "quantize"},
    "mlm": {"data", "device", "quantize"},
    "image": {"data_dir", "device", "quantize"},
    "detect": {"data_dir", "split", "device", "quantize"},
    "textclass": {"data", "split", "device", "quantize"},
}


def evaluate(run: str | os.PathLike, **settings: Any) -> dict[str, Any]:
    """The numbers of the run folder ``run`` on the data ``settings`` name (see the table above).

    Raises:
        ValueError: a setting the run's task does not take, or one it needs is missing.
    """
    folder = Path(run)
    if not (folder / "args.json").is_file() and (folder / "src_tokenizer.json").is_file():
        args: dict[str, Any] = {"recipe": "translation"}  # a converted Marian: a translation run never trained here
    else:
        args = read_args(run)
    task = args.get("recipe")
    if task not in TAKES:
        raise ValueError(f"{run} is a {task} run; evaluate scores {', '.join(TAKES)} runs")
    extra = sorted(set(settings) - TAKES[task])
    if extra:
        raise ValueError(f"evaluating a {task} run takes {sorted(TAKES[task])}, not {extra}")
    need = "data" if task in ("translation", "lm", "mlm", "textclass") else "data_dir"
    if settings.get(need) is None:
        raise ValueError(f"evaluating a {task} run needs --{need.replace('_', '-')}")
    where = settings.get("device")  # None: a GPU when there is one
    run_on: dict[str, Any] = {"device": where, "quantize": settings.get("quantize")}  # quantize None: float32 as saved
    if task == "translation":
        from aiayn.recipes.translation import evaluate as bleu

        langs: dict[str, Any] = {k: settings.get(k) or args.get(k) for k in ("src_lang", "tgt_lang")}
        beam = settings.get("beam", 4)
        scores = bleu(run, settings["data"], settings.get("data_dir"), settings.get("split", "test_2016_flickr"),
                      beam=beam, weights=settings.get("weights"), **run_on, **langs)
        return {**scores, "beam": beam}
    data = settings.get("data")
    file = data[0] if isinstance(data, list) and len(data) == 1 else data
    if task in ("lm", "mlm", "textclass") and not isinstance(file, (str, Path)):
        raise ValueError(f"evaluating a {task} run takes one file or folder as --data, got {data}")
    if task == "lm":
        from aiayn.recipes.lm import perplexity

        assert isinstance(file, (str, Path))  # refused above otherwise
        return perplexity(run, file, **run_on)
    if task == "mlm":
        from aiayn.recipes.mlm import masked_accuracy

        assert isinstance(file, (str, Path))  # refused above otherwise
        return masked_accuracy(run, file, **run_on)
    if task == "textclass":
        from aiayn.recipes.textclass import text_scores

        assert isinstance(file, (str, Path))  # refused above otherwise
        return text_scores(run, file, settings.get("split"), **run_on)
    if task == "image":
        from aiayn.recipes.image import image_accuracy

        return image_accuracy(run, settings["data_dir"], **run_on)
    from aiayn.recipes.detect import evaluate_voc

    return evaluate_voc(run, settings["data_dir"], settings.get("split", "val"), **run_on)
