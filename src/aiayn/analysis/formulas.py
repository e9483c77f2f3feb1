"""Closed-form parameter and multiply-add counts of every family, derived layer by layer.

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
T (4C^2 + 2TC + 2CF) MACs: per position, one MAC per weight plus 2TC for the scores. The family functions
below add the embeddings and the heads; each names the paper section it follows.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from aiayn.analysis.params import PARTS as PARAMETER_PARTS

MAC_PARTS = ("embeddings", "attention projections", "attention scores", "feed-forward", "backbone", "output")

# DETR has no image_size field; its FLOPs are quoted for COCO images resized to a shorter side of 800
# (800 x 1066 for COCO's usual 3:4 images).
DETR_IMAGE_SIZE = (800, 1066)


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


# --- families --------------------------------------------------------------------------------------------


def transformer(cfg: Any, src_len: int, tgt_len: int) -> Counts:
    """The encoder-decoder Transformer (Vaswani et al. 2017, section 3) and BART (Lewis et al. 2020).

    Parameters: the token tables (one if ``share_embeddings``), learned position tables on each side
    (``max_len + positional_offset`` rows; sinusoidal ones have none), the embedding LayerNorms (BART), the
    layers, final LayerNorms when pre-norm, and the pre-softmax projection C V (only its bias when tied,
    section 3.4), and a ``cross_scoring`` scorer's own weights (:func:`scorer`). Multiply-adds: the encoder on
    S = ``src_len`` positions, the decoder on T = ``tgt_len`` attending to S, and the projection T C V. With
    V = 37,000 the base model's projection, C V = 18.9M per target position, is nearly as much as its six
    decoder layers' weights, 6 (6C^2 + 2CF) = 22.0M.
    """
    c = cfg.d_model
    embed = table(cfg.src_vocab_size, c)
    if not cfg.share_embeddings:
        embed += table(cfg.tgt_vocab_size, c)
    if cfg.positional == "learned":
        embed += 2 * table(cfg.max_len + cfg.positional_offset, c)
    if cfg.embed_norm:
        embed += layer_norm(c, 2)
    final = layer_norm(c, 2) if cfg.norm_first else NONE
    encoder = cfg.n_encoder_layers * encoder_layer(src_len, c, cfg.d_ff)
    decoder = cfg.n_decoder_layers * (decoder_layer(tgt_len, src_len, c, cfg.d_ff)
                                      + scorer(tgt_len, src_len, c, cfg.d_head, cfg.cross_scoring))
    head = linear(tgt_len, c, cfg.tgt_vocab_size, bias=cfg.output_bias, weight=not cfg.tie_output)
    return embed + encoder + decoder + final + head


def gpt(cfg: Any, seq_len: int) -> Counts:
    """GPT-2 (Radford et al. 2019) and GPT-3 (Brown et al. 2020): token and learned position tables, N
    pre-norm decoder layers without cross-attention, a final LayerNorm, and the tied projection T C V.

    Per token: one multiply-add per entry of the layers' matrices (12C^2 per layer), 2TC per layer for the
    scores, and C V for the logits. GPT-3's "6N" training rule (Table D.1) is the first term as FLOPs (2 per
    multiply-add) times 3 (the backward pass costs twice the forward).

    Llama's switches: rotary positions have no table (and no matmul), RMSNorm C parameters, SwiGLU a third
    C x F matrix, grouped heads smaller W^K and W^V (:func:`attention`), no biases. A sliding window is counted
    over the full square, as the causal mask is. A classifier (``head="classification"``) adds C x K without a
    bias on the last token (GPT-2's ``score``).
    """
    c = cfg.d_model
    embed = table(cfg.vocab_size, c) + (table(cfg.max_len, c) if cfg.positional == "learned" else NONE)
    rms = cfg.norm == "rmsnorm"
    layer = (attention(seq_len, seq_len, c, bias=cfg.bias, kv=cfg.kv_heads * (c // cfg.n_heads))
             + feed_forward(seq_len, c, cfg.d_ff, bias=cfg.bias, gated=cfg.activation == "swiglu")
             + layer_norm(c, 2, rms=rms))
    score = linear(1, c, cfg.num_labels, bias=False) if cfg.head == "classification" else NONE
    return embed + cfg.n_layers * layer + layer_norm(c, rms=rms) + linear(seq_len, c, cfg.vocab_size, bias=False,
                                                                          weight=not cfg.tie_output) + score


def bert(cfg: Any, seq_len: int) -> Counts:
    """BERT (Devlin et al. 2019): token, position and segment tables with a LayerNorm, N post-norm encoder
    layers, the pooler (tanh of a C x C map of [CLS], one position), and the heads the config has:

        mlm             dense C x C, LayerNorm, the tied token table as the output (T C V) and a V bias
        nsp             C x 2 on the pooled [CLS]
        classification  C x K on the pooled [CLS]

    The multiply-adds are those of the encoder, the pooler and those heads on T = ``seq_len`` positions.
    """
    c = cfg.d_model
    embed = table(cfg.vocab_size, c) + table(cfg.max_len, c) + table(cfg.type_vocab_size, c) + layer_norm(c)
    layers = cfg.n_layers * encoder_layer(seq_len, c, cfg.d_ff)
    heads = linear(1, c, c)  # the pooler
    if cfg.head in ("pretraining", "mlm"):
        heads += linear(seq_len, c, c) + layer_norm(c) + linear(seq_len, c, cfg.vocab_size, weight=False)
    if cfg.head == "pretraining":
        heads += linear(1, c, 2)
    if cfg.head == "classification":
        heads += linear(1, c, cfg.num_labels)
    return embed + layers + heads


def vit(cfg: Any, height: int, width: int) -> Counts:
    """ViT (Dosovitskiy et al. 2021, section 3.1, eqs. 1-4) on a ``height`` x ``width`` image.

    The patch embedding is a P x P convolution of stride P: N = (H/P)(W/P) patches of Cin P^2 values, each
    mapped to C (N Cin P^2 C multiply-adds). The [CLS] token and the position table ((1 + g^2) C, g the grid
    at ``cfg.image_size``) are parameters without arithmetic. The encoder runs on 1 + N tokens, and the head
    C K on [CLS] alone. ViT-B/16 at 224: N = 196, 12 layers of 197 (4C^2 + 2 x 197 C + 2CF) = 17.45G, the
    patch embedding 0.12G: 17.6G multiply-adds.
    """
    p, c = cfg.patch_size, cfg.d_model
    if height % p or width % p:
        raise ValueError(f"image size {height} x {width} must be a multiple of patch_size={p}")
    n = (height // p) * (width // p)
    embed = conv(height // p, width // p, cfg.in_channels, c, p, part="embeddings")
    embed += Counts({"embeddings": c + (1 + cfg.grid**2) * c})  # [CLS] and the position table
    layers = cfg.n_layers * encoder_layer(1 + n, c, cfg.d_ff)
    head = linear(1, c, cfg.num_classes) if cfg.num_classes else NONE
    return embed + layers + layer_norm(c) + head


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


def swin(cfg: Any, height: int, width: int) -> Counts:
    """Swin Transformer (Liu et al. 2021, section 3) on a ``height`` x ``width`` image.

        patch embedding   P x P conv, stride P, and a LayerNorm: (H/P)(W/P) Cin P^2 C
        each block        W-MSA or SW-MSA (:func:`window_attention`, on the map padded to a multiple of M;
                          a map no larger than M is one window) + the relative position bias, (2M-1)^2 h
                          parameters + an MLP of ratio 4 on the h w patches
        patch merging     2 x 2 patches concatenated (4C), LayerNorm, Linear 4C -> 2C without bias:
                          (h/2)(w/2) 8C^2 multiply-adds
        head              LayerNorm, average, Linear C_last -> K

    Swin-T at 224 (maps 56, 28, 14, 7; C = 96, 192, 384, 768): 4.5G multiply-adds, Table 1's "4.5G FLOPs".
    """
    p, m = cfg.patch_size, cfg.window_size
    h, w = math.ceil(height / p), math.ceil(width / p)
    c0 = cfg.d_model
    total = conv(h, w, cfg.in_channels, c0, p, part="embeddings") + layer_norm(c0)
    for i, (depth, heads) in enumerate(zip(cfg.n_layers, cfg.n_heads)):
        c = cfg.dims[i]
        if i > 0:  # patch merging of the previous stage's C/2 channels: LayerNorm(2C), Linear(2C -> C)
            h, w = math.ceil(h / 2), math.ceil(w / 2)
            total += layer_norm(2 * c) + linear(h * w, 2 * c, c, bias=False, part="embeddings")
        window = min(m, h, w)
        hp, wp = math.ceil(h / window) * window, math.ceil(w / window) * window
        f = int(cfg.mlp_ratio * c)
        block = (window_attention(hp, wp, c, window) + Counts({"attention": 4 * c * c + 4 * c})
                 + table((2 * m - 1) ** 2, heads, part="attention") + feed_forward(h * w, c, f) + layer_norm(c, 2))
        total += depth * block
    head = linear(1, cfg.num_features, cfg.num_classes) if cfg.num_classes else NONE
    return total + layer_norm(cfg.num_features) + head


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


def resnet_classifier(depths: tuple[int, ...], image_size: int = 224, num_classes: int = 1000) -> Counts:
    """A bottleneck ResNet classifier (He et al. 2016, Table 1; torchvision's ``resnet50`` / ``resnet101``, the
    stride in the 3 x 3 conv): :func:`resnet` + its BatchNorms' gain and bias (2 per channel of every conv, in
    "norms") + global average pooling and a linear head 2048 -> ``num_classes``.

    ResNet-50 (``depths=(3, 4, 6, 3)``): 25,557,032 parameters, 4.09G multiply-adds at 224; ResNet-101
    (``(3, 4, 23, 3)``): 44,549,160 and 7.80G: the figures torchvision's model cards print.
    """
    widths = (256, 512, 1024, 2048)
    backbone, _ = resnet(3, 64, widths, depths, "bottleneck", image_size, image_size)
    bn, c_in = 64, 64  # the stem's BatchNorm; then each block's three (and its shortcut's)
    for i, (c_out, depth) in enumerate(zip(widths, depths)):
        for j in range(depth):
            shortcut = c_in != c_out or (i > 0 and j == 0)
            bn += 2 * (c_out // 4) + c_out + (c_out if shortcut else 0)
            c_in = c_out
    return backbone + Counts({"norms": 2 * bn}) + linear(1, widths[-1], num_classes)


# --- one layer of each kind over a sequence (Vaswani et al. 2017, section 4, Table 1) --------------------------


def lstm(t: int, c_in: int, c: int) -> Counts:
    """One LSTM layer (``torch.nn.LSTM``) over ``t`` steps: four gates, each a C_in x C map of the input and a
    C x C map of the previous state, 4(C_in + C)C + 8C parameters (PyTorch keeps two biases) and 4T(C_in + C)C
    multiply-adds: 8TC^2 with C_in = C, Table 1's O(n d^2), in T steps that wait for each other (O(n)
    sequential operations)."""
    return Counts({"backbone": 4 * (c_in + c) * c + 8 * c}, {"backbone": 4 * t * (c_in + c) * c})


def conv1d(t: int, c_in: int, c_out: int, k: int, bias: bool = True) -> Counts:
    """A 1-D convolution of kernel ``k`` with ``t`` outputs (``padding="same"``): k C_in C_out (+ C_out)
    parameters and T k C_in C_out multiply-adds, Table 1's O(k n d^2), all positions at once."""
    return Counts({"backbone": k * c_in * c_out + (c_out if bias else 0)}, {"backbone": t * k * c_in * c_out})


