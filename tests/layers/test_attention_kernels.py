"""Which ``scaled_dot_product_attention`` call each model family makes, and that no forward reads a tensor back.

On CUDA, SDPA's choice of kernel follows from its arguments: with no mask (``is_causal`` or not) the flash
kernel may run; any mask leaves the memory-efficient one (or the math fallback), and a key-only ``(B, 1, 1, S)``
padding mask costs it nothing ``(B, 1, T, S)``-sized. A spy on ``F.scaled_dot_product_attention`` records each
call on the CPU, so the kernel each model would get on a GPU is pinned here without one:

    model                              self-attention              cross-attention   CUDA kernel
    GPT, no padding                    is_causal, no mask          -                 flash
    GPT, padded prompt                 (B, 1, T, S) bool           -                 memory-efficient
    GPT, padded, one cached token      (B, 1, 1, S) bool           -                 memory-efficient
    Transformer encoder                (B, 1, 1, S) bool           -                 memory-efficient
    Transformer decoder (training)     is_causal, no mask          (B, 1, 1, S)      flash / memory-efficient
    BERT                               (B, 1, 1, T) bool           -                 memory-efficient
    ViT                                no mask                     -                 flash
    DETR (pixel mask)                  (B, 1, 1, HW) / none        (B, 1, 1, HW)     memory-efficient / flash
    Swin                               additive float bias         -                 memory-efficient

A padded GPT prompt needs the full mask: SDPA takes ``is_causal`` or a mask, not both.
"""

from __future__ import annotations

from typing import NamedTuple

import pytest
import torch
import torch.nn.functional as F

import aiayn
from aiayn.decoding import greedy
from aiayn.layers import functional

B, S, T = 2, 7, 5


class Call(NamedTuple):
    """One call of ``F.scaled_dot_product_attention``: its flag, its mask's shape and dtype, T and S."""

    is_causal: bool
    mask: tuple[int, ...] | None
    dtype: torch.dtype | None
    t: int
    s: int

    @property
    def kind(self) -> str:
        """``"causal"`` or ``"none"`` without a mask; else its dtype and form: ``"bool key-only"``, ``"bool full"``,
        ``"float full"``."""
        if self.mask is None:
            return "causal" if self.is_causal else "none"
        form = "key-only" if len(self.mask) == 4 and self.mask[1:3] == (1, 1) else "full"
        return f"{'bool' if self.dtype == torch.bool else 'float'} {form}"


# The kernel CUDA can pick for each kind of call: flash takes no mask at all.
CUDA_KERNEL = {"causal": "flash", "none": "flash", "bool key-only": "efficient", "bool full": "efficient",
               "float full": "efficient"}


@pytest.fixture
def sdpa_calls(monkeypatch):
    calls: list[Call] = []
    real = F.scaled_dot_product_attention

    def spy(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, **kw):
        calls.append(Call(is_causal, None if attn_mask is None else tuple(attn_mask.shape),
                          None if attn_mask is None else attn_mask.dtype, q.size(-2), k.size(-2)))
        return real(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, **kw)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    return calls


def gpt():
    torch.manual_seed(0)
    return aiayn.build("gpt-tiny", vocab_size=50, d_model=32, n_heads=4, n_layers=2, d_ff=64).eval()


def transformer():
    torch.manual_seed(0)
    return aiayn.build("transformer-tiny", d_model=32, n_heads=4, d_ff=64).eval()


def bert():
    torch.manual_seed(0)
    return aiayn.build("bert-tiny", d_model=32, n_heads=4, d_ff=64).eval()


def vit():
    return aiayn.build("vit-tiny", patch_size=7, d_model=32, n_heads=4, n_layers=2, d_ff=64).eval()


def swin():
    return aiayn.build("swin-tiny", patch_size=2, d_model=8, n_layers=(2, 2), n_heads=(2, 2), window_size=4).eval()


def left_padded() -> tuple[torch.Tensor, torch.Tensor]:
    """GPT ids ``(B, S)`` and their attention mask, row 0 padded on the left by 3."""
    ids = torch.randint(3, 50, (B, S))
    real = torch.ones(B, S, dtype=torch.bool)
    real[0, :3] = False
    return ids.masked_fill(~real, 0), real


