"""Every flag of `aiayn train` is a field of its recipe's Config and reaches it; a flag a recipe does not take is
refused. The runs check that the settings the issue found dropped (--lr, --warmup, --set) now steer training."""

import dataclasses
import json
import math

import pytest

from aiayn import recipes
from aiayn.cli import _Parser, main
from aiayn.cli.train import to_config

# a value unlike the default for every field of every recipe (a new field without one fails the first test)
VALUES = {
    "preset": {"translation": "transformer-base", "lm": "gpt2", "mlm": "bert-base", "denoise": "bart-base",
               "image": "swin-tiny", "detect": "detr-r50", "textclass": "bert-base", "plm": "xlnet-base-cased"},
    "steps": 7, "minutes": 1.5, "warmup": 3, "accum": 2, "eval_every": 5, "save_every": 4, "bf16": True,
    "compile": True, "device": "cpu", "fp16": True, "grad_checkpoint": True, "seed": 9, "out": "elsewhere",
    "name": "mine", "average": 3, "val_data": "b.txt",
    "data": {"translation": ["a.tsv"], "lm": "a.txt", "mlm": "a.txt", "denoise": "a.txt", "image": "mnist",
             "detect": "voc", "textclass": "reviews", "plm": "a.txt"},
    "data_dir": "some/folder", "test_dir": "other/folder", "src_lang": "en", "tgt_lang": "zh", "tokenizer": "bpe",
    "vocab_size": 333, "n_train": 123, "n_test": 45, "max_tokens": 777, "schedule": "linear", "lr_factor": 0.7,
    "label_smoothing": 0.2, "beam": 3, "block": 32, "batch_size": 5, "lr": 0.0123, "beta2": 0.9,
    "weight_decay": 0.3, "clip": 0.5, "eval_blocks": 9, "eval_mem_len": 300, "max_len": 48, "noise": "mask,delete",
    "noise_ratio": 0.2, "seq_len": 24, "predict": 7,
    "shift": 1, "image_size": 96, "max_objects": 2, "lr_backbone": 0.002, "eos_coef": 0.3,
    "init_from": "runs/pretrained", "freeze": 2, "body_lr": 0.1, "n_examples": 77, "val_fraction": 0.2,
    "test_fraction": 0.15, "split_seed": 4, "model_type": "gpt", "log": "tensorboard", "nsp": False,
}


def value(field: str, task: str):
    v = VALUES[field]
    return v[task] if isinstance(v, dict) else v


def flag(field: str, v) -> list[str]:
    name = "--" + field.replace("_", "-")
    if isinstance(v, bool):  # --flag / --no-flag
        return [name if v else "--no-" + name[2:]]
    return [name, *v] if isinstance(v, list) else [name, str(v)]


@pytest.mark.parametrize("task", sorted(recipes.TASKS))
def test_every_field_is_a_flag_that_reaches_the_config(task):
    from aiayn.cli.train import INIT_FROM_FIELDS, takes_init_from

    fields = [f.name for f in dataclasses.fields(recipes.TASKS[task][0]) if f.name != "model"]
    assert set(fields) <= set(VALUES), f"give these fields a test value: {set(fields) - set(VALUES)}"
    if not takes_init_from(task):  # a recipe that trains from scratch only: no --init-from, refused when given
        fields = [f for f in fields if f not in INIT_FROM_FIELDS]
        with pytest.raises(SystemExit):
            to_config([task, "--init-from", "x"], _Parser)
    defaults = recipes.config(task)
    for field in fields:
        v = value(field, task)
        assert getattr(defaults, field) != v, f"{task}.{field}: the test value is the default"
        needs = {("detect", "data"): ["--data-dir", "x"], ("lm", "val_data"): ["--data", "a.txt"]}  # voc: its folder
        extra = needs.get((task, field), ["--init-from", "x"] if field in ("freeze", "body_lr") else [])
        cfg, _ = to_config([task, *flag(field, v), *extra], _Parser)
        assert getattr(cfg, field) == v, f"{task} --{field}"
        assert cfg.recipe == task
    cfg, _ = to_config(["--task", task, "--set", "d_model=64", "--set", "dropout=0.25"], _Parser)
    assert cfg.model == {"d_model": 64, "dropout": 0.25}


@pytest.mark.parametrize("task", sorted(recipes.TASKS))
def test_a_flag_the_recipe_does_not_take_is_refused(task, capsys):
    foreign = {"translation": "--block", "lm": "--max-tokens", "mlm": "--noise", "denoise": "--shift",
               "image": "--lr-factor", "detect": "--tokenizer", "textclass": "--block", "plm": "--nsp"}[task]
    for args in ([task, foreign, "1"], [task, "--bogus"], [task, "--set", "no_such_field=1"], [task, "--steps", "0"]):
        with pytest.raises(SystemExit) as exit:
            to_config(args, _Parser)
        assert exit.value.code == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and f"aiayn train {task}: error:" in err


def test_a_recipe_named_twice_is_refused_and_named_once_is_taken(capsys):
    with pytest.raises(SystemExit) as exit:  # the first word won silently before
        to_config(["lm", "--task", "translation"], _Parser)
    assert exit.value.code == 2 and "named twice: 'lm' and --task translation" in capsys.readouterr().err
    assert to_config(["lm", "--task", "lm"], _Parser)[0].recipe == "lm"
    assert to_config(["--task", "lm"], _Parser)[0].recipe == "lm"


