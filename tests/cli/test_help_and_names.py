"""Help and names: every flag's default in --help, per-picture help of `aiayn viz`, a train task's flags only,
`task =` and YAML configs, one attention picture to a .png path, `aiayn count` of a run folder."""

import argparse
import json
import sys

import pytest

import aiayn
from aiayn import recipes
from aiayn.cli import _Formatter, _parser, main
from aiayn.cli.train import read_config_file, to_config

TINY = {"progress": False, "verbose": False, "steps": 3, "warmup": 1, "eval_every": 0, "model": {"d_model": 32}}


@pytest.fixture(scope="module")
def lm_run(tmp_path_factory):
    return recipes.train("lm", n_train=100, n_test=5, block=16, batch_size=4,
                         out=str(tmp_path_factory.mktemp("runs")), **TINY)["run"]


def test_every_flag_says_its_default():
    commands = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    for name, sub in commands.items():
        for action in sub._actions:
            if action.option_strings and not isinstance(action, argparse._HelpAction) and \
                    action.help is not argparse.SUPPRESS:
                assert "default" in _Formatter(name)._get_help_string(action), f"aiayn {name} {action.dest}"


def test_viz_help_lists_the_pictures_own_flags(capsys):
    assert main(["viz", "attention", "--help"]) == 0
    attention = capsys.readouterr().out
    assert "--layer" in attention and "--from-token" in attention and "--d-model" not in attention
    assert main(["viz", "positional", "-h"]) == 0
    positional = capsys.readouterr().out
    assert "--d-model" in positional and "--layer" not in positional


def test_init_from_is_refused_by_a_task_that_cannot_start_from_weights(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit:
        to_config(["translation", "--init-from", "x"], argparse.ArgumentParser)
    assert exit.value.code == 2 and "--init-from" in capsys.readouterr().err
    assert to_config(["lm", "--init-from", "x"], argparse.ArgumentParser)[0].init_from == "x"
    (tmp_path / "c.toml").write_text('recipe = "translation"\ninit_from = "x"\n')
    with pytest.raises(SystemExit):
        to_config(["--config", str(tmp_path / "c.toml")], argparse.ArgumentParser)


def test_task_in_a_toml_file_and_yaml_files(tmp_path, monkeypatch):
    (tmp_path / "c.toml").write_text('task = "lm"\nsteps = 7\n')
    cfg, _ = to_config(["--config", str(tmp_path / "c.toml")], argparse.ArgumentParser)
    assert cfg.recipe == "lm" and cfg.steps == 7
    pytest.importorskip("yaml")
    (tmp_path / "c.yaml").write_text("task: lm\nsteps: 9\nmodel:\n  d_model: 32\n")
    cfg, _ = to_config(["--config", str(tmp_path / "c.yaml")], argparse.ArgumentParser)
    assert cfg.recipe == "lm" and cfg.steps == 9 and cfg.model == {"d_model": 32}
    monkeypatch.setitem(sys.modules, "yaml", None)  # PyYAML not installed
    with pytest.raises(ValueError, match="pip install pyyaml"):
        read_config_file(str(tmp_path / "c.yaml"))


def test_one_attention_picture_goes_to_a_png_path(lm_run, tmp_path):
    out = tmp_path / "pics" / "one.png"
    assert main(["viz", "attention", "--run", str(lm_run), "--text", "12 march", "--layer", "0", "--head", "0",
                 "--out", str(out)]) == 0
    assert out.is_file() and [p.name for p in out.parent.iterdir()] == ["one.png"]
    out.unlink()  # a GPT has one kind of attention: its grid of layers and heads is one picture too
    assert main(["viz", "attention", "--run", str(lm_run), "--text", "12 march", "--out", str(out)]) == 0
    assert out.is_file() and [p.name for p in out.parent.iterdir()] == ["one.png"]


def test_count_takes_a_run_folder(lm_run, capsys):
    assert main(["count", str(lm_run), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["parameters"]["total"] == aiayn.count_parameters(aiayn.load(lm_run))