def src_padded() -> torch.Tensor:
    """Source ids ``(B, S)`` for the tiny Transformer and BERT, row 1 padded (id 0) on the right by 2."""
    ids = torch.randint(5, 60, (B, S))
    ids[1, -2:] = 0
    return ids


def run(name: str, calls: list[Call]) -> None:
    """One forward (or decoding) of the model family ``name``, inside the spy that fills ``calls``."""
    with torch.no_grad():
        if name == "gpt":
            gpt()(torch.randint(0, 50, (B, S)))
        elif name == "gpt, cached prompt then one token":
            model, ids = gpt(), torch.randint(0, 50, (B, S))
            cache = model.new_cache(S + 1)
            model(ids, cache=cache)
            model(ids[:, :1], cache=cache)
        elif name == "gpt, padded prompt":
            ids, real = left_padded()
            gpt()(ids, attention_mask=real)
        elif name == "gpt, padded, one cached token":
            model, (ids, real) = gpt(), left_padded()
            cache = model.new_cache(S + 1)
            model(ids, attention_mask=real, cache=cache)
            calls.clear()  # only the step after the prompt
            model(ids[:, :1], attention_mask=torch.cat([real, real[:, :1]], dim=1), cache=cache)
        elif name == "transformer":
            transformer()(src_padded(), torch.randint(3, 60, (B, T)))
        elif name == "transformer, greedy":
            greedy(transformer(), src_padded(), max_len=3)
        elif name == "bert":
            bert()(src_padded())
        elif name == "vit":
            vit()(torch.randn(B, 1, 28, 28))
        elif name == "detr":
            mask = torch.ones(B, 64, 64, dtype=torch.bool)
            mask[1, :, 32:] = False  # image 1 is half as wide, padded on the right
            aiayn.build("detr-tiny").eval()(torch.randn(B, 3, 64, 64), mask)
        elif name == "detr, no pixel mask":
            aiayn.build("detr-tiny").eval()(torch.randn(B, 3, 64, 64))
        elif name == "swin":
            swin()(torch.randn(B, 1, 16, 16))
        else:
            raise AssertionError(name)


# What each model family hands SDPA, by kind of call (Call.kind).
EXPECTED = {
    "gpt": {"causal"},
    "gpt, cached prompt then one token": {"causal", "none"},  # the prompt fills an empty cache: T == S
    "gpt, padded prompt": {"bool full"},
    "gpt, padded, one cached token": {"bool key-only"},
    "transformer": {"bool key-only", "causal"},
    "transformer, greedy": {"bool key-only", "causal", "none"},  # <s> alone is causal, then one query a step
    "bert": {"bool key-only"},
    "vit": {"none"},
    "detr": {"bool key-only", "none"},
    "detr, no pixel mask": {"none"},
    "swin": {"float full"},
}


@pytest.mark.parametrize("name", list(EXPECTED))
def test_each_model_family_makes_the_sdpa_calls_of_the_table(name, sdpa_calls):
    run(name, sdpa_calls)
    kinds = {c.kind for c in sdpa_calls}
    assert sdpa_calls and kinds == EXPECTED[name], f"{name}: {sorted(kinds)}; calls {sdpa_calls}"
    assert all(not (c.is_causal and c.mask is not None) for c in sdpa_calls)  # SDPA refuses both
    if name == "gpt":
        assert {CUDA_KERNEL[k] for k in kinds} == {"flash"}


def test_gpt_without_padding_is_causal_with_no_mask(sdpa_calls):
    gpt()(torch.randint(0, 50, (B, S)))
    assert sdpa_calls == [Call(True, None, None, S, S)] * 2  # one per layer


def test_padding_is_a_key_only_mask_in_the_transformer_and_bert(sdpa_calls):
    model = transformer()
    src = src_padded()
    with torch.no_grad():
        model(src, torch.randint(3, 60, (B, T)))
    encoder, decoder = sdpa_calls[:2], sdpa_calls[2:]
    assert encoder == [Call(False, (B, 1, 1, S), torch.bool, S, S)] * 2
    assert decoder == [Call(True, None, None, T, T), Call(False, (B, 1, 1, S), torch.bool, T, S)] * 2
    sdpa_calls.clear()
    with torch.no_grad():
        bert()(src)
    assert sdpa_calls == [Call(False, (B, 1, 1, S), torch.bool, S, S)] * 2