def restricted_attention(t: int, c: int, r: int, bias: bool = True) -> Counts:
    """Self-attention restricted to a neighbourhood of ``r`` positions around each query (Table 1's last row):
    the projections of all ``t`` positions as :func:`attention` (4TC^2), scores over r keys per query,
    2TrC (O(r n d)) instead of 2T^2 C."""
    full = attention(t, t, c, bias=bias)
    return Counts(full.parameters, {"attention projections": full.macs["attention projections"],
                                    "attention scores": 2 * t * min(r, t) * c})


def detr(cfg: Any, height: int, width: int) -> Counts:
    """DETR (Carion et al. 2020, section 3.2) on a ``height`` x ``width`` image.

        backbone          :func:`resnet`: a feature map of h x w = H/32 x W/32 positions, 2048 channels
        input projection  1 x 1 conv 2048 -> C on S = h w positions
        encoder           N layers on S positions (positions added to queries and keys: no extra matmul)
        decoder           M layers of Q object queries (a Q x C table), self-attention over Q and
                          cross-attention over S
        heads             class Linear C -> K+1 and box MLP C -> C -> C -> 4, on the output of every decoder
                          layer (the auxiliary losses; the last is the prediction): M Q (C(K+1) + 2C^2 + 4C)

    DETR-R50 at 800 x 1066 (S = 25 x 34 = 850): the backbone is ~70G of its ~81G multiply-adds.
    """
    c, q, f = cfg.d_model, cfg.num_queries, cfg.d_ff
    backbone, (h, w) = resnet(cfg.in_channels, cfg.backbone_stem, cfg.backbone_widths, cfg.backbone_depths,
                              cfg.backbone_block, height, width)
    s = h * w
    embed = conv(h, w, cfg.backbone_widths[-1], c, 1, part="embeddings") + table(q, c)
    encoder = cfg.n_encoder_layers * encoder_layer(s, c, f) + (layer_norm(c) if cfg.norm_first else NONE)
    decoder = cfg.n_decoder_layers * decoder_layer(q, s, c, f) + layer_norm(c)
    rows = cfg.n_decoder_layers * q  # every layer's output goes through the heads
    heads = linear(rows, c, cfg.num_classes + 1) + linear(rows, c, c) + linear(rows, c, c) + linear(rows, c, 4)
    return backbone + embed + encoder + decoder + heads


