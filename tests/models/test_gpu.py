"""On a CUDA GPU, every family computes what it computes on the CPU (fp32, TF32 off), trains a step to the same
weights, decodes the same greedy tokens with the key/value cache, and keeps its loss in float32 under bf16.

Skipped without CUDA (``pytest -m gpu`` on a machine with one; ``benchmarks/gpu.sh`` runs them first).
"""

from __future__ import annotations

import copy

import pytest
import torch

import aiayn
from aiayn.decoding import greedy, sample
from aiayn.training.losses import label_smoothed_loss

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
B, S, T = 3, 12, 9


@pytest.fixture(autouse=True)
def exact_fp32():
    """TF32 would round the GPU's float32 matmuls to 10 mantissa bits: off for comparisons with the CPU."""
    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


def family(name: str) -> tuple[torch.nn.Module, tuple]:
    """A small model of ``name`` with random weights (biases too) and inputs for its forward, on the CPU."""
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    if name == "transformer":
        model = aiayn.build("transformer-tiny", d_model=32, n_heads=4, d_ff=64, dropout=0.0)
        src = torch.randint(4, 60, (B, S), generator=g)
        src[1, -3:] = model.cfg.pad_id
        inputs: tuple = (src, torch.randint(4, 60, (B, T), generator=g))
    elif name == "gpt":
        model = aiayn.build("gpt-tiny", vocab_size=50, d_model=32, n_heads=4, n_layers=2, d_ff=64, dropout=0.0)
        inputs = (torch.randint(0, 50, (B, S), generator=g),)
    elif name == "bert":
        model = aiayn.build("bert-tiny", d_model=32, n_heads=4, d_ff=64, dropout=0.0)
        inputs = (torch.randint(5, 60, (B, S), generator=g),)
    elif name == "bart":
        model = aiayn.build("bart-tiny", dropout=0.0)
        inputs = (torch.randint(4, 60, (B, S), generator=g), torch.randint(4, 60, (B, T), generator=g))
    elif name == "vit":
        model = aiayn.build("vit-tiny", patch_size=7, d_model=32, n_heads=4, n_layers=2, d_ff=64, dropout=0.0)
        inputs = (torch.randn(B, 1, 28, 28, generator=g),)
    elif name == "swin":
        model = aiayn.build("swin-tiny", patch_size=2, d_model=8, n_layers=(2, 2), n_heads=(2, 2), window_size=4)
        inputs = (torch.randn(B, 1, 16, 16, generator=g),)
    else:
        model = aiayn.build("detr-tiny")
        inputs = (torch.randn(2, 3, 64, 64, generator=g), torch.ones(2, 64, 64, dtype=torch.bool))
    with torch.no_grad():
        for p in model.parameters():  # random biases and norms: a device bug in any of them shows
            if p.dim() == 1:
                p.add_(torch.randn(p.shape, generator=g) * 0.1)
    return model.eval(), inputs


def first_tensor(out):
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, dict):
        return out["logits"] if "logits" in out else next(iter(out.values()))
    return out[0]


@pytest.mark.parametrize("name", ["transformer", "gpt", "bert", "bart", "vit", "swin", "detr"])
def test_fp32_outputs_on_the_gpu_equal_the_cpus(name):
    model, inputs = family(name)
    with torch.no_grad():
        cpu = first_tensor(model(*inputs))
        gpu = first_tensor(copy.deepcopy(model).cuda()(*(x.cuda() for x in inputs)))
    assert gpu.device.type == "cuda"
    torch.testing.assert_close(gpu.cpu(), cpu, atol=1e-4, rtol=1e-4)


def test_a_training_step_on_the_gpu_gives_the_cpus_gradients():
    # gradients, not Adam-updated weights: the key biases' true gradient is zero (softmax is shift-invariant), so
    # Adam's first step, lr * g / |g|, turns each side's rounding noise into a full lr-sized move of either sign
    model, (src, tgt) = family("transformer")
    model.eval()  # no dropout: the two devices draw different masks
    twin = copy.deepcopy(model).cuda()
    for m, (s, t) in ((model, (src, tgt)), (twin, (src.cuda(), tgt.cuda()))):
        loss, _, n = label_smoothed_loss(m(s, t[:, :-1]), t[:, 1:], m.cfg.pad_id, 0.1)
        (loss / n).backward()
    for (name, a), b in zip(model.named_parameters(), twin.parameters()):
        assert a.grad is not None and b.grad is not None, name
        torch.testing.assert_close(b.grad.cpu(), a.grad, atol=1e-5, rtol=1e-4, msg=name)


def test_greedy_tokens_with_the_cache_are_the_same_on_the_gpu():
    model, (src, _) = family("transformer")
    gpu = copy.deepcopy(model).cuda()
    assert torch.equal(greedy(gpu, src.cuda(), max_len=12).cpu(), greedy(model, src, max_len=12))
    lm, (ids,) = family("gpt")
    prompts = ids[:, :5].tolist()
    assert (sample(copy.deepcopy(lm).cuda(), prompts, max_new_tokens=8, temperature=0)
            == sample(lm, prompts, max_new_tokens=8, temperature=0))  # token lists


def test_the_loss_stays_float32_under_bf16_autocast():
    model, (src, tgt) = family("transformer")
    model.cuda().train()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(src.cuda(), tgt[:, :-1].cuda())
        loss, nll, _ = label_smoothed_loss(logits, tgt[:, 1:].cuda(), model.cfg.pad_id, 0.1)
    assert logits.dtype == torch.bfloat16 and loss.dtype == nll.dtype == torch.float32
