"""Defaults that say what they do: evaluate scores a textclass run's test split, a preset that needs a file refuses
without it, and a run folder without weights says why it has none."""

import json
import re

import pytest

from aiayn import recipes
from aiayn.cli import main
from aiayn.data.labelled import clean, read_labelled, split
from aiayn.pipelines.lm import load_lm_run
from aiayn.pipelines.textclass import load_classifier
from aiayn.pipelines.translation import load_run
from aiayn.recipes.evaluate import evaluate
from aiayn.recipes.textclass import date_halves


def test_evaluate_scores_the_test_split_of_the_runs_own_data_and_says_so(tmp_path, one_thread, capsys):
    texts, labels, _ = date_halves(200, seed=3)
    data = tmp_path / "d.tsv"
    data.write_text("".join(f"{'ab'[y]}\t{t}\n" for t, y in zip(texts, labels)))
    run = recipes.train("textclass", data=str(data), steps=2, warmup=1, eval_every=0, batch_size=8, vocab_size=200,
                        model={"d_model": 16, "d_ff": 32}, out=str(tmp_path), progress=False, verbose=False)["run"]
    args = json.loads((run / "args.json").read_text())
    kept, kept_labels, _ = clean(*read_labelled(data)[:2])
    test = split(kept, kept_labels, args["val_fraction"], args["test_fraction"], args["split_seed"])[2]
    scores = evaluate(run, data=str(data))  # not every text: the training texts would be scored too
    assert scores["split"] == "test" and scores["n"] == len(test[0]) < len(kept)
    assert evaluate(run, data=str(data), split="all")["n"] == len(kept)
    other = tmp_path / "other.tsv"  # a file the run never read is scored whole
    other.write_text("".join(f"{'ab'[y]}\t{t}\n" for t, y in zip(*date_halves(30, seed=8)[:2])))
    assert evaluate(run, data=str(other))["split"] == "all"
    assert main(["evaluate", "--run", str(run), "--data", str(data)]) == 0
    assert "split          test" in capsys.readouterr().out


def test_shakespeare_char_without_data_is_refused_with_where_to_get_it(tmp_path):
    with pytest.raises(ValueError, match=r"the shakespeare-char preset trains on a file: give --data FILE "
                                         r"\(tiny-shakespeare: curl -O https://"):
        recipes.train("shakespeare-char", out=str(tmp_path))
    assert not any(tmp_path.iterdir())  # nothing trained on made-up dates
    assert recipes.config("shakespeare-char", data="input.txt").data == "input.txt"


@pytest.mark.parametrize("load", [load_lm_run, load_run, load_classifier])
def test_a_run_without_weights_says_what_happened(load, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    with pytest.raises(FileNotFoundError, match=r"holds no model\.safetensors; is it a run folder written by"):
        load(run)
    (run / "args.json").write_text('{"recipe": "lm"}')
    with pytest.raises(FileNotFoundError, match="stopped before its first save, so no weights were written"):
        load(run)
    (run / "train_state.safetensors").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match=re.escape(f"`aiayn train --resume {run}` finishes it")):
        load(run)