# --- any config --------------------------------------------------------------------------------------------


def default_size(cfg: Any) -> int | tuple[int, int]:
    """What ``counts`` assumes when no size is given: a text family's ``max_len`` (its context), a vision
    family's ``image_size``, DETR's 800 x 1066."""
    from aiayn.models import family_of

    family = family_of(cfg)
    if family == "detr":
        return DETR_IMAGE_SIZE
    if family in ("vit", "swin"):
        return cfg.image_size
    return cfg.max_len


def counts(cfg_or_name: Any, seq_len: int | None = None, image_size: int | tuple[int, int] | None = None,
           batch: int = 1) -> Counts:
    """Parameters and forward multiply-adds, by part, of a config or preset name, from the formulas alone.

    Args:
        cfg_or_name: a model config or a preset name.
        seq_len: positions of a text family (the encoder-decoder: source and target each); default
            :func:`default_size`.
        image_size: a side or ``(height, width)`` for ViT, Swin and DETR; default :func:`default_size`.
        batch: examples per forward pass (multiplies the multiply-adds).

    Returns:
        :class:`Counts`; ``.flops`` is twice the multiply-adds.
    """
    from aiayn.models import family_of, preset

    cfg = preset(cfg_or_name) if isinstance(cfg_or_name, str) else cfg_or_name
    family = family_of(cfg)
    if not isinstance(batch, int) or batch <= 0:
        raise ValueError(f"batch={batch!r} must be a positive integer")
    image = family in ("vit", "swin", "detr")
    if image and seq_len is not None:
        raise ValueError(f"seq_len={seq_len} is for text models; a {family} config takes image_size")
    if not image and image_size is not None:
        raise ValueError(f"image_size={image_size} is for image models; a {family} config takes seq_len")
    size = image_size if image else seq_len
    if size is None:
        size = default_size(cfg)
    if image:
        h, w = (size, size) if isinstance(size, int) else tuple(size)
        if not all(isinstance(v, int) and v > 0 for v in (h, w)):
            raise ValueError(f"image_size={image_size!r} must be a positive side or (height, width)")
        result = {"vit": vit, "swin": swin, "detr": detr}[family](cfg, h, w)
    else:
        if not isinstance(size, int) or size <= 0:
            raise ValueError(f"seq_len={seq_len!r} must be a positive integer")
        if family == "transformer":
            result = transformer(cfg, size, size)
        else:
            result = {"gpt": gpt, "bert": bert}[family](cfg, size)
    return result.batched(batch)


def as_dict(c: Counts) -> dict[str, Any]:
    """JSON-ready: parameters and multiply-adds by part, their totals, and the FLOPs (2 per multiply-add)."""
    return {"parameters": {**c.parameters, "total": c.total_parameters},
            "macs": {**c.macs, "total": c.total_macs}, "flops": c.flops}


__all__ = ["DETR_IMAGE_SIZE", "MAC_PARTS", "PARAMETER_PARTS", "Counts", "as_dict", "attention", "bert", "conv",
           "conv1d", "counts", "decoder_layer", "default_size", "detr", "encoder_layer", "feed_forward", "gpt",
           "layer_norm", "linear", "lstm", "resnet", "resnet_classifier", "restricted_attention", "scorer", "swin",
           "table", "transformer", "vit", "window_attention"]
