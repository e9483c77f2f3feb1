"""A warm-up as long as the run is fitted to it (a tenth of the run), so the rate peaks and decays before the end;
a run longer than its warm-up keeps the schedule exactly (the paper's noam with 4,000 of 100,000 updates)."""

from itertools import pairwise
from types import SimpleNamespace

import pytest

from aiayn import recipes
from aiayn.recipes import lm, textclass, translation
from aiayn.training import noam_lr, warmup_cosine


def rates(history):
    return [r["lr"] for r in history]


def test_a_short_run_warms_up_for_a_tenth_of_it_and_says_so(tmp_path, one_thread, capsys):
    # lm's default warm-up is 50 updates: a 30-update run would still be warming up at its end
    result = recipes.train("lm", steps=30, n_train=200, n_test=5, block=16, batch_size=4, eval_every=0,
                           model={"d_model": 16}, out=str(tmp_path), progress=False)
    lr = rates(result["history"])
    peak = max(lr)
    assert lr.index(peak) == 2 and peak == pytest.approx(lm.Config().lr)  # 3 updates of warm-up, to the peak
    assert all(a >= b for a, b in pairwise(lr[2:])) and lr[-1] < peak / 2  # then it decays to the end
    assert "warm-up 50 > the run's 30 updates: 3 updates of warm-up" in capsys.readouterr().out


def test_the_rule_keeps_a_warmup_shorter_than_the_run():
    assert textclass.Config(steps=60).warmup_for(60) == 6  # the 60-step fine-tune that scored chance
    assert textclass.Config(steps=5, warmup=1).warmup_for(5) == 1
    assert translation.Config().warmup_for(1000) == 200  # the default job: 200 of 1,000, as before
    assert translation.Config(warmup=3).warmup_for(5) == 3  # shorter than the run: kept, even if most of it
    assert lm.Config(warmup=0).warmup_for(10) == 0
    assert lm.Config(warmup=5).warmup_for(3) == 1  # a tenth of 3 updates is at least one
    assert lm.Config(warmup=2).warmup_for(2) == 2  # peaks at the last update: kept (a run resumed to more
    # updates then goes on with the schedule it started with)


def schedule(cfg):
    """Translation.schedule of ``cfg`` with a d_model 512 model, without building the data or the model."""
    task = SimpleNamespace(cfg=cfg, mcfg=SimpleNamespace(d_model=512))
    return lambda step, total: translation.Translation.schedule(task, step, total)  # type: ignore[arg-type]


def test_the_papers_schedule_is_unchanged_on_a_long_run():
    cfg = translation.Config(steps=100_000, warmup=4000, lr_factor=1.0)
    rate = schedule(cfg)
    for step in (0, 99, 3998, 3999, 4000, 15999, 99_999):
        assert rate(step, 100_000) == noam_lr(step + 1, 512, 4000)  # exactly: the same arithmetic
    linear = schedule(translation.Config(schedule="linear", warmup=200))
    peak = 0.3 * noam_lr(200, 512, 200)
    assert linear(99, 1000) == pytest.approx(peak / 2) and linear(199, 1000) == pytest.approx(peak)
    assert lm.LanguageModel.schedule(SimpleNamespace(cfg=lm.Config()), 30, 1500) == warmup_cosine(30, 50, 1500)


def test_a_short_noam_run_reaches_the_papers_peak_sooner_and_decays():
    cfg = translation.Config(steps=60, warmup=200, lr_factor=1.0)
    lr = [schedule(cfg)(step, 60) for step in range(60)]
    assert max(lr) == pytest.approx(noam_lr(200, 512, 200))  # the peak of the warm-up asked for, not a higher one
    assert lr.index(max(lr)) == 5 and lr[-1] < max(lr) and all(a > b for a, b in pairwise(lr[5:]))
