"""Mixed precision in the training loop: fp16's loss scaling and skipped updates, bf16 against fp32, the
scaler kept by a run's state, batches moved to the model, and one wait for the device per update."""

import json
import math

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

import aiayn
from aiayn.data import collate
from aiayn.training import fit, label_smoothed_loss, load_train_state, save_train_state
from aiayn.training import loop as loop_module
from aiayn.training.loop import skipped_updates
from aiayn.training.session import Session, to_csv
from aiayn.viz.history import read_history

BIG = 1e6  # a loss this much larger overflows fp16's gradients (max 65,504) at any useful scale; fp32's do not


def regression(n=40, overflow_at=()):
    """Batches ``(x, y, big)`` for a ``Linear(4, 1)``; ``big`` multiplies the loss of the batches in
    ``overflow_at`` (counted from 0) so that their fp16 gradients overflow while the loss stays finite."""
    g = torch.Generator().manual_seed(1)
    w = torch.randn(4, 1, generator=g)
    for i in range(n):
        x = torch.randn(8, 4, generator=g)
        yield x, x @ w, BIG if i in overflow_at else 1.0


def squared_error(model, batch):
    x, y, big = batch
    loss = (model(x).float() - y).pow(2).sum() * big  # fp32 whatever the forward ran in, as the real losses
    return loss, loss.detach() / big, x.size(0)


def linear():
    torch.manual_seed(0)
    return torch.nn.Linear(4, 1)


def test_fp16_skips_the_update_whose_gradients_overflow_lowers_the_scale_and_trains_on():
    model = linear()
    scaler = torch.amp.GradScaler("cpu", init_scale=64.0)  # small enough for these gradients, but not for BIG
    weights = []
    history = fit(model, regression(overflow_at={2}), 8, torch.optim.SGD(model.parameters(), lr=0.02),
                  squared_error, progress=False, autocast="fp16", scaler=scaler, every=1,
                  callback=lambda step, h: weights.append(model.weight.detach().clone()))
    assert [r["skipped"] for r in history] == [0, 0, 1, 0, 0, 0, 0, 0] and skipped_updates(history) == 1
    assert torch.equal(weights[2], weights[1])  # update 3 changed nothing
    assert all(not torch.equal(weights[i], weights[i - 1]) for i in (1, 3, 4, 5, 6, 7))  # the others did
    assert scaler.get_scale() == 32.0  # halved once; growing again takes 2,000 good updates
    assert all(math.isfinite(r["loss"]) for r in history)
    assert history[-1]["loss"] < history[3]["loss"] < history[0]["loss"]  # trains on after the skip


def test_fp16_with_the_default_scale_skips_the_first_updates_until_the_gradients_fit():
    model = linear()
    scaler = torch.amp.GradScaler("cpu")  # 2^16: the first gradients in fp16 overflow
    history = fit(model, regression(), 40, torch.optim.SGD(model.parameters(), lr=0.05), squared_error,
                  progress=False, autocast="fp16", scaler=scaler)
    skipped, k = [r["skipped"] for r in history], skipped_updates(history)
    assert skipped[0] == 1 and not any(skipped[-20:])  # halved until the gradients fit, then no more
    assert scaler.get_scale() == 2.0**16 / 2**k  # once for each update skipped
    assert history[-1]["loss"] < history[0]["loss"] / 10


def nan_gradient(model, batch):
    """``squared_error``, plus sqrt(0 * loss) for the batches marked ``big``: sqrt'(0) = inf makes the
    gradient NaN whatever the scale, while the loss stays finite."""
    loss, nll, n = squared_error(model, batch[:2] + (1.0,))
    return (loss + (loss * 0).sqrt() if batch[2] > 1 else loss), nll, n


@pytest.mark.parametrize("autocast", [None, "bf16"])
def test_fp32_and_bf16_still_stop_on_a_non_finite_gradient(autocast):
    model = linear()
    with pytest.raises(FloatingPointError, match="gradient norm is nan at step 2"):
        fit(model, regression(overflow_at={1}), 5, torch.optim.SGD(model.parameters(), lr=0.02), nan_gradient,
            progress=False, autocast=autocast)


