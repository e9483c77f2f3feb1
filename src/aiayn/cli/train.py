"""``aiayn train``: arguments -> a recipe's ``Config``. Every flag is a field of the recipe's Config, with
its default and help from there, so a flag a recipe does not take is refused and every flag it takes reaches it.

    aiayn train [RECIPE] [--FIELD VALUE ...] [--set MODEL_FIELD=VALUE ...] [--config FILE]
    aiayn train --resume RUN [--steps N]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import typing
from pathlib import Path
from typing import Any

from aiayn import recipes

DEFAULT = "dates"
# flags of `aiayn train` that are not Config fields: where settings come from, and how the process runs
# what a resumed run may change: how long it trains, and where (a run saved on a GPU resumes on a CPU)
RESUME_MAY_CHANGE = {"steps", "device"}
RUN_FLAGS = ("task", "config", "resume", "set", "no_progress", "fsdp")
# the fields that only mean something when a recipe starts from other weights (Recipe.start_from)
INIT_FROM_FIELDS = ("init_from", "freeze", "body_lr")


def takes_init_from(task: str) -> bool:
    """Whether the recipe of ``task`` starts from other weights when given ``init_from``
    (:attr:`aiayn.recipes.base.Recipe.takes_init_from`); the others have no ``--init-from`` flag."""
    return recipes.TASKS[task][1].takes_init_from


def recipe_name(argv: list[str]) -> str | None:
    """The recipe ``argv`` names: its first word, or ``--task NAME``, or the ``recipe`` of the ``--resume`` run or
    of a ``--config`` file."""
    if argv and not argv[0].startswith("-"):
        return argv[0]
    for i, arg in enumerate(argv):
        if arg == "--task" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--task="):
            return arg.split("=", 1)[1]
    for i, arg in enumerate(argv):
        run = argv[i + 1] if arg == "--resume" and i + 1 < len(argv) else (
            arg.split("=", 1)[1] if arg.startswith("--resume=") else None)
        if run is not None and (Path(run) / "args.json").is_file():
            return read_config_file(str(Path(run) / "args.json")).get("recipe")
    for i, arg in enumerate(argv):
        path = argv[i + 1] if arg == "--config" and i + 1 < len(argv) else (
            arg.split("=", 1)[1] if arg.startswith("--config=") else None)
        if path is not None and Path(path).is_file():
            settings = read_config_file(path)
            return settings.get("recipe", settings.get("task"))
    return None


def read_config_file(path: str) -> dict[str, Any]:
    """The settings of a TOML recipe file (fields at the top level, ``recipe = NAME`` or ``task = NAME``, a
    ``[model]`` table), of a YAML one (``.yaml``, ``.yml``; the same keys, read with PyYAML when it is installed)
    or of a run's ``args.json``."""
    import tomllib

    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"--config: no file at {file}")
    kind = "JSON" if file.suffix == ".json" else "YAML" if file.suffix in (".yaml", ".yml") else "TOML"
    try:
        text = file.read_text(encoding="utf-8")
        settings = json.loads(text) if kind == "JSON" else _yaml(file, text) if kind == "YAML" else tomllib.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError, tomllib.TOMLDecodeError) as e:
        raise ValueError(f"{file} is not a {kind} file of settings: {e}") from e
    if not isinstance(settings, dict):
        raise ValueError(f"{file} holds a {kind} {type(settings).__name__}, not an object of settings")
    if not isinstance(settings.get("model", {}), dict):
        raise ValueError(f"{file}: model must be a table of config fields ([model] in TOML, an object in JSON), "
                         f"got {settings['model']!r}")
    return settings


def _yaml(file: Path, text: str) -> Any:
    """The YAML document ``text`` of ``file``, read with PyYAML (an optional dependency, named when missing)."""
    try:
        import yaml
    except ImportError as e:
        raise ValueError(f"{file}: YAML settings need PyYAML (pip install pyyaml), or write them as TOML") from e
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ValueError(f"{file} is not a YAML file of settings: {e}") from e


