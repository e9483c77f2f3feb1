"""`aiayn evaluate` scores a run of every task on data given to it, each number checked against the same
computation done here by hand; `aiayn viz history` draws any run; `--minutes` fits the updates to a budget."""

import dataclasses
import json
import math
import re

import pytest
import sacrebleu
import torch
import torch.nn.functional as F

import aiayn
from aiayn import recipes
from aiayn.cli import main
from aiayn.data import date_lines, load_tokenizer, make_pairs
from aiayn.data.images import normalise, synthetic_digits
from aiayn.pipelines.translation import translate
from aiayn.recipes.evaluate import evaluate
from shared import DATA

TINY = {"progress": False, "verbose": False, "steps": 3, "warmup": 1, "eval_every": 0}


# `runs`: a tiny run of every task, trained once per session (tests/cli/conftest.py)


def test_translation_bleu_is_sacrebleu_on_the_runs_own_translations(runs, tmp_path):
    pairs = make_pairs("copy", 0, 30, seed=5)[1]
    tsv = tmp_path / "pairs.tsv"
    tsv.write_text("".join(f"{s}\t{t}\n" for s, t in pairs))
    scores = evaluate(runs["translation"], data=[str(tsv)], beam=1)
    hyps = translate(runs["translation"], [s for s, _ in pairs])
    assert scores["n"] == 30 and scores["beam"] == 1
    assert math.isclose(scores["bleu"], sacrebleu.corpus_bleu(hyps, [[t for _, t in pairs]]).score, abs_tol=1e-9)


def test_lm_perplexity_is_the_mean_loss_of_every_block(runs, tmp_path):
    text = "\n".join(date_lines(40, seed=7)) + "\n"
    (tmp_path / "t.txt").write_text(text)
    scores = evaluate(runs["lm"], data=[str(tmp_path / "t.txt")])
    model, tok = aiayn.load(runs["lm"]).eval(), load_tokenizer(runs["lm"] / "tokenizer.json")
    ids = torch.tensor(tok.encode(text))
    block = model.cfg.max_len
    n = (ids.numel() - 1) // block
    x, y = ids[: n * block].view(n, block), ids[1 : n * block + 1].view(n, block)
    with torch.no_grad():
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten()).item()
    assert scores["tokens"] == n * block
    assert math.isclose(scores["loss"], loss, rel_tol=1e-5) and math.isclose(scores["perplexity"], math.exp(loss),
                                                                             rel_tol=1e-5)


def test_mlm_accuracies_are_shares_of_held_out_guesses(runs, tmp_path):
    (tmp_path / "t.txt").write_text("\n".join(date_lines(30, seed=8)) + "\n")
    scores = evaluate(runs["mlm"], data=[str(tmp_path / "t.txt")])
    assert scores["pairs"] == 29 and 0 <= scores["mlm_accuracy"] <= 1 and 0 <= scores["nsp_accuracy"] <= 1
    assert scores["nsp_accuracy"] * 29 == pytest.approx(round(scores["nsp_accuracy"] * 29))  # a count of 29 pairs
    again = evaluate(runs["mlm"], data=[str(tmp_path / "t.txt")])
    assert again == scores  # the masking is seeded: the same score twice


def test_image_accuracy_and_confusion_are_the_models_argmax(runs, tmp_path):
    images, labels = synthetic_digits(40, seed=9)
    folder = tmp_path / "mnist"
    folder.mkdir()
    (folder / "t10k-images-idx3-ubyte").write_bytes(bytes([0, 0, 8, 3]) + b"".join(
        n.to_bytes(4, "big") for n in (40, 28, 28)) + images[:, 0].numpy().tobytes())
    (folder / "t10k-labels-idx1-ubyte").write_bytes(bytes([0, 0, 8, 1]) + (40).to_bytes(4, "big")
                                                   + labels.to(torch.uint8).numpy().tobytes())
    scores = evaluate(runs["image"], data_dir=str(folder))
    with torch.no_grad():
        predicted = aiayn.load(runs["image"]).eval()(normalise(images)).argmax(-1)
    assert scores["n"] == 40 and scores["accuracy"] == pytest.approx((predicted == labels).float().mean().item())
    confusion = torch.tensor(scores["confusion"])
    assert confusion.sum() == 40 and confusion.diagonal().sum() == (predicted == labels).sum()


@pytest.mark.skipif(not (DATA / "bccd").is_dir(), reason="needs ../shared/data/bccd")
def test_detect_map_on_a_voc_split(tmp_path):
    run = recipes.train("detect", data="voc", data_dir=str(DATA / "bccd"), image_size=64, batch_size=2,
                        out=str(tmp_path), model={"d_model": 32}, **TINY)["run"]
    scores = evaluate(run, data_dir=str(DATA / "bccd"), split="test")
    assert scores["n"] == 72 and 0 <= scores["map"] <= scores["map50"] <= 1 and scores["val_loss"] > 0


def test_a_setting_the_task_does_not_take_is_refused(runs, capsys):
    with pytest.raises(ValueError, match=re.escape("takes ['data', 'device', 'mem_len', 'quantize'], not ['beam']")):
        evaluate(runs["lm"], data=["x.txt"], beam=4)
    assert main(["evaluate", "--run", str(runs["image"]), "--data", "x.txt"]) == 2
    assert "not ['data']" in capsys.readouterr().err
    assert main(["evaluate", "--run", str(runs["mlm"])]) == 2
    assert "needs --data" in capsys.readouterr().err