def test_fp16_still_stops_on_a_non_finite_loss_and_on_gradients_that_overflow_at_any_scale():
    model = linear()

    def nan_loss(model, batch):
        loss, nll, n = squared_error(model, batch)
        return loss * math.nan, nll, n

    with pytest.raises(FloatingPointError, match="the loss is nan at step 1"):
        fit(model, regression(), 3, torch.optim.SGD(model.parameters(), lr=0.02), nan_loss, progress=False,
            autocast="fp16")

    scaler = torch.amp.GradScaler("cpu", init_scale=1e-3)  # halved at every update: below 1e-4 at the 4th
    with pytest.raises(FloatingPointError, match=r"at step 4 with the fp16 loss scale down to 6\.25e-05"):
        fit(model, regression(overflow_at=set(range(40))), 10, torch.optim.SGD(model.parameters(), lr=0.02),
            nan_gradient, progress=False, autocast="fp16", scaler=scaler)


def test_a_scaler_is_refused_outside_fp16():
    model = linear()
    with pytest.raises(ValueError, match="scaler is for autocast='fp16' only, not autocast='bf16'"):
        fit(model, regression(), 1, torch.optim.SGD(model.parameters(), lr=0.1), squared_error, progress=False,
            autocast="bf16", scaler=torch.amp.GradScaler("cpu"))


PAIRS = [([5, 6, 7, 2], [4, 5, 6]), ([8, 9, 10, 11, 2], [9, 3]), ([12, 2], [7, 8, 9, 10])]


def seq2seq_loss(model, batch):
    src, tgt_in, tgt_out = batch
    return label_smoothed_loss(model(src, tgt_in), tgt_out, model.cfg.pad_id, 0.1)


@pytest.mark.parametrize(("autocast", "rtol"), [("bf16", 2e-2), ("fp16", 5e-3)])
def test_the_loss_under_autocast_is_within_a_tolerance_of_fp32_on_the_same_batch(autocast, rtol):
    """bf16 keeps 8 bits of mantissa, fp16 11: the loss of one batch moves by well under 2% and 0.5%."""
    losses = {}
    for precision in (None, autocast):
        torch.manual_seed(0)
        model = aiayn.build("transformer-tiny", src_vocab_size=16, tgt_vocab_size=16, d_model=32, dropout=0.0)
        history = fit(model, iter([collate(PAIRS, 0, 1, 2)]), 1, torch.optim.SGD(model.parameters(), lr=0.0),
                      seq2seq_loss, progress=False, autocast=precision)
        losses[precision] = history[0]["loss"], history[0]["nll"]
    assert losses[autocast] == pytest.approx(losses[None], rel=rtol)
    assert losses[autocast] != losses[None]  # it did run in the lower precision


def batches_from(position, overflow_at=frozenset({1})):
    stream = regression(overflow_at=overflow_at)
    for _ in range(position):
        next(stream)
    return stream


def session(folder, scaler=None):
    model = linear()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: 1 / (1 + i))
    return Session(folder, model, optimizer, scheduler, scaler=scaler)


def test_the_loss_scale_is_saved_with_the_run_and_resuming_continues_the_run_bit_for_bit(tmp_path):
    # growth every 2 good updates, so that the growth tracker too must survive the resume
    def scaler():
        return torch.amp.GradScaler("cpu", init_scale=64.0, growth_interval=2)

    straight = session(tmp_path / "a", scaler())
    straight.fit(batches_from(0), 7, squared_error, progress=False, autocast="fp16")

    first = session(tmp_path / "b", scaler())
    first.fit(batches_from(0), 3, squared_error, progress=False, autocast="fp16")
    saved = first.scaler.state_dict()
    assert saved["scale"] == 32.0 and saved["_growth_tracker"] == 1  # halved at update 2, one good update since

    resumed = session(tmp_path / "b")  # a fresh process: no scaler until the state brings one
    assert resumed.scaler is None
    step, history = resumed.restore()
    assert step == len(history) == 3 and resumed.scaler is not None and resumed.scaler.state_dict() == saved
    resumed.fit(batches_from(resumed.position), 7, squared_error, progress=False, autocast="fp16")

    assert torch.equal(resumed.model.weight, straight.model.weight) and torch.equal(resumed.model.bias,
                                                                                    straight.model.bias)
    assert resumed.scaler.state_dict() == straight.scaler.state_dict()
    assert straight.scaler.get_scale() == 128.0  # 64 -> 32 at the skip, then doubled after updates 4 and 6

    def without_seconds(h):
        return [{k: v for k, v in r.items() if k != "seconds"} for r in h]

    assert without_seconds(resumed._history) == without_seconds(straight._history)
    assert [r["skipped"] for r in straight._history] == [0, 1, 0, 0, 0, 0, 0]
    history_csv, _ = read_history(tmp_path / "b")
    assert [r["skipped"] for r in history_csv] == [0, 1, 0, 0, 0, 0, 0]


