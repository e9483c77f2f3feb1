import pytest
import torch

import aiayn
from aiayn.data import collate
from aiayn.training import fit, label_smoothed_loss


def loss_fn(model, batch):
    src, tgt_in, tgt_out = batch
    return label_smoothed_loss(model(src, tgt_in), tgt_out, model.cfg.pad_id, 0.1)


def test_accumulating_two_batches_equals_one_batch_twice_as_large():
    a = [([5, 6, 7, 2], [4, 5, 6]), ([8, 2], [9])]
    b = [([9, 9, 9, 9, 9, 9, 2], [7, 8, 9, 10, 11]), ([5, 2], [4, 4])]
    trained = []
    torch.manual_seed(0)
    untrained = aiayn.build("transformer-tiny", src_vocab_size=16, tgt_vocab_size=16, d_model=32, dropout=0.0)
    for accum, batches in ((2, [collate(a, 0, 1, 2), collate(b, 0, 1, 2)]), (1, [collate(a + b, 0, 1, 2)])):
        torch.manual_seed(0)
        model = aiayn.build("transformer-tiny", src_vocab_size=16, tgt_vocab_size=16, d_model=32, dropout=0.0)
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        fit(model, iter(batches), 1, opt, loss_fn, clip=None, accum=accum, progress=False)
        trained.append(model.state_dict())
    for name, p in trained[0].items():
        torch.testing.assert_close(p, trained[1][name], atol=1e-6, rtol=1e-6, msg=name)
    key = "encoder.layers.0.ff.fc1.weight"  # the same start (seed 0), so the update moved it
    assert (trained[0][key] - untrained.state_dict()[key]).abs().max() > 1e-4


def test_bad_arguments_are_refused_by_name():
    model = torch.nn.Linear(2, 1)

    def loss(model, batch):
        out = model(torch.ones(1, 2)).sum()
        return out, out.detach(), 1

    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for kwargs, message in [({"clip": -1.0}, "clip=-1.0 must be a positive"), ({"clip": 0}, "clip=0 must be"),
                            ({"start": 5}, r"start=5 must lie in \[0, steps=3\]")]:
        with pytest.raises(ValueError, match=message):
            fit(model, iter(range(9)), 3, opt, loss, progress=False, **kwargs)
    with pytest.raises(ValueError, match=r"pad_id=-1 must be a token id inside the vocabulary \[0, 8\)"):
        label_smoothed_loss(torch.randn(3, 8), torch.tensor([1, 2, 3]), -1)
    with pytest.raises(ValueError, match=r"epsilon=0\.1 spreads over the V - 2 tokens"):
        label_smoothed_loss(torch.randn(3, 2), torch.tensor([1, 0, 1]), 0)
    from aiayn.training import noam_optimizer

    with pytest.raises(ValueError, match="warmup=0 must be at least 1"):
        noam_optimizer(model, 512, warmup=0)


def test_a_nan_loss_stops_the_run_and_names_the_step():
    model = torch.nn.Linear(2, 2)
    calls = iter(range(100))

    def bad_loss(model, batch):
        n = next(calls)
        value = model(torch.ones(1, 2)).sum() * (float("nan") if n == 3 else 1.0)
        return value, value.detach(), 1

    with pytest.raises(FloatingPointError, match="at step 4"):
        fit(model, iter(range(100)), 10, torch.optim.SGD(model.parameters(), lr=0.1), bad_loss, progress=False)


def test_callback_runs_every_n_steps_and_at_the_end():
    model = torch.nn.Linear(2, 1)
    seen = []

    def loss(model, batch):
        out = model(torch.ones(1, 2)).pow(2).sum()
        return out, out.detach(), 1

    history = fit(model, iter(range(100)), 7, torch.optim.SGD(model.parameters(), lr=0.01), loss, progress=False,
                  every=3, callback=lambda step, h: seen.append((step, len(h))))
    assert seen == [(3, 3), (6, 6), (7, 7)]
    assert [r["step"] for r in history] == list(range(1, 8)) and history[-1]["loss"] < history[0]["loss"]


@pytest.mark.slow
def test_compiled_training_makes_the_updates_eager_training_makes():
    """``fit(compile=True)`` trains through ``torch.compile`` (about a minute of compiling on a small CPU)."""
    batches = [collate([([5, 6, 7, 2], [4, 5, 6]), ([8, 9, 2], [9, 3])], 0, 1, 2)] * 3
    trained = []
    for compile_ in (False, True):
        torch.manual_seed(0)
        model = aiayn.build("transformer-tiny", src_vocab_size=16, tgt_vocab_size=16, d_model=32, dropout=0.0)
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        history = fit(model, iter(batches), 3, opt, loss_fn, progress=False, compile=compile_)
        trained.append(([r["loss"] for r in history], model.state_dict()))
    assert trained[0][0] == pytest.approx(trained[1][0], abs=1e-5) and trained[0][0][-1] < trained[0][0][0]
    for name, p in trained[0][1].items():
        torch.testing.assert_close(p, trained[1][1][name], atol=1e-5, rtol=1e-5, msg=name)