def test_a_device_the_package_does_not_know_and_two_precisions_are_refused(capsys):
    for args in (["--device", "gpu"], ["--device", "cuda:x"], ["--bf16", "--fp16"]):
        with pytest.raises(SystemExit) as exit:
            to_config(args, _Parser)
        assert exit.value.code == 2
    err = capsys.readouterr().err
    assert "device='gpu' must be one of auto, cpu, cuda, cuda:N or mps" in err
    assert "bf16 and fp16 are two precisions" in err
    assert to_config(["--device", "CUDA:1"], _Parser)[0].device == "CUDA:1"  # checked, resolved when it trains


def test_a_config_file_is_read_and_flags_override_it(tmp_path):
    file = tmp_path / "recipe.toml"
    file.write_text('recipe = "lm"\nsteps = 40\nlr = 0.01\n[model]\nd_model = 32\nn_layers = 1\n')
    cfg, _ = to_config(["--config", str(file), "--steps", "50", "--set", "n_layers=2"], _Parser)
    assert (cfg.recipe, cfg.steps, cfg.lr, cfg.model) == ("lm", 50, 0.01, {"d_model": 32, "n_layers": 2})
    file.write_text('steps = 40\nblock = 8\n')  # translation takes no block
    with pytest.raises(SystemExit):
        to_config(["--config", str(file)], _Parser)


@pytest.mark.parametrize(("setting", "said"), [({"steps": 3.5}, "steps must be an int, got 3.5"),
                                             ({"steps": "x"}, "steps must be an int, got 'x'"),
                                             ({"eval_every": True}, "eval_every must be an int, got True"),
                                             ({"lr_factor": "big"}, "lr_factor must be a float, got 'big'"),
                                             ({"name": 5}, "name must be a str or None, got 5"),
                                             ({"compile": "yes"}, "compile must be a bool, got 'yes'")])
def test_a_setting_of_the_wrong_type_is_refused_by_name_before_anything_is_written(setting, said, tmp_path):
    # a --config file or a Python caller can give any type; a float step count once wrote the run folder and then
    # failed deep in training
    with pytest.raises(TypeError, match=said):
        recipes.train("translation", out=str(tmp_path), **setting)
    assert not any(tmp_path.iterdir())


def test_a_lone_string_is_a_list_of_one_where_a_list_is_wanted():
    cfg = recipes.config("translation", data="copy", lr_factor=2)  # an int where a float is wanted is a number
    assert cfg.data == ["copy"] and cfg.made_up and cfg.lr_factor == 2


def test_named_presets_are_a_task_and_settings():
    cfg = recipes.config("multi30k-de-en", data_dir="x")
    assert cfg.recipe == "translation" and cfg.data == ["multi30k"] and cfg.model["d_model"] == 256
    # the peak learning rate the Multi30k script trains at: 0.32 x 256^-0.5 x 400^-0.5 = 1e-3
    assert math.isclose(cfg.lr_factor * 256**-0.5 * cfg.warmup**-0.5, 1e-3)
    cfg, _ = to_config(["shakespeare-char", "--data", "x.txt", "--set", "d_model=64"], _Parser)
    assert cfg.recipe == "lm" and cfg.model["d_model"] == 64 and cfg.model["n_layers"] == 4  # --set adds


SMALL = {  # tiny runs: data, model and batch sizes (model fields through --set)
    "translation": ["copy", "--n-train", "300", "--n-test", "10", "--max-tokens", "128", "--set", "d_model=32",
                    "--set", "d_ff=64"],
    "lm": ["lm", "--n-train", "200", "--n-test", "5", "--block", "16", "--batch-size", "4", "--set", "d_model=32"],
    "mlm": ["mlm", "--n-train", "200", "--n-test", "10", "--batch-size", "4", "--set", "d_model=32"],
    "denoise": ["denoise", "--n-train", "200", "--n-test", "5", "--batch-size", "4", "--vocab-size", "300",
                "--set", "d_model=32"],
    "image": ["image", "--n-train", "64", "--n-test", "16", "--batch-size", "8", "--set", "d_model=32"],
    "detect": ["detect", "--n-test", "4", "--batch-size", "2", "--image-size", "48", "--set", "d_model=32"],
}


@pytest.mark.parametrize("task", sorted(SMALL))
def test_learning_rate_warmup_and_model_fields_reach_the_run(task, tmp_path, one_thread):
    warmup, steps = 3, 5
    rate = ["--lr-factor", "0.7"] if task == "translation" else ["--lr", "0.0123"]
    args = ["train", *SMALL[task], *rate, "--warmup", str(warmup), "--steps", str(steps), "--seed", "4",
            "--eval-every", "0", "--no-progress", "--out", str(tmp_path), "--name", "run"]
    assert main(args) == 0
    run = tmp_path / "run"
    saved = json.loads((run / "args.json").read_text())
    assert saved["recipe"] == task and saved["warmup"] == warmup and saved["steps"] == steps and saved["seed"] == 4
    assert saved["model"]["d_model"] == 32 and json.loads((run / "run.json").read_text())["config"]["d_model"] == 32
    lrs = [float(line.split(",")[3]) for line in (run / "history.csv").read_text().splitlines()[1:]]
    if task == "translation":  # the paper's rate at the end of the warm-up, times the factor
        peak = 0.7 * 32**-0.5 * warmup**-0.5
    else:
        peak = float(saved["lr"])
    assert math.isclose(lrs[0], peak / warmup, rel_tol=1e-6)  # linear warm-up from peak / warmup ...
    assert math.isclose(max(lrs), peak, rel_tol=1e-6) and lrs.index(max(lrs)) == warmup - 1  # ... to the peak
