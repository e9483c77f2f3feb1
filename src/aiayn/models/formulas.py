"""Closed-form parameter and multiply-add counts of the shared layers, which every family's ``counts.py`` adds up.

Conventions
    A multiply-add (MAC) is one multiplication and one addition: 1 MAC = 2 FLOPs. A matmul of an (m, k) by a
    (k, n) matrix is m k n MACs. Only matmuls and convolutions are counted: they are nearly all of the arithmetic
    and exactly what ``torch.utils.flop_counter.FlopCounterMode`` counts (it reports FLOPs, 2 per MAC, and
    ignores biases); softmax, LayerNorm, activations, bias and residual additions are left out (a percent or
    two at these sizes). Papers mix the two units: Swin's "FLOPs" (Table 1) and ViT/DeiT's are multiply-adds;
    DETR's "GFLOPs" (Table 1) come from Detectron2's counter (fvcore), which also counts one multiply-add as
    one "flop"; GPT-3's training compute (Table D.1) is in real FLOPs, 6 per parameter per token.
    Attention scores are counted over the full T x S square even when causal, as ``FlopCounterMode`` (its
    formula ignores ``is_causal``) and PaLM's appendix B (6N + 12 L H Q T training FLOPs per token) count them;
    a causal kernel that skips the masked blocks does about half of that part.

Shapes: T query positions, S key positions, C d_model, F d_ff, V vocabulary, h heads of D = C/h, K classes,
P patch side, M window side, B batch (every MAC count is per example; ``counts(..., batch=B)`` multiplies).

Multi-head attention (Vaswani et al. 2017, section 3.2.2):

    parameters   W^Q, W^K, W^V, W^O, each C x C with a bias of C            4C^2 + 4C
    projections  Q = X W^Q: T C^2;  K and V from S positions: S C^2 each;
                 the output W^O: T C^2                                       2TC^2 + 2SC^2    (self: 4TC^2)
    scores       Q K^T per head (T x D)(D x S): T S D; times h heads: T S C;
                 the weights times V, likewise T S C                        2TSC             (self: 2T^2 C)

Position-wise feed-forward (section 3.3), FFN(x) = act(x W1 + b1) W2 + b2:

    parameters   C F + F + F C + C                                           2CF + F + C
    MACs         two matmuls at each of T positions                          2TCF

LayerNorm: a gain and a bias per channel, 2C parameters, no matmul. A linear map C_in -> C_out on T positions:
C_in C_out (+ C_out bias) parameters and T C_in C_out MACs; a k x k convolution with an H' x W' output:
k^2 C_in C_out (+ C_out) parameters and H' W' k^2 C_in C_out MACs.

So an encoder layer is 12C^2 + 13C parameters with F = 4C (the familiar 12 L C^2 of GPT-2/3 counts), and
T (4C^2 + 2TC + 2CF) MACs: per position, one MAC per weight plus 2TC for the scores. Each family's
``counts.py`` (:mod:`aiayn.models.gpt.counts`, ...) adds its embeddings and heads, naming the paper section it
follows; :func:`aiayn.analysis.formulas.counts` asks the family of a config for them (through the registry).
These building blocks sit in ``models``, below :mod:`aiayn.analysis`, so a family's counts and the analysis that
asks for them import nothing of each other's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

# the parts a model's parameters and its multiply-adds are counted by (what each holds: aiayn.analysis.params)
PARAMETER_PARTS = ("embeddings", "attention", "feed-forward", "norms", "backbone", "output")
MAC_PARTS = ("embeddings", "attention projections", "attention scores", "feed-forward", "backbone", "output")


@dataclass(frozen=True)
class Counts:
    """Parameters and forward multiply-adds of a model, by part.

    ``parameters`` has every part of :data:`PARAMETER_PARTS`, ``macs`` every part of :data:`MAC_PARTS`, in
    that order (missing parts are 0). Counts add (two modules) and multiply by an integer (N layers).
    """

    parameters: Mapping[str, int] = field(default_factory=dict)
    macs: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, parts in (("parameters", PARAMETER_PARTS), ("macs", MAC_PARTS)):
            given = dict(getattr(self, name))
            unknown = sorted(set(given) - set(parts))
            if unknown:
                raise ValueError(f"{name} has unknown parts {unknown}; parts are {parts}")
            object.__setattr__(self, name, {p: int(given.get(p, 0)) for p in parts})

    def __add__(self, other: Counts) -> Counts:
        return Counts({p: n + other.parameters[p] for p, n in self.parameters.items()},
                      {p: n + other.macs[p] for p, n in self.macs.items()})

    def __mul__(self, n: int) -> Counts:
        return Counts({p: v * n for p, v in self.parameters.items()}, {p: v * n for p, v in self.macs.items()})

    __rmul__ = __mul__

    def batched(self, batch: int) -> Counts:
        """The same parameters, the multiply-adds of ``batch`` examples."""
        return Counts(self.parameters, {p: v * batch for p, v in self.macs.items()})

    @property
    def total_parameters(self) -> int:
        return sum(self.parameters.values())

    @property
    def total_macs(self) -> int:
        return sum(self.macs.values())

    @property
    def flops(self) -> int:
        """Forward FLOPs of the matmuls: 2 per multiply-add."""
        return 2 * self.total_macs


NONE = Counts()


# --- building blocks ---------------------------------------------------------------------------------------


def attention(t: int, s: int, c: int, bias: bool = True, kv: int | None = None) -> Counts:
    """Multi-head attention of ``t`` queries over ``s`` keys (``s == t`` for self-attention), model width ``c``.

    Parameters 4C^2 + 4C; projections 2TC^2 + 2SC^2 and scores 2TSC multiply-adds (module docstring). The
    number of heads changes neither: h heads of C/h dimensions do the work of one head of C. With grouped
    key/value heads of ``kv`` = Hkv D channels in all (Llama 3, Mistral), W^K and W^V are C x kv: 2C^2 + 2C kv
    (+ 2C + 2kv) parameters, 2TC^2 + 2SC kv projection multiply-adds; the scores are unchanged (every query
    head attends, its kv head repeated).
    """
    kv = c if kv is None else kv
    return Counts({"attention": 2 * c * c + 2 * c * kv + (2 * c + 2 * kv if bias else 0)},
                  {"attention projections": 2 * t * c * c + 2 * s * c * kv, "attention scores": 2 * t * s * c})


def scorer(t: int, s: int, c: int, d: int, name: str) -> Counts:
    """What an attention scoring function other than the scaled dot product adds (:mod:`aiayn.layers.scoring`),
    per attention of ``t`` queries over ``s`` keys, width ``c`` in heads of ``d``: the bilinear ``q W k^T`` has a
    D x D matrix per head (C D parameters) and turns each query by it (T C D multiply-adds); the additive
    ``v^T tanh(W_q q + W_k k)`` has two and a vector (2 C D + C) and turns queries and keys (T C D + S C D). Its
    ``v^T`` takes the place of ``q k^T`` in the scores, as the bilinear's second product does. Dot products and
    hard attention add nothing."""
    if name == "bilinear":
        return Counts({"attention": c * d}, {"attention scores": t * c * d})
    if name == "additive":
        return Counts({"attention": 2 * c * d + c}, {"attention scores": (t + s) * c * d})
    return NONE


def feed_forward(t: int, c: int, f: int, bias: bool = True, gated: bool = False) -> Counts:
    """The position-wise feed-forward network on ``t`` positions: 2CF + F + C parameters, 2TCF multiply-adds.

    ``gated`` (SwiGLU: Llama) adds the gate, C x F: 3CF (+ 2F + C) parameters, 3TCF multiply-adds.
    """
    n = 3 if gated else 2
    return Counts({"feed-forward": n * c * f + ((n - 1) * f + c if bias else 0)}, {"feed-forward": n * t * c * f})


def layer_norm(c: int, n: int = 1, rms: bool = False) -> Counts:
    """``n`` LayerNorms over ``c`` channels: 2C parameters each (gain and bias), no matmul; an RMSNorm (``rms``)
    has the gain alone, C."""
    return Counts({"norms": (1 if rms else 2) * c * n})


def linear(t: int, c_in: int, c_out: int, bias: bool = True, part: str = "output", weight: bool = True) -> Counts:
    """A linear map on ``t`` positions: C_in C_out (+ C_out) parameters, T C_in C_out multiply-adds.

    ``weight=False`` counts a matrix owned elsewhere (a tied output projection): its multiply-adds, not its
    parameters.
    """
    macs_part = "attention projections" if part == "attention" else part
    return Counts({part: (c_in * c_out if weight else 0) + (c_out if bias else 0)}, {macs_part: t * c_in * c_out})


def table(rows: int, c: int, part: str = "embeddings") -> Counts:
    """A lookup table (tokens, positions, segments, object queries): ``rows`` x C parameters, no matmul."""
    return Counts({part: rows * c})


def conv(h_out: int, w_out: int, c_in: int, c_out: int, k: int, bias: bool = True, part: str = "backbone") -> Counts:
    """A k x k convolution with an ``h_out`` x ``w_out`` output: k^2 C_in C_out (+ C_out) parameters and
    H' W' k^2 C_in C_out multiply-adds (one dot product of k^2 C_in per output value)."""
    return Counts({part: k * k * c_in * c_out + (c_out if bias else 0)}, {part: h_out * w_out * k * k * c_in * c_out})


def encoder_layer(t: int, c: int, f: int) -> Counts:
    """Self-attention and feed-forward, each with a LayerNorm (section 3.1, "Encoder"), on ``t`` positions."""
    return attention(t, t, c) + feed_forward(t, c, f) + layer_norm(c, 2)


def decoder_layer(t: int, s: int, c: int, f: int, cross: bool = True) -> Counts:
    """Masked self-attention, encoder-decoder attention over ``s`` memory positions (unless ``cross`` is
    False: GPT) and feed-forward, each with a LayerNorm (section 3.1, "Decoder")."""
    counts = attention(t, t, c) + feed_forward(t, c, f) + layer_norm(c, 2)
    return counts + attention(t, s, c) + layer_norm(c) if cross else counts


# --- the vision families' layers: Swin's windows, DETR's backbone ------------------------------------------


def window_attention(height: int, width: int, c: int, window: int) -> Counts:
    """Attention inside non-overlapping M x M windows of an ``height`` x ``width`` map (Swin section 3.2).

    Every one of the hw patches is projected (4hwC^2, as global attention); each of the hw/M^2 windows
    attends among its M^2 patches, 2 (M^2)^2 C, so the scores cost 2 M^2 hw C, linear in the map size,
    where global attention costs 2 (hw)^2 C (Swin's eqs. 1 and 2; its Table 1 "FLOPs" count these
    multiply-adds):

        Omega(MSA)   = 4hwC^2 + 2(hw)^2 C
        Omega(W-MSA) = 4hwC^2 + 2M^2 hw C

    The sides must be multiples of M (pad first, as the model does).
    """
    if height % window or width % window:
        raise ValueError(f"map {height} x {width} must be a multiple of window={window}")
    hw = height * width
    return Counts(macs={"attention projections": 4 * hw * c * c, "attention scores": 2 * window * window * hw * c})


def _conv_out(n: int, k: int, stride: int) -> int:
    """Output size of a k x k convolution (or pool) with padding k // 2."""
    return (n + 2 * (k // 2) - k) // stride + 1


def resnet(in_channels: int, stem: int, widths: tuple[int, ...], depths: tuple[int, ...], block: str, height: int,
           width: int) -> tuple[Counts, tuple[int, int]]:
    """A ResNet (He et al. 2016) without its classifier, as DETR's backbone: ``(counts, (h, w))`` of the output.

        stem          7 x 7 conv, stride 2 (H/2), then a 3 x 3 max-pool, stride 2 (H/4)
        bottleneck    1 x 1 C_in -> W/4, 3 x 3 W/4 -> W (with the stride), 1 x 1 W/4 -> W
        basic         3 x 3 C_in -> W (with the stride), 3 x 3 W -> W
        shortcut      1 x 1 C_in -> W with the stride, when the shape changes

    Convolutions have no bias (a BatchNorm follows; frozen, it holds buffers, not parameters). Each conv
    costs H' W' k^2 C_in C_out multiply-adds. ResNet-50 at 224: 4.1G.
    """
    h, w = _conv_out(height, 7, 2), _conv_out(width, 7, 2)
    total = conv(h, w, in_channels, stem, 7, bias=False)
    h, w = _conv_out(h, 3, 2), _conv_out(w, 3, 2)
    c_in = stem
    for i, (c_out, depth) in enumerate(zip(widths, depths)):
        for j in range(depth):
            s = 2 if i > 0 and j == 0 else 1
            ho, wo = _conv_out(h, 3, s), _conv_out(w, 3, s)
            if block == "bottleneck":
                mid = c_out // 4
                total += (conv(h, w, c_in, mid, 1, bias=False) + conv(ho, wo, mid, mid, 3, bias=False)
                          + conv(ho, wo, mid, c_out, 1, bias=False))
            else:
                total += conv(ho, wo, c_in, c_out, 3, bias=False) + conv(ho, wo, c_out, c_out, 3, bias=False)
            if c_in != c_out or s != 1:
                total += conv(ho, wo, c_in, c_out, 1, bias=False)
            h, w, c_in = ho, wo, c_out
    return total, (h, w)


__all__ = ["MAC_PARTS", "NONE", "PARAMETER_PARTS", "Counts", "attention", "conv", "decoder_layer", "encoder_layer",
           "feed_forward", "layer_norm", "linear", "resnet", "scorer", "table", "window_attention"]