def test_a_padded_gpt_step_after_the_prompt_uses_a_key_only_mask(sdpa_calls):
    model, (ids, real) = gpt(), left_padded()
    cache = model.new_cache(S + 1)
    with torch.no_grad():
        model(ids, attention_mask=real, cache=cache)
        assert sdpa_calls == [Call(False, (B, 1, S, S), torch.bool, S, S)] * 2  # causal and padding: full
        sdpa_calls.clear()
        model(ids[:, :1], attention_mask=torch.cat([real, real[:, :1]], dim=1), cache=cache)
    assert sdpa_calls == [Call(False, (B, 1, 1, S + 1), torch.bool, 1, S + 1)] * 2


def test_a_cached_prompt_keeps_is_causal_and_equals_the_uncached_logits(sdpa_calls):
    model, ids = gpt(), torch.randint(0, 50, (B, S))
    with torch.no_grad():
        full = model(ids)
        cached = model(ids, cache=model.new_cache(S))
    torch.testing.assert_close(cached, full)
    assert {c.kind for c in sdpa_calls} == {"causal"}


# --- no tensor value is read on the host in a forward ------------------------------------------------------


def _no_host_read_forwards():
    """Each model's forward on the meta device: any ``bool()``, ``int()`` or ``.item()`` of a tensor raises."""
    with torch.device("meta"):
        lm, ids = gpt(), torch.zeros(B, S, dtype=torch.long)
        lm(ids)
        lm(ids, attention_mask=torch.ones(B, S, dtype=torch.bool))
        cache = lm.new_cache(S + 1)
        lm(ids, attention_mask=torch.ones(B, S, dtype=torch.bool), cache=cache)
        lm(ids[:, :1], attention_mask=torch.ones(B, S + 1, dtype=torch.bool), cache=cache)
        tf = transformer()
        tf(ids, ids[:, :T])
        cache = tf.new_cache(2)
        memory = tf.encode(ids)
        tf.decode(ids[:, :1], memory, ids, cache=cache)
        tf.decode(ids[:, :1], memory, ids, cache=cache)
        bert()(ids)
        bert()(ids, attention_mask=torch.ones(B, S, dtype=torch.bool))
        vit()(torch.zeros(B, 1, 28, 28))
        swin()(torch.zeros(B, 1, 16, 16))
        aiayn.build("detr-tiny").eval()(torch.zeros(B, 3, 64, 64), torch.ones(B, 64, 64, dtype=torch.bool))


def test_no_forward_reads_a_tensor_value_back_to_the_host():
    """On the meta device tensors have shapes but no values, so any read back to the host (``bool()``,
    ``int()``, ``.item()``) raises: these forwards, and every decoding step they stand for, never stall an
    accelerator."""
    with torch.no_grad():
        _no_host_read_forwards()


def test_the_accelerator_path_of_the_empty_row_fix_gives_the_same_outputs(monkeypatch):
    """On an accelerator every bool mask takes the empty-row fix without asking whether a row is empty; the
    outputs are the same, bit for bit, with and without such rows."""
    ids, real = left_padded()  # row 0's first 3 queries attend to nothing
    src = src_padded()
    tgt = torch.randint(3, 60, (B, T))
    with torch.no_grad():
        models = gpt(), transformer(), bert()
        asked = models[0](ids, attention_mask=real), models[1](src, tgt), models[2](src)
        safe = functional._safe
        monkeypatch.setattr(functional, "_safe", lambda mask, ask: safe(mask, ask=False))
        unasked = models[0](ids, attention_mask=real), models[1](src, tgt), models[2](src)
    for a, b in zip(asked, unasked):
        assert torch.equal(a, b)


# --- on a GPU: the kernels themselves ----------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_gpt_runs_the_flash_kernel_and_padded_models_the_memory_efficient_one():
    from torch.nn.attention import SDPBackend, sdpa_kernel

    dev, dtype = torch.device("cuda"), torch.bfloat16
    with torch.no_grad():
        lm = gpt().to(dev, dtype)
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):  # raises if flash cannot run these calls
            lm(torch.randint(0, 50, (B, S), device=dev))
        ids, real = left_padded()
        src = src_padded().to(dev)
        with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION]):
            lm(ids.to(dev), attention_mask=real.to(dev))
            transformer().to(dev, dtype)(src, torch.randint(3, 60, (B, T), device=dev))
            bert().to(dev, dtype)(src)