@pytest.mark.parametrize("task", ["lm", "mlm", "image"])
def test_viz_history_draws_any_run(task, runs, tmp_path):
    assert main(["viz", "history", "--run", str(runs[task]), "--out", str(tmp_path / "h.png")]) == 0
    assert (tmp_path / "h.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_viz_out_ending_in_png_is_the_file(tmp_path):
    assert main(["viz", "positional", "--out", str(tmp_path / "pe.png")]) == 0
    assert (tmp_path / "pe.png").is_file()


@pytest.mark.parametrize("task", ["copy", pytest.param("lm", marks=pytest.mark.slow)])  # lm: -m slow
def test_minutes_fit_the_updates_and_resume_keeps_them(task, tmp_path, one_thread):
    sizes = {"copy": {"n_train": 300, "n_test": 10, "max_tokens": 128},
             "lm": {"n_train": 200, "n_test": 5, "block": 16, "batch_size": 4}}[task]
    result = recipes.train(task, minutes=0.1, warmup=5, eval_every=2, out=str(tmp_path), progress=False,
                           verbose=False, model={"d_model": 32}, **sizes)
    saved = json.loads((result["run"] / "args.json").read_text())
    # the fitted count replaced the 1,000-odd default: what 6 seconds of updates allow, at least the timed ones + 1
    assert saved["minutes"] == 0.1 and 6 <= saved["steps"] == len(result["history"]) < 1000
    # every eval_every-th update validated, the 5 timed ones too, and the last
    steps = saved["steps"]
    assert [r["step"] for r in result["validation"]] == sorted({*range(2, steps + 1, 2), steps})
    longer = recipes.resume(result["run"], steps=saved["steps"] + 2, progress=False, verbose=False)
    assert len(longer["history"]) == saved["steps"] + 2
    assert json.loads((result["run"] / "args.json").read_text())["steps"] == saved["steps"] + 2  # a next resume
    # a run stopped while its first 5 updates were being timed (here: after 2, its steps not yet fitted) times the
    # rest on resume and fits its steps, instead of training the unfitted count
    early = recipes.train(task, steps=2, warmup=5, out=str(tmp_path / "early"), progress=False, verbose=False,
                          model={"d_model": 32}, **sizes)["run"]
    args = json.loads((early / "args.json").read_text())
    (early / "args.json").write_text(json.dumps({**args, "minutes": 0.1, "steps": 400}))
    fitted = recipes.resume(early, progress=False, verbose=False)
    steps = json.loads((early / "args.json").read_text())["steps"]
    assert steps != 400 and 6 <= steps == len(fitted["history"])


def test_average_is_the_mean_of_the_weights_kept_over_the_last_fifth_and_evaluate_reads_it(tmp_path, monkeypatch):
    from aiayn.recipes.base import average_points

    assert average_points(5, 1433) == [1205, 1262, 1319, 1376, 1433]  # the last 286 updates, 57 apart
    assert average_points(3, 10) == [8, 9, 10] and average_points(4, 2) == [1, 2] and average_points(0, 9) == []
    done = recipes.train("copy", n_train=300, n_test=10, max_tokens=128, out=str(tmp_path), model={"d_model": 32},
                         average=3, **{**TINY, "steps": 10})
    run = done["run"]
    kept = [aiayn.load(run / "checkpoints" / f"step{s}.safetensors").state_dict() for s in (8, 9, 10)]
    last, average = aiayn.load(run).state_dict(), aiayn.load(run / "average.safetensors").state_dict()
    assert json.loads((run / "run.json").read_text())["averaged_steps"] == [8, 9, 10]
    assert all(torch.equal(kept[-1][k], last[k]) for k in last)  # the last point is the final update
    assert max((sum(sd[k] for sd in kept) / 3 - average[k]).abs().max().item() for k in average) < 1e-6
    assert max((kept[0][k] - last[k]).abs().max().item() for k in last) > 1e-4  # three different weights

    pairs = make_pairs("copy", 0, 12, seed=5)[1]
    tsv = tmp_path / "pairs.tsv"
    tsv.write_text("".join(f"{s}\t{t}\n" for s, t in pairs))
    scores = evaluate(run, data=[str(tsv)], beam=1, weights="average.safetensors")
    hyps = translate(run, [s for s, _ in pairs], weights=run / "average.safetensors")
    assert math.isclose(scores["bleu"], sacrebleu.corpus_bleu(hyps, [[t for _, t in pairs]]).score, abs_tol=1e-9)
    with pytest.raises(FileNotFoundError, match=re.escape("weights='nothing.safetensors'")):
        translate(run, ["abc"], weights="nothing.safetensors")
    # another model's weights are refused, naming what differs, before the run's tokens are read as other words
    wider = aiayn.build(dataclasses.replace(aiayn.load(run).cfg, d_model=64))
    wider = aiayn.save(wider, tmp_path / "wider.safetensors")
    with pytest.raises(ValueError, match=r"weights='.*wider.safetensors' are not of this run's model "
                                         r"\(TransformerConfig\): d_model 64 \(the run's 32\)"):
        translate(run, ["abc"], weights=str(wider))
    gpt = aiayn.save(aiayn.build("gpt-tiny", vocab_size=16, n_layers=1), tmp_path / "gpt.safetensors")
    with pytest.raises(ValueError, match=r"are not of this run's model .*: a GPTConfig"):
        translate(run, ["abc"], weights=str(gpt))
    # a file name is the run's file first, even where the working folder holds one of that name
    (tmp_path / "elsewhere").mkdir()
    wider.rename(tmp_path / "elsewhere" / "average.safetensors")
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert translate(run, [s for s, _ in pairs], weights="average.safetensors") == hyps
