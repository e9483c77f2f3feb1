"""Activation checkpointing: the same gradients and outputs as the plain model, from fewer saved activations."""

import copy

import pytest
import torch

import aiayn
from aiayn.training import activations, checkpoint_blocks
from aiayn.training.activations import is_checkpointed


def gpt(dropout=0.0):
    return aiayn.build("gpt-tiny", vocab_size=32, max_len=16, d_model=32, d_ff=64, n_layers=3, dropout=dropout)


def transformer(dropout=0.0):
    return aiayn.build("transformer-tiny", src_vocab_size=16, tgt_vocab_size=16, d_model=32, d_ff=64,
                       dropout=dropout)


def vit(dropout=0.0):
    return aiayn.build("vit-tiny", d_model=32, d_ff=64, n_layers=2, dropout=dropout)


def swin(dropout=0.0):
    return aiayn.build("swin-tiny", dropout=dropout, drop_path=0.1 if dropout else 0.0)


def inputs(name):
    g = torch.Generator().manual_seed(0)
    if name == "gpt":
        return (torch.randint(3, 32, (2, 12), generator=g),)
    if name == "transformer":
        src = torch.randint(3, 16, (2, 7), generator=g)
        src[1, 5:] = 0  # padding: a mask goes into every encoder and decoder block
        return src, torch.randint(3, 16, (2, 5), generator=g)
    return (torch.randn(2, 1, 28, 28, generator=g),)


MODELS = {"gpt": gpt, "transformer": transformer, "vit": vit, "swin": swin}
BLOCKS = {"gpt": 3, "transformer": 4, "vit": 2, "swin": 4}  # decoder blocks; 2 + 2; encoder blocks; 2 + 2


def gradients(model, args, seed=0):
    model.train()
    model.zero_grad(set_to_none=True)
    torch.manual_seed(seed)  # the dropout masks
    out = model(*args)
    (out.float().pow(2).mean()).backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def pair(name, dropout=0.0):
    torch.manual_seed(0)
    plain = MODELS[name](dropout)
    checkpointed = copy.deepcopy(plain)
    assert checkpoint_blocks(checkpointed) == BLOCKS[name]
    return plain, checkpointed


@pytest.mark.parametrize("name", list(MODELS))
def test_checkpointed_blocks_give_the_plain_model_s_gradients_and_outputs(name):
    plain, checkpointed = pair(name)
    args = inputs(name)
    expected, got = gradients(plain, args), gradients(checkpointed, args)
    assert expected.keys() == got.keys() and len(got) == len(list(plain.parameters()))  # every weight learns
    for k in expected:
        torch.testing.assert_close(got[k], expected[k], atol=1e-6, rtol=1e-6, msg=k)
    plain.eval(), checkpointed.eval()
    with torch.no_grad():
        assert torch.equal(checkpointed(*args), plain(*args))
    assert list(checkpointed.state_dict()) == list(plain.state_dict())  # the same names: checkpoints load as before


@pytest.mark.parametrize("name", ["transformer", "swin"])
def test_the_recomputation_draws_the_dropout_and_stochastic_depth_masks_of_the_forward_pass(name):
    plain, checkpointed = pair(name, dropout=0.1)
    args = inputs(name)
    expected, got = gradients(plain, args, seed=5), gradients(checkpointed, args, seed=5)
    for k in expected:
        torch.testing.assert_close(got[k], expected[k], atol=1e-6, rtol=1e-6, msg=k)
    assert not all(torch.equal(a, b) for a, b in zip(expected.values(), gradients(plain, args, seed=6).values()))


def saved_numel(model, args):
    """How many numbers ``model(*args)`` keeps for the backward pass: what autograd saves, and the inputs
    of every checkpointed block, which the checkpoint holds outside autograd's hooks (a shared tensor such as
    the encoder's memory is counted once for each block it goes into: an overcount)."""
    total = [0]

    def pack(t):
        total[0] += t.numel()
        return t

    def count_inputs(module, args, kwargs):
        total[0] += sum(t.numel() for t in [*args, *kwargs.values()] if isinstance(t, torch.Tensor))

    hooks = [m.register_forward_pre_hook(count_inputs, with_kwargs=True) for m in model.modules()
             if is_checkpointed(m)]
    model.train()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(*args)
    for hook in hooks:
        hook.remove()
    out.float().pow(2).mean().backward()  # and the backward pass still runs from what was kept
    return total[0]


@pytest.mark.parametrize("name", list(MODELS))
def test_checkpointed_blocks_keep_fewer_activations_for_the_backward_pass(name):
    plain, checkpointed = pair(name)
    args = inputs(name)
    kept, plain_kept = saved_numel(checkpointed, args), saved_numel(plain, args)
    assert kept < plain_kept / 2, (kept, plain_kept)


def test_blocks_run_plainly_in_eval_without_gradients_and_with_a_cache(monkeypatch):
    _, model = pair("gpt")
    calls = []
    checkpoint = activations.checkpoint
    monkeypatch.setattr(activations, "checkpoint", lambda *a, **k: calls.append(1) or checkpoint(*a, **k))
    ids = inputs("gpt")[0]
    model.train()
    model(ids)
    assert len(calls) == 3
    with torch.no_grad():
        model(ids)
    model.eval()
    model(ids)
    model.train()  # decoding step by step while training (a sampled validation): the cache is written once
    cache = model.new_cache(16)
    full = model(ids[:, :6])
    step = model(ids[:, :5], cache=cache), model(ids[:, 5:6], cache=cache)
    torch.testing.assert_close(step[1][:, -1], full[:, -1], atol=1e-5, rtol=1e-5)
    assert len(calls) == 6  # the call without a cache only


def test_checkpointing_twice_wraps_nothing_twice_and_copies_stay_apart():
    _, model = pair("transformer")
    assert checkpoint_blocks(model) == 4  # still 4 blocks, each wrapped once
    assert all(is_checkpointed(b) for b in [*model.encoder.layers, *model.decoder.layers])
    assert not is_checkpointed(model) and checkpoint_blocks(torch.nn.Linear(2, 2)) == 0
    twin = copy.deepcopy(model)  # each copy's blocks run its own weights
    with torch.no_grad():
        for p in twin.parameters():
            p.zero_()
    args = inputs("transformer")
    model.eval()
    assert model(*args).abs().sum() > 0 and is_checkpointed(twin.encoder.layers[0])
    assert twin.encoder.layers[0].forward.args[0] is twin.encoder.layers[0]
