import os
import signal

import pytest
import torch

import aiayn
from aiayn.data import token_batches
from aiayn.training import fit, label_smoothed_loss, load_train_state, noam_optimizer, save_train_state

PAIRS = [([3 + (i * j) % 11 for j in range(1 + i % 7)] + [2], [4 + (i + j) % 9 for j in range(1 + i % 5)])
         for i in range(200)]


def loss_fn(model, batch):
    src, tgt_in, tgt_out = batch
    return label_smoothed_loss(model(src, tgt_in), tgt_out, model.cfg.pad_id, 0.1)


def setup():
    torch.manual_seed(0)
    model = aiayn.build("transformer-tiny", src_vocab_size=16, tgt_vocab_size=16, d_model=32, d_ff=64)
    optimizer, scheduler = noam_optimizer(model, 32, warmup=4)
    return model, optimizer, scheduler


def batches(start=0):
    return token_batches(PAIRS, 64, 0, 1, 2, seed=3, start=start)


def test_resuming_after_an_interrupt_gives_the_uninterrupted_run_bit_for_bit(tmp_path):
    model, opt, sched = setup()
    straight = fit(model, batches(), 12, opt, loss_fn, sched, accum=2, progress=False)
    expected = {k: v.clone() for k, v in model.state_dict().items()}

    # The same run, stopped by SIGINT in the middle of update 7: update 7 completes, the state is saved.
    model, opt, sched = setup()
    calls = [0]

    def interrupting_loss(model, batch):
        calls[0] += 1
        if calls[0] == 13:  # the first of update 7's two batches
            os.kill(os.getpid(), signal.SIGINT)
        return loss_fn(model, batch)

    def save(step, history):
        save_train_state(tmp_path, model, opt, sched, step, step * 2, {"history": history})

    with pytest.raises(KeyboardInterrupt, match="after step 7"):
        fit(model, batches(), 12, opt, interrupting_loss, sched, accum=2, progress=False, save=save, save_every=5)

    torch.manual_seed(123)  # a fresh process: nothing in memory carries over
    model, opt, sched = setup()
    state = load_train_state(tmp_path, model, opt, sched)
    assert state["step"] == 7 and state["batches"] == 14
    resumed = fit(model, batches(state["batches"]), 12, opt, loss_fn, sched, accum=2, progress=False,
                  start=state["step"], history=state["extra"]["history"])
    for name, value in model.state_dict().items():
        assert torch.equal(value, expected[name]), name
    assert [(r["step"], r["loss"], r["lr"]) for r in resumed] == [(r["step"], r["loss"], r["lr"]) for r in straight]
    assert opt.state_dict()["state"][0]["step"] == 12


def test_a_state_that_does_not_fit_the_model_is_refused_with_the_keys(tmp_path):
    model, opt, sched = setup()
    save_train_state(tmp_path, model, opt, sched, 0, 0)
    other = aiayn.build("transformer-tiny", src_vocab_size=16, tgt_vocab_size=16, d_model=32, d_ff=128)
    with pytest.raises(ValueError, match=r"misshapen .*ff\.fc1\.weight"):
        load_train_state(tmp_path, other, torch.optim.Adam(other.parameters()), None)
    (tmp_path / "train_state.safetensors").write_bytes(b"garbage")
    with pytest.raises(ValueError, match="truncated or corrupted"):
        load_train_state(tmp_path, model, opt, sched)
    with pytest.raises(FileNotFoundError, match="no training state"):
        load_train_state(tmp_path / "missing.safetensors", model, opt, sched)


def test_skipping_batches_continues_the_same_order():
    full = [b for _, b in zip(range(30), batches())]
    rest = [b for _, b in zip(range(20), batches(start=10))]
    for a, b in zip(full[10:], rest):
        assert all(torch.equal(x, y) for x, y in zip(a, b))


def test_bf16_autocast_runs_matmuls_in_bf16_and_still_learns():
    model, opt, sched = setup()
    seen = []
    handle = model.encoder.layers[0].ff.fc1.register_forward_hook(lambda m, i, o: seen.append(o.dtype))
    history = fit(model, batches(), 8, opt, loss_fn, sched, progress=False, autocast="bf16")
    handle.remove()
    assert seen and set(seen) == {torch.bfloat16}
    assert all(p.dtype == torch.float32 for p in model.parameters())  # master weights stay fp32
    assert history[-1]["loss"] < history[0]["loss"]
    with pytest.raises(ValueError, match="autocast='fp8'"):
        fit(model, batches(), 1, opt, loss_fn, autocast="fp8")