def test_a_state_written_before_scalers_were_saved_resumes_with_a_fresh_scaler(tmp_path):
    run = session(tmp_path)
    run.fit(batches_from(0), 2, squared_error, progress=False)  # fp32: no scaler
    file = tmp_path / "train_state.safetensors"
    with safe_open(str(file), framework="pt") as f:
        meta, tensors = f.metadata(), {k: f.get_tensor(k) for k in f.keys()}
    state = json.loads(meta["aiayn_train_state"])
    assert state["scaler"] is None
    del state["scaler"]  # as the files of earlier versions are
    save_file(tensors, file, metadata={**meta, "aiayn_train_state": json.dumps(state)})

    fresh = torch.amp.GradScaler("cpu", init_scale=8.0)
    model = linear()
    loaded = load_train_state(tmp_path, model, torch.optim.Adam(model.parameters()), None, scaler=fresh)
    assert loaded["scaler"] is None and loaded["step"] == 2 and fresh.get_scale() == 8.0

    resumed = session(tmp_path)
    assert resumed.restore()[0] == 2 and resumed.scaler is None
    history = resumed.fit(batches_from(resumed.position), 4, squared_error, progress=False, autocast="fp16")
    assert resumed.scaler is not None and resumed.scaler.get_scale() < 2.0**16  # made fresh, and it overflowed
    rows, _ = read_history(tmp_path)
    assert [r["skipped"] for r in rows[:2]] == [0, 0] and [r["skipped"] for r in history[2:]] == [
        r["skipped"] for r in rows[2:]]


def test_session_fit_refuses_a_scaler_of_its_own(tmp_path):
    run = session(tmp_path)
    with pytest.raises(TypeError, match=r"Session\(scaler=\)"):
        run.fit(batches_from(0), 1, squared_error, progress=False, autocast="fp16",
                scaler=torch.amp.GradScaler("cpu"))


def test_save_train_state_keeps_the_scale_and_load_train_state_restores_it(tmp_path):
    model = linear()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**-3, growth_factor=4.0, growth_interval=7)
    save_train_state(tmp_path, model, optimizer, None, 1, 1, scaler=scaler)
    other = torch.amp.GradScaler("cpu")
    assert load_train_state(tmp_path, model, optimizer, None, scaler=other)["scaler"] == scaler.state_dict()
    assert other.state_dict() == scaler.state_dict() and other.get_scale() == 0.125


def test_history_csv_has_a_skipped_column_reading_0_for_records_without_one(tmp_path):
    history = [{"step": 1, "loss": 2.0, "seconds": 0.1},
               {"step": 2, "loss": 1.5, "skipped": 1, "seconds": 0.2}]
    assert to_csv(history).splitlines() == ["step,loss,skipped,seconds", "1,2.0,0,0.1", "2,1.5,1,0.2"]


def test_batches_go_to_the_model_s_device_and_on_the_cpu_are_not_copied(monkeypatch):
    model = linear().to(torch.device("cpu"))
    given, seen, moves = list(regression(n=6)), [], []
    move = loop_module.device.move

    def spy(obj, where):
        moves.append(where)
        return move(obj, where)

    def loss_fn(model, batch):
        seen.append(batch)
        return squared_error(model, batch)

    monkeypatch.setattr(loop_module.device, "move", spy)
    fit(model, iter(given), 3, torch.optim.SGD(model.parameters(), lr=0.01), loss_fn, accum=2, progress=False)
    assert moves == [torch.device("cpu")] * 6  # every batch, to where the parameters are
    assert all(s[0] is g[0] and s[1] is g[1] for s, g in zip(seen, given))  # the same tensors: no copy


