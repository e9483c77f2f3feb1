"""Every family trains and evaluates under bf16 and fp16 autocast with CUDA's float32 op list, on the CPU.

CUDA's autocast runs a list of ops (LayerNorm, softmax, sums, powers, exp, log, norms, losses) in float32 whatever
their inputs; the CPU's runs most of them in the lower precision, so a path that mixes a float32 LayerNorm output
with a bf16 matmul output (Swin's window gather and scatter did) breaks on a GPU only. :class:`CudaFloat32Ops`
imitates CUDA's list on the CPU: while autocast is on, the inputs of those ops are cast to float32 and the op runs
with autocast off, as CUDA's autocast does (its "ops that autocast to float32" in the ``torch.amp`` docs).
"""

from __future__ import annotations

import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_map

import aiayn
from aiayn.layers import fast

# CUDA autocast's float32 ops (torch.amp's list), by the name of the Python function or method that reaches them
FLOAT32_OPS = {"layer_norm", "group_norm", "softmax", "log_softmax", "sum", "pow", "__pow__", "__rpow__", "rsqrt",
               "exp", "log", "log1p", "log2", "log10", "expm1", "reciprocal", "norm", "vector_norm", "cumsum",
               "cumprod", "prod", "logsumexp", "cross_entropy", "nll_loss", "mse_loss", "l1_loss", "smooth_l1_loss",
               "huber_loss", "kl_div", "binary_cross_entropy_with_logits", "cosine_similarity", "cdist", "dist",
               "softplus", "acos", "asin", "cosh", "sinh", "tan", "erfinv"}


class CudaFloat32Ops(TorchFunctionMode):
    """While CPU autocast is on, the ops of :data:`FLOAT32_OPS` take float32 inputs and run without autocast."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if getattr(func, "__name__", "") in FLOAT32_OPS and torch.is_autocast_enabled("cpu"):
            def up(x):
                return x.float() if isinstance(x, torch.Tensor) and x.dtype in (torch.bfloat16, torch.float16) else x
            with torch.autocast("cpu", enabled=False):
                return func(*tree_map(up, args), **tree_map(up, kwargs))
        return func(*args, **kwargs)


def tiny(name: str) -> tuple[torch.nn.Module, tuple]:
    """A model of family ``name`` of one layer (two stages for Swin), d_model 32, and inputs for its forward."""
    g = torch.Generator().manual_seed(1)
    small = {"d_model": 32, "n_heads": 2, "d_ff": 64, "dropout": 0.0}
    ids = torch.randint(5, 60, (2, 6), generator=g)
    image = torch.randn(2, 1, 16, 16, generator=g)
    if name == "transformer":
        return aiayn.build("transformer-tiny", n_encoder_layers=1, n_decoder_layers=1, **small), (ids, ids[:, :5])
    if name == "bart":
        return aiayn.build("bart-tiny", n_encoder_layers=1, n_decoder_layers=1, **small), (ids, ids[:, :5])
    if name in ("gpt", "llama", "bert"):
        return aiayn.build(f"{name}-tiny", n_layers=1, **small), (ids,)
    if name == "vit":
        return aiayn.build("vit-tiny", image_size=16, in_channels=1, patch_size=4, n_layers=1, **small), (image,)
    if name == "swin":
        return aiayn.build("swin-tiny", image_size=16, in_channels=1, patch_size=2, d_model=16, n_layers=(1, 1),
                           n_heads=(2, 2), window_size=4), (image,)
    return aiayn.build("detr-tiny", n_encoder_layers=1, n_decoder_layers=1, **small), \
        (torch.randn(2, 3, 32, 32, generator=g), torch.ones(2, 32, 32, dtype=torch.bool))


def first_tensor(out) -> torch.Tensor:
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, dict):
        return out["logits"] if "logits" in out else next(iter(out.values()))
    return out[0]


FAMILIES = ["transformer", "gpt", "llama", "bert", "bart", "vit", "swin", "detr"]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("name", FAMILIES)
def test_a_train_and_an_eval_step_run_under_cuda_style_autocast(name, dtype, one_thread):
    torch.manual_seed(0)
    model, inputs = tiny(name)
    with CudaFloat32Ops(), torch.autocast("cpu", dtype=dtype):
        loss = first_tensor(model.train()(*inputs)).float().square().mean()
        loss.backward()
        with torch.no_grad():  # eval: the paths without gradients (Swin's groups of windows, chunked feed-forward)
            out = first_tensor(model.eval()(*inputs))
    assert torch.isfinite(loss) and torch.isfinite(out.float()).all()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


@pytest.mark.parametrize("grad", [False, True], ids=["eval", "train"])
def test_swins_fast_path_returns_the_plain_paths_values_and_dtype_under_cuda_style_autocast(grad, monkeypatch,
                                                                                           one_thread):
    model, (image,) = tiny("swin")
    model.train(grad)
    outs = []
    for enabled in (False, True):
        monkeypatch.setattr(fast, "ENABLED", enabled)
        with torch.set_grad_enabled(grad), CudaFloat32Ops(), torch.autocast("cpu", dtype=torch.bfloat16):
            outs.append(model.forward_features(image) if hasattr(model, "forward_features") else model(image))
    assert outs[1].dtype == outs[0].dtype
    torch.testing.assert_close(outs[1].float(), outs[0].float(), atol=2e-2, rtol=2e-2)


def test_the_cpu_tricks_stay_off_other_devices(monkeypatch):
    """On a GPU (here the meta device, which computes only shapes) the feed-forward takes its plain path and Swin
    attends every window as one group: the grouping of :mod:`aiayn.layers.fast` is for the CPU's memory."""
    from aiayn.layers.feedforward import FeedForward

    def refused(*args, **kwargs):
        raise AssertionError("a CPU trick ran on another device")

    monkeypatch.setattr(fast, "feedforward_no_grad", refused)
    ff = FeedForward(8, 16).to("meta")
    with torch.no_grad():
        assert ff(torch.empty(2, 3, 8, device="meta")).shape == (2, 3, 8)

    groups = []

    def attn(windows, mask):
        groups.append(windows.size(0))
        return (windows,)

    x = torch.empty(2, 8, 8, 4, device="meta")  # 2 images of 2 x 2 windows of side 4
    with torch.no_grad():
        out = fast.window_attention(attn, x, torch.empty(1, 1, 16, 16, device="meta"), window=4, shift=0,
                                    chunk_tokens=16)
    assert out.shape == x.shape and groups == [8]  # one group of every window, not 8 groups of one