def parser(name: str, parser_class: type[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    """The parser of ``aiayn train NAME``: the run flags, and one flag per field of the recipe's Config."""
    task = recipes.task_of(name)
    config, _ = recipes.TASKS[task]
    preset = recipes.PRESETS.get(name, (task, {}))[1]
    p = parser_class(prog=f"aiayn train {name}", argument_default=argparse.SUPPRESS,
                     usage=f"aiayn train [{name}] [--FIELD VALUE ...] [--set FIELD=VALUE ...] [--config FILE]",
                     description=f"Train the {task} recipe" + (f" ({name}: {_settings(preset)})" if preset else "")
                     + f". Recipes: {', '.join(recipes.names())}.")
    p.add_argument("--task", choices=recipes.names(), help=f"the recipe: a task or named preset (default {DEFAULT}; "
                                                           "or as the first word)")
    p.add_argument("--config", metavar="FILE", help="settings from a TOML file (or a run's args.json); flags win")
    p.add_argument("--resume", metavar="RUN", help="continue the run folder RUN with its own settings (--steps "
                                                   "may raise the updates, --device move it)")
    p.add_argument("--set", action="append", metavar="FIELD=VALUE", dest="set",
                   help="a field of the model preset's config, e.g. --set d_model=256 (repeatable)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--fsdp", action="store_true", help="under torchrun: shard weights, gradients and optimizer "
                                                       "state over the ranks instead of copying the model to each")
    hints = typing.get_type_hints(config)
    skip = {"model", *(() if takes_init_from(task) else INIT_FROM_FIELDS)}
    for f in dataclasses.fields(config):
        if f.name in skip:
            continue
        default = preset.get(f.name, _default(f))
        kind, flag = hints[f.name], "--" + f.name.replace("_", "-")
        helptext = f"{f.metadata.get('help', '')} (default: {_show(default)})".replace("%", "%%")
        if kind is bool:
            p.add_argument(flag, action=argparse.BooleanOptionalAction, help=helptext)
        elif typing.get_origin(kind) is list or kind is list:
            p.add_argument(flag, nargs="+", metavar=f.name.upper(), help=helptext)
        else:
            p.add_argument(flag, type=_scalar(kind), metavar=f.name.upper(), help=helptext)
    return p


def to_config(argv: list[str], parser_class: type[argparse.ArgumentParser]
              ) -> tuple[recipes.RecipeConfig | None, argparse.Namespace]:
    """``(config, namespace)`` of ``aiayn train ARGV``; ``config`` is ``None`` with ``--resume`` (the run holds
    it). A wrong flag or value exits with status 2 and a one-line message naming it."""
    name = recipe_name(argv) or DEFAULT
    if name not in recipes.names():
        parser_class(prog="aiayn train").error(f"unknown recipe {name!r}: expected one of {recipes.names()}")
    p = parser(name, parser_class)
    args = p.parse_args(argv[1:] if argv and argv[0] == name else argv)  # the name, if first, is in prog
    if getattr(args, "task", None) not in (None, name):
        p.error(f"the recipe is named twice: {name!r} and --task {args.task}; give one")
    given = {k: v for k, v in vars(args).items() if k not in RUN_FLAGS}
    if getattr(args, "resume", None) is not None:
        extra = sorted(set(given) - RESUME_MAY_CHANGE) + (["--set"] if getattr(args, "set", None) else []) + (
            ["--config"] if getattr(args, "config", None) else [])
        if extra:
            p.error(f"--resume continues a run with its own settings; only {' and '.join(sorted(RESUME_MAY_CHANGE))} "
                    f"may change, got {extra}")
        return None, args
    settings = {}
    if getattr(args, "config", None):
        settings = read_config_file(args.config)
        for key in ("recipe", "task"):  # read by recipe_name; the command line's name wins
            settings.pop(key, None)
        taken = [k for k in INIT_FROM_FIELDS if k in settings and not takes_init_from(recipes.task_of(name))]
        if taken:
            p.error(f"{args.config}: the {recipes.task_of(name)} recipe does not start from other weights, so takes "
                    f"no {', '.join(taken)}")
    model = {**settings.pop("model", {}), **_model_fields(p, getattr(args, "set", None) or [])}
    settings.update(given)
    if model:
        settings["model"] = model
    try:
        return recipes.config(name, **settings), args
    except (TypeError, ValueError) as e:  # a field the recipe does not take (--config), or a bad value
        p.error(str(e))


def _model_fields(p: argparse.ArgumentParser, pairs: list[str]) -> dict[str, Any]:
    out = {}
    for pair in pairs:
        field, sep, value = pair.partition("=")
        if not sep or not field.strip():
            p.error(f"--set takes FIELD=VALUE, got {pair!r}")
        try:
            out[field.strip()] = json.loads(value)  # 256, 0.1, true, null, [1, 2]
        except json.JSONDecodeError:
            out[field.strip()] = value  # a word: gelu, rmsnorm
    return out


def _scalar(kind: Any):
    """The argparse type of a field annotated ``kind`` (``X`` or ``X | None``)."""
    args = [a for a in typing.get_args(kind) if a is not type(None)]
    return args[0] if args else kind


def _default(f: dataclasses.Field) -> Any:
    """A field's default, made by its factory where it has one (a list or dict setting)."""
    if f.default is not dataclasses.MISSING:
        return f.default
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else None


def _show(value: Any) -> str:
    return "none" if value is None else " ".join(value) if isinstance(value, list) else str(value)


def _settings(preset: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in preset.items())