def count_reads(monkeypatch) -> list[str]:
    """The names of the tensor methods that read a value back to the host, in the order they are called, until
    ``monkeypatch.undo()``."""
    reads = []
    for name in ("item", "tolist", "__float__", "__int__", "__bool__"):
        method = getattr(torch.Tensor, name)

        def counted(self, *args, _method=method, _name=name, **kwargs):
            reads.append(_name)
            return _method(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counted)
    return reads


@pytest.mark.parametrize("autocast", [None, "fp16"])
def test_an_update_waits_for_the_device_once_however_many_batches_it_accumulates(monkeypatch, autocast):
    """The loss sums of the ``accum`` batches and the gradient norm are read together, not one ``.item()``
    each: on a GPU every read makes the host wait for all the work queued before it."""
    reads = count_reads(monkeypatch)
    model = linear()
    scaler = torch.amp.GradScaler("cpu", init_scale=64.0) if autocast else None
    history = fit(model, regression(), 3, torch.optim.SGD(model.parameters(), lr=0.01), squared_error, accum=4,
                  progress=False, autocast=autocast, scaler=scaler)
    monkeypatch.undo()
    assert reads == ["tolist"] * 3 and len(history) == 3


def test_the_numbers_an_update_reports_are_those_read_batch_by_batch():
    """The sums read once per update are the Python sums of each batch's float32 values, in order."""
    model = linear()
    batches = list(regression(n=4))
    expected_loss = expected_nll = 0.0
    with torch.no_grad():
        for b in batches:
            loss, nll, _ = squared_error(model, b)
            expected_loss, expected_nll = expected_loss + loss.item(), expected_nll + nll.item()
    history = fit(model, iter(batches), 1, torch.optim.SGD(model.parameters(), lr=0.01), squared_error, accum=4,
                  progress=False)
    assert history[0]["loss"] == expected_loss / 32 and history[0]["nll"] == expected_nll / 32


def counted_on_the_device(model, batch):
    """``squared_error`` with its count as a tensor, as ``label_smoothed_loss`` hands it back on a GPU."""
    loss, nll, n = squared_error(model, batch)
    return loss, nll, torch.tensor(n)


def test_a_token_count_kept_on_the_device_is_read_with_the_losses_and_trains_the_same(monkeypatch):
    """A loss may count its tokens on the device (reading the count per batch would wait for it): the update
    divides by the tensor and reads it with the losses and the norm, once, to the same weights and records."""
    runs = {}
    for loss_fn in (squared_error, counted_on_the_device):
        model = linear()
        history = fit(model, regression(), 3, torch.optim.SGD(model.parameters(), lr=0.01), loss_fn, accum=4,
                      progress=False)
        runs[loss_fn.__name__] = (model.weight.detach().clone(), [{**r, "seconds": 0} for r in history])
    (w_int, h_int), (w_tensor, h_tensor) = runs.values()
    assert torch.equal(w_int, w_tensor) and h_int == h_tensor and h_tensor[0]["tokens"] == 32

    reads = count_reads(monkeypatch)
    model = linear()
    fit(model, regression(), 2, torch.optim.SGD(model.parameters(), lr=0.01), counted_on_the_device, accum=4,
        progress=False)
    monkeypatch.undo()
    assert reads == ["tolist"] * 2


def test_label_smoothed_loss_counts_on_the_device_without_reading_it():
    """On the meta device any read raises: off the CPU the token count stays a tensor."""
    logits, target = torch.zeros(2, 5, 7, device="meta"), torch.zeros(2, 5, dtype=torch.long, device="meta")
    _, _, n = label_smoothed_loss(logits, target, pad_id=0)
    assert isinstance(n, torch.Tensor) and n.device.type == "meta"
    _, _, n = label_smoothed_loss(torch.randn(2, 5, 7), torch.randint(1, 7, (2, 5)), pad_id=0)
    assert n == 10 and isinstance(n, int)
