"""--log tensorboard: the numbers of history.csv and validation.json, as event files in RUN/tensorboard/."""

import csv
import importlib.util
import json

import pytest

from aiayn import recipes
from aiayn.recipes import lm


@pytest.mark.skipif(importlib.util.find_spec("tensorboard") is None, reason="needs tensorboard")
def test_the_event_files_hold_what_history_csv_holds(tmp_path, one_thread):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = recipes.train("lm", steps=6, warmup=2, eval_every=3, n_train=200, n_test=5, block=16, batch_size=4,
                        eval_blocks=2, model={"d_model": 16}, log="tensorboard", out=str(tmp_path), progress=False,
                        verbose=False)["run"]
    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    rows = list(csv.DictReader((run / "history.csv").open()))
    for column in ("loss", "nll", "lr", "tokens"):
        logged = [(e.step, e.value) for e in events.Scalars(f"train/{column}")]
        assert logged == [(int(r["step"]), pytest.approx(float(r[column]), rel=1e-6)) for r in rows], column
    validation = json.loads((run / "validation.json").read_text())
    assert [(e.step, e.value) for e in events.Scalars("validation/val_loss")] == \
        [(v["step"], pytest.approx(v["val_loss"], rel=1e-6)) for v in validation]
    assert len(validation) == 2


def test_tensorboard_is_refused_by_name_when_it_is_not_installed(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "tensorboard" else real(name, *a))
    with pytest.raises(ValueError, match=r"log='tensorboard' needs the tensorboard package: pip install"):
        lm.Config(log="tensorboard")
    with pytest.raises(ValueError, match=r"log='wandb': expected one of \['csv', 'tensorboard'\]"):
        lm.Config(log="wandb")
