"""Recipes: one module per task, each a ``Config`` (every setting and its default, once) and the task's parts.

    translation   the paper's Transformer: made-up dates or copies, Multi30k, Tatoeba      translate, evaluate
    lm            a GPT (or Transformer-XL) language model: made-up date lines or a text   generate
    mlm           BERT pre-training: masked LM + next sentence                              embed
    plm           XLNet pre-training: the permutation language model
    denoise       BART pre-training: reconstruct corrupted text
    image         ViT or Swin classifying digits the package draws, or MNIST                classify
    detect        DETR finding shapes the package draws, or a Pascal VOC folder             detect
    textclass     BERT's [CLS], GPT's or XLNet's last-token classifier on labelled texts (scratch or --init-from)

    import aiayn.recipes as recipes
    result = recipes.train("lm", steps=300, model={"d_model": 64})    # a task, or a named preset below
    result = recipes.train(recipes.config("multi30k-de-en", data_dir="data/multi30k"))
    recipes.resume("runs/lm-dates", steps=600)

Named presets are a task and a few settings, each with its reason (:data:`PRESETS`).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from aiayn.recipes import base, denoise, detect, image, lm, mlm, plm, textclass, translation
from aiayn.recipes.base import Recipe, RecipeConfig

# task -> (its Config, its Recipe)
TASKS: dict[str, tuple[type[RecipeConfig], type[Recipe]]] = {
    "translation": (translation.Config, translation.Translation),
    "lm": (lm.Config, lm.LanguageModel),
    "mlm": (mlm.Config, mlm.MaskedLM),
    "plm": (plm.Config, plm.PermutationLM),
    "denoise": (denoise.Config, denoise.Denoising),
    "image": (image.Config, image.ImageClassification),
    "detect": (detect.Config, detect.Detection),
    "textclass": (textclass.Config, textclass.TextClassification),
}

# README: a character GPT on tiny-shakespeare (benchmarks/lm_shakespeare.py, which also holds out a test split)
SHAKESPEARE_CHAR: dict[str, Any] = {
    "tokenizer": "char", "block": 128, "batch_size": 8,  # batch 8 beat 16 and 32 in 15 minutes
    "model": {"d_model": 128, "n_layers": 4, "n_heads": 4, "d_ff": 512, "max_len": 128, "dropout": 0.0,
              "activation": "gelu"},  # nanoGPT's CPU size; exact GELU is faster here than GPT-2's tanh form
    "lr": 2e-3, "beta2": 0.99, "weight_decay": 0.2, "warmup": 200,  # each chosen on validation
    "steps": 11427,  # the updates --minutes 15 chose (benchmarks/results/lm_shakespeare.json)
    "eval_every": 1000,
}

# name -> (task, settings): the setups the README's figures come from, and the made-up translation tasks
PRESETS: dict[str, tuple[str, dict[str, Any]]] = {
    "dates": ("translation", {}),  # the default job
    "copy": ("translation", {"data": ["copy"]}),
    # numeric day-first dates only order can read (benchmarks/positions.py); BPE makes each number one token
    "ambiguous-dates": ("translation", {"data": ["ambiguous-dates"], "tokenizer": "bpe"}),
    # README: Multi30k de -> en in 60 minutes on 2 CPU threads (benchmarks/translation_multi30k.py)
    "multi30k-de-en": ("translation", {
        "data": ["multi30k"],
        "model": {"d_model": 256, "n_heads": 4, "n_encoder_layers": 3, "n_decoder_layers": 3, "d_ff": 1024,
                  "max_len": 512},  # the largest model that still learns in an hour here (7.6M parameters)
        "max_tokens": 3072,  # ~100 pairs a batch: fewer, larger updates than the default's per second
        "warmup": 400, "schedule": "linear", "lr_factor": 0.32,  # peak 1e-3, decayed to zero at the end
        "steps": 1433,  # the updates --minutes 60 chose (benchmarks/results/translation_multi30k_de_en.json)
        "eval_every": 250,
        "average": 5,  # section 6.1; last or average, and greedy or beam, are chosen on validation
    }),
    "shakespeare-char": ("lm", SHAKESPEARE_CHAR),
    # README: Transformer-XL against that GPT (benchmarks/lm_shakespeare.py --recipe shakespeare-char-xl): its
    # parameters (d_ff 464 pays for r_net, u and v: 817,157 against 818,560) and its updates, the memory as long
    # as the segment; the training settings are the GPT's, so the model is all that differs
    "shakespeare-char-xl": ("lm", {
        **{k: v for k, v in SHAKESPEARE_CHAR.items() if k != "model"},
        "preset": "transfo-xl-char",
        "model": {"d_model": 128, "n_layers": 4, "n_heads": 4, "d_ff": 464, "mem_len": 128, "dropout": 0.0},
    }),
}

# preset -> (the setting it cannot train without, where to get it): without it the task would train on its
# made-up default data (Shakespeare's settings on date lines) and report numbers of nothing the preset names
SHAKESPEARE = ("data", "tiny-shakespeare: curl -O https://raw.githubusercontent.com/karpathy/char-rnn/master/data/"
                       "tinyshakespeare/input.txt, then --data input.txt")
NEEDS: dict[str, tuple[str, str]] = {"shakespeare-char": SHAKESPEARE, "shakespeare-char-xl": SHAKESPEARE}


def names() -> list[str]:
    """Every task and named preset ``aiayn train`` takes."""
    return [*TASKS, *PRESETS]


def task_of(name: str) -> str:
    """The task a task or preset name trains."""
    if name in TASKS:
        return name
    if name in PRESETS:
        return PRESETS[name][0]
    raise ValueError(f"unknown recipe {name!r}: expected one of {names()}")


def config(recipe: str, /, **settings: Any) -> RecipeConfig:
    """The ``Config`` of a task or named preset ``recipe``, with ``settings`` over its own.

    Raises:
        ValueError: a preset that trains on a file (:data:`NEEDS`) without it, saying where to get it.
    """
    task = task_of(recipe)
    preset = PRESETS[recipe][1] if recipe in PRESETS else {}
    if recipe in NEEDS and settings.get(NEEDS[recipe][0], preset.get(NEEDS[recipe][0])) is None:
        need, where = NEEDS[recipe]
        raise ValueError(f"the {recipe} preset trains on a file: give --{need.replace('_', '-')} FILE ({where})")
    merged = {**preset, **settings}
    if "model" in preset and "model" in settings:  # --set adds to the preset's model fields
        merged["model"] = {**preset["model"], **settings["model"]}
    return TASKS[task][0](**merged)


def from_dict(saved: dict[str, Any]) -> RecipeConfig:
    """The ``Config`` an ``args.json`` holds."""
    saved = dict(saved)
    task = saved.pop("recipe", None)
    if task not in TASKS:
        raise ValueError(f"args.json names recipe {task!r}; expected one of {list(TASKS)} (a run of an older aiayn "
                         f"cannot be resumed by this one)")
    cls = TASKS[task][0]
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(saved) - known)
    if unknown:
        raise ValueError(f"args.json has settings the {task} recipe does not take: {unknown}")
    return cls(**saved)


def train(cfg: RecipeConfig | str = "dates", /, resume: str | os.PathLike | None = None, progress: bool = True,
          verbose: bool = True, **settings: Any) -> dict[str, Any]:
    """Train a recipe: a ``Config``, or a task or preset name with ``settings`` over its defaults.

    Returns:
        ``{"run": the run folder, "history", "validation", "seconds", ...the task's final numbers}``.
    """
    if isinstance(cfg, str):
        cfg = config(cfg, **settings)
    elif settings:
        cfg = dataclasses.replace(cfg, **settings)
    return base.run(cfg, TASKS[cfg.recipe][1], resume, progress, verbose)


def resume(run: str | os.PathLike, steps: int | None = None, progress: bool = True,
           verbose: bool = True, device: str | None = None) -> dict[str, Any]:
    """Continue the run folder ``run`` from its last saved state with its own settings (``steps`` may raise the
    updates; ``device`` moves it, e.g. a run saved on a GPU goes on on a CPU). On one device it ends with exactly
    the weights and log of a run never interrupted."""
    from aiayn.training import train_state_info
    from aiayn.training.session import read_args

    try:
        cfg = from_dict(read_args(run))
    except (TypeError, ValueError) as e:  # a setting of the wrong type or value: the file is what is wrong
        raise ValueError(f"{Path(run) / 'args.json'}: {e}") from e
    changes: dict[str, Any] = {} if steps is None else {"steps": steps}
    if device is not None:
        changes["device"] = device
    accum = _kept_accum(cfg.accum, train_state_info(run)["extra"].get("batches_per_update"), verbose)
    if accum != cfg.accum:
        changes["accum"] = accum
    return base.run(dataclasses.replace(cfg, **changes), TASKS[cfg.recipe][1], Path(run), progress, verbose)


def _kept_accum(accum: int, per_update: int | None, verbose: bool) -> int:
    """Resuming under another number of ranks: keep the batches per update (``ranks x accum``), so the run goes
    on with the same optimisation; when the ranks do not divide it, keep ``accum`` and say so."""
    from aiayn.training import distributed

    ranks = distributed.world_size()
    if not per_update or per_update == ranks * accum:
        return accum
    if per_update % ranks == 0:
        return per_update // ranks
    if verbose and distributed.is_main():
        print(f"note: the run took {per_update} batches per update; {ranks} ranks x accum {accum} take "
              f"{ranks * accum} from here on")
    return accum


__all__ = ["NEEDS", "PRESETS", "TASKS", "config", "from_dict", "names", "resume", "task_of", "train"]
