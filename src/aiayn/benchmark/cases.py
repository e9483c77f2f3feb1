"""The benchmark cases: ours against PyTorch's, Hugging Face's, CTranslate2's and onnxruntime's models, on the same
work.

Each case builds its models (random weights, no downloads), checks that ours computes what each peer
computes (the same logits within a tolerance, the same generated tokens) and returns a
:class:`~aiayn.benchmark.harness.Case` whose sides each do one unit of work. ``quick=True`` shrinks every
size so the whole set runs in seconds (the tests); the numbers then mean nothing.

    case                    unit of work                                           peers
    train-small             training step, Transformer d256 3+3 layers, vocab 8k  torch.nn.Transformer, MarianMTModel
    train-base              training step, transformer-base, vocab 8k              torch.nn.Transformer, MarianMTModel
    decode-greedy           greedy translation with our KV cache                   MarianMTModel.generate
    decode-beam             beam search (4) with our KV cache                      MarianMTModel.generate
    gpt2-generate           gpt2 greedy generation, batch 1                        GPT2LMHeadModel.generate
    gpt2-train              gpt2 training step, AdamW                              GPT2LMHeadModel
    llama-tiny-generate     llama-tiny greedy generation, batch 1                  LlamaForCausalLM.generate
    llama-tiny-generate-b16 the same, batch 16                                     LlamaForCausalLM.generate
    llama-124m-generate     Llama-shaped 124M greedy generation, batch 1           LlamaForCausalLM.generate
    llama-124m-generate-b16 the same, batch 16                                     LlamaForCausalLM.generate
    swin-forward            swin-t forward, 224 px, eval                           SwinForImageClassification
    vit-forward             vit-b16 forward, 224 px, eval                          ViTForImageClassification
    gpt2-generate-ct2       gpt2-generate's work                                   GPT2LMHeadModel.generate,
                                                                                   ctranslate2.Generator
    gpt2-generate-ct2-int8  the same in int8                                       ctranslate2.Generator
    llama-124m-generate-ct2 llama-124m-generate's work                             LlamaForCausalLM.generate,
                                                                                   ctranslate2.Generator
    llama-124m-generate-b16-ct2  llama-124m-generate-b16's work                    the same
    decode-greedy-ct2       decode-greedy's work                                   MarianMTModel.generate,
                                                                                   ctranslate2.Translator
    decode-greedy-ct2-int8  the same in int8                                       ctranslate2.Translator
    decode-beam-ct2         decode-beam's work, length penalty 0.6                 MarianMTModel.generate,
                                                                                   ctranslate2.Translator
    decode-beam-ct2-int8    the same in int8                                       ctranslate2.Translator
    decode-greedy-ort       decode-greedy's work                                   ours in ONNX, onnxruntime
    gpt2-generate-ort       gpt2-generate's work                                   ours in ONNX, onnxruntime

Where a peer runs the same weights, ours is converted from it with ``aiayn.from_hf`` (the Llama cases go the other
way: ours is exported with :func:`aiayn.convert.to_hf.to_hf` and Hugging Face loads the folder); the
``torch.nn.Transformer`` peer gets our weights copied in, and CTranslate2's models are converted from the Hugging
Face ones (:mod:`aiayn.benchmark.ct2`; CTranslate2 is optional: ``pip install "aiayn[bench]"``, and without it
``aiayn bench`` skips the ``-ct2`` cases). The ``-int8`` cases run :func:`aiayn.layers.int8.quantize` of ours
against CTranslate2's int8 on the CPU; their tokens are not required to equal (rounding differs), and each
side's share of tokens agreeing with float32 is recorded. The ``-ort`` cases export ours to ONNX
(:mod:`aiayn.convert.onnx`) and decode greedily through onnxruntime (:mod:`aiayn.benchmark.ort`; optional, as
CTranslate2 is, and skipped likewise without it).

The training cases use one loss and one optimizer per family on every side: label-smoothed cross-entropy (epsilon
0.1: ours from :mod:`aiayn.training.losses`, the peers ``F.cross_entropy(label_smoothing=0.1)``) and Adam as the
paper sets it; GPT-2 plain cross-entropy and AdamW.

Shapes: B batch, S source length, T target length, N new tokens, V vocabulary.
"""

from __future__ import annotations

import dataclasses
import math
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import aiayn
from aiayn.benchmark.harness import Case, Side, Target, Unavailable, count_flops, memory_bandwidth
from aiayn.decoding import beam_search, greedy, sample
from aiayn.layers.positional import LearnedPositionalEmbedding
from aiayn.models.gpt import GPT, PRESETS, GPTConfig
from aiayn.models.transformer import Transformer, TransformerConfig
from aiayn.training.losses import label_smoothed_loss

TOLERANCE = 1e-4  # on logits, absolute and relative (float32, a few layers)


# --- sizes --------------------------------------------------------------------------------------------------

def small_transformer(quick: bool = False) -> TransformerConfig:
    """``transformer-base`` shrunk to d_model 256, d_ff 1024, 4 heads, 3+3 layers, vocabulary 8,000."""
    if quick:
        return aiayn.preset("transformer-base", src_vocab_size=300, tgt_vocab_size=300, d_model=32, d_ff=64,
                            n_heads=4, n_encoder_layers=1, n_decoder_layers=1, max_len=64)
    return aiayn.preset("transformer-base", src_vocab_size=8000, tgt_vocab_size=8000, d_model=256, d_ff=1024,
                        n_heads=4, n_encoder_layers=3, n_decoder_layers=3)


def base_transformer(quick: bool = False) -> TransformerConfig:
    """``transformer-base`` (Table 3) with a vocabulary of 8,000."""
    if quick:
        return dataclasses.replace(small_transformer(True), d_model=48, d_ff=96, n_encoder_layers=2,
                                   n_decoder_layers=2)
    return aiayn.preset("transformer-base", src_vocab_size=8000, tgt_vocab_size=8000)


def _millions(model: nn.Module) -> str:
    return f"{aiayn.count_parameters(model) / 1e6:.3g}M"


def _describe(cfg: TransformerConfig) -> str:
    return (f"d_model {cfg.d_model}, d_ff {cfg.d_ff}, {cfg.n_heads} heads, {cfg.n_encoder_layers}+"
            f"{cfg.n_decoder_layers} layers, vocabulary {cfg.src_vocab_size:,}")


# --- peers --------------------------------------------------------------------------------------------------

def _interleaved_sinusoids(n: int, d: int) -> Tensor:
    """Section 3.5's table, written out here rather than taken from aiayn: PE(p, 2i) = sin(p / 10000^(2i/d)),
    PE(p, 2i+1) = cos(...)."""
    pos = torch.arange(n, dtype=torch.float64)[:, None]
    angles = pos / 10000 ** (torch.arange(0, d, 2, dtype=torch.float64) / d)  # (n, d/2)
    return torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(1).float()  # (n, d)


class TorchTransformer(nn.Module):
    """The paper's model around ``torch.nn.Transformer``: token embeddings x sqrt(C) + sinusoidal positions,
    dropout, post-norm ReLU layers, a pre-softmax projection tied to the (shared) embeddings.

    Two edits make it compute what ours computes: the extra final LayerNorm ``nn.Transformer`` puts after each
    post-norm stack is left out, and the dropouts ours does not have (on the attention weights, inside the
    feed-forward network) are off; ``dropout`` acts on every sub-layer output and on the embedding sums.
    """

    pe: Tensor  # (max_len, C) the sinusoid table, a buffer

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        c = cfg.d_model
        self.scale = math.sqrt(c)
        self.embed = nn.Embedding(cfg.src_vocab_size, c, padding_idx=cfg.pad_id)
        self.register_buffer("pe", _interleaved_sinusoids(cfg.max_len, c), persistent=False)
        self.drop = nn.Dropout(cfg.dropout)
        layer: dict[str, Any] = {"d_model": c, "nhead": cfg.n_heads, "dim_feedforward": cfg.d_ff,
                                 "dropout": cfg.dropout, "batch_first": True}
        encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(**layer), cfg.n_encoder_layers,
                                        enable_nested_tensor=False)
        decoder = nn.TransformerDecoder(nn.TransformerDecoderLayer(**layer), cfg.n_decoder_layers)
        self.transformer = nn.Transformer(c, cfg.n_heads, custom_encoder=encoder, custom_decoder=decoder,
                                          batch_first=True)
        for block in [*encoder.layers, *decoder.layers]:
            block.dropout = nn.Identity()  # inside the feed-forward network
            for attention in (block.self_attn, getattr(block, "multihead_attn", None)):
                if attention is not None:
                    attention.dropout = 0.0
        self.generator = nn.Linear(c, cfg.tgt_vocab_size)
        self.generator.weight = self.embed.weight
        self.pad_id = cfg.pad_id

    def forward(self, src: Tensor, tgt: Tensor) -> Tensor:
        """Logits ``(B, T, V)``; padding masked as a training loop masks it."""
        x = self.drop(self.embed(src) * self.scale + self.pe[: src.size(1)])  # (B, S, C)
        y = self.drop(self.embed(tgt) * self.scale + self.pe[: tgt.size(1)])  # (B, T, C)
        t = tgt.size(1)
        causal = torch.ones(t, t, dtype=torch.bool, device=tgt.device).triu(1)  # (T, T) True = masked, as padding
        src_pad, tgt_pad = src == self.pad_id, tgt == self.pad_id
        h = self.transformer(x, y, tgt_mask=causal, tgt_is_causal=True, src_key_padding_mask=src_pad,
                             tgt_key_padding_mask=tgt_pad, memory_key_padding_mask=src_pad)
        return self.generator(h)

    def load_ours(self, model: Transformer) -> None:
        """Copy the weights of our :class:`~aiayn.models.transformer.Transformer` (shared, tied embeddings)."""
        table = model.src_embed.tokens.weight
        sd = {"embed.weight": table, "generator.weight": table, "generator.bias": model.generator.bias}
        for side in ("encoder", "decoder"):
            for name, p in getattr(model, side).state_dict().items():
                name = (name.replace("self_attn.in_proj.", "self_attn.in_proj_")
                        .replace("cross_attn.in_proj.", "multihead_attn.in_proj_")
                        .replace("cross_attn.", "multihead_attn.")
                        .replace("ff.fc1", "linear1").replace("ff.fc2", "linear2"))
                sd[f"transformer.{side}.{name}"] = p
        self.load_state_dict(sd, strict=True)  # any name that does not map fails here


def marian(cfg: TransformerConfig, final_bias: dict[int, float] | None = None) -> nn.Module:
    """A randomly initialised ``MarianMTModel`` with the sizes of ``cfg`` (ReLU, shared and tied embeddings);
    ``final_bias`` sets entries of its logits bias."""
    import transformers

    hf = transformers.MarianMTModel(transformers.MarianConfig(
        vocab_size=cfg.src_vocab_size, d_model=cfg.d_model, encoder_layers=cfg.n_encoder_layers,
        decoder_layers=cfg.n_decoder_layers, encoder_attention_heads=cfg.n_heads, decoder_attention_heads=cfg.n_heads,
        encoder_ffn_dim=cfg.d_ff, decoder_ffn_dim=cfg.d_ff, activation_function=cfg.activation,
        max_position_embeddings=cfg.max_len, scale_embedding=cfg.scale_embedding, dropout=cfg.dropout,
        attention_dropout=cfg.attention_dropout, activation_dropout=cfg.activation_dropout, pad_token_id=cfg.pad_id,
        decoder_start_token_id=cfg.bos_id, eos_token_id=cfg.eos_id, forced_eos_token_id=None))
    with torch.no_grad():
        for token, value in (final_bias or {}).items():
            hf.final_logits_bias[0, token] = value
    return hf


# --- checks -------------------------------------------------------------------------------------------------

def close(what: str, got: Tensor, expected: Tensor, tol: float = TOLERANCE) -> dict[str, Any]:
    """Did ``got`` match ``expected`` within ``tol`` (absolute and relative)?"""
    same_shape = got.shape == expected.shape
    diff = (got - expected).abs().max().item() if same_shape else float("inf")
    ok = same_shape and torch.allclose(got, expected, atol=tol, rtol=tol)
    return {"what": what, "max_abs_diff": diff, "tolerance": tol, "ok": bool(ok)}


def same(what: str, got: Tensor, expected: Tensor) -> dict[str, Any]:
    """Are ``got`` and ``expected`` the same ids?"""
    ok = got.shape == expected.shape and torch.equal(got, expected)
    return {"what": what, "shape": list(got.shape), "ok": bool(ok)}


# --- translation: training ----------------------------------------------------------------------------------

def _training_step(model: nn.Module, optimizer: torch.optim.Optimizer,
                   loss: Callable[[], Tensor]) -> Callable[[], None]:
    """Forward, backward, update; the gradients are dropped at the end of the step, not the start of the
    next, so between steps only the weights and the optimizer's state are held (what peak memory is above)."""

    def step() -> None:
        loss().backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    model.train()
    return step


def _adam(model: nn.Module) -> torch.optim.Adam:
    return torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)  # section 5.3


def translation_training(name: str, cfg: TransformerConfig, batch: int, length: int, target: Target,
                         device: torch.device) -> Case:
    """One training step of ``cfg`` on ``batch`` pairs of ``length`` source and ``length`` target tokens."""
    torch.manual_seed(0)
    ours = aiayn.build(cfg)
    peer = TorchTransformer(cfg)
    peer.load_ours(cast(Transformer, ours))  # built from a TransformerConfig
    hf = marian(cfg)
    src = torch.randint(3, cfg.src_vocab_size, (batch, length))  # (B, S) no padding: every side does the same work
    out = torch.randint(3, cfg.tgt_vocab_size, (batch, length))  # (B, T) the targets
    tgt = torch.cat([torch.full((batch, 1), cfg.bos_id), out[:, :-1]], dim=1)  # (B, T) shifted right

    for model in (ours, peer, hf):
        model.eval()
    with torch.no_grad():
        converted = aiayn.from_hf(hf).eval()
        logits = ours(src, tgt)
        checks = {"torch.nn.Transformer": close("logits, our weights copied in (eval)", peer(src, tgt), logits)}
        marian_check = close("logits of ours carrying Marian's weights (from_hf, eval)", converted(src, tgt),
                             hf(input_ids=src, attention_mask=src != cfg.pad_id, decoder_input_ids=tgt).logits)
    # The converted model is ours with the case's config, but for the layout of the sinusoid table.
    marian_check["same_config"] = converted.cfg == dataclasses.replace(cfg, positional="sinusoidal-concat")
    marian_check["ok"] = marian_check["ok"] and marian_check["same_config"]
    checks["MarianMTModel"] = marian_check

    ours, peer, hf = ours.to(device), peer.to(device), hf.to(device)
    src, tgt, out = src.to(device), tgt.to(device), out.to(device)

    def ours_loss() -> Tensor:
        loss, _, n = label_smoothed_loss(ours(src, tgt), out, cfg.pad_id, 0.1)
        return loss / n

    def smoothed(logits: Tensor) -> Tensor:
        return F.cross_entropy(logits.flatten(0, 1), out.flatten(), ignore_index=cfg.pad_id, label_smoothing=0.1)

    sides = [
        Side("aiayn", _training_step(ours, _adam(ours), ours_loss)),
        Side("torch.nn.Transformer", _training_step(peer, _adam(peer), lambda: smoothed(peer(src, tgt)))),
        Side("MarianMTModel", _training_step(hf, _adam(hf), lambda: smoothed(
            hf(input_ids=src, attention_mask=src != cfg.pad_id, decoder_input_ids=tgt).logits))),
    ]
    what = (f"one training step (forward, label-smoothed loss, backward, Adam) of the Transformer ({_describe(cfg)}, "
            f"dropout {cfg.dropout}), batch {batch} x ({length} source + {length} target) tokens; tokens/s counts "
            f"source and target tokens")
    return Case(name, what, sides, units=2 * batch * length, unit="tokens", checks=checks, target=target,
                extra={"config": dataclasses.asdict(cfg), "batch": batch, "length": length,
                       "parameters": aiayn.count_parameters(ours)})


def train_small(quick: bool, device: torch.device) -> Case:
    batch, length = (4, 8) if quick else (32, 32)
    return translation_training("train-small", small_transformer(quick), batch, length, Target(1.15), device)


def train_base(quick: bool, device: torch.device) -> Case:
    batch, length = (4, 8) if quick else (32, 32)
    return translation_training("train-base", base_transformer(quick), batch, length, Target(1.0, mfu=0.7), device)


# --- translation: decoding ----------------------------------------------------------------------------------

@dataclass
class Translation:
    """The decoding cases' work: a Marian-shaped model with random weights, ours converted from it, the sources
    ``src`` ``(B, S)`` (no padding) and ``new`` tokens to generate per sentence."""

    cfg: TransformerConfig
    hf: Any  # MarianMTModel: .generate
    ours: Transformer
    src: Tensor
    new: int


def translation(quick: bool, device: torch.device) -> Translation:
    """:func:`small_transformer` as a ``MarianMTModel`` whose ``</s>`` and padding have a logits bias of -10^4,
    so no side ever ends a sentence and every side makes exactly ``new`` tokens with no logits processor; 16
    sources of 24 tokens, 64 new tokens (quick: 3 x 6, 6)."""
    cfg = small_transformer(quick)
    batch, length, new = (3, 6, 6) if quick else (16, 24, 64)
    torch.manual_seed(0)
    hf: Any = marian(cfg, final_bias={cfg.eos_id: -1e4, cfg.pad_id: -1e4}).eval()
    ours = aiayn.from_hf(hf).eval()
    src = torch.randint(3, cfg.src_vocab_size, (batch, length))  # (B, S)
    return Translation(cfg, hf.to(device), ours.to(device), src.to(device), new)


def decode(model: nn.Module, src: Tensor, beam: int, new: int, length_penalty: float) -> Tensor:
    """Ours: ``new`` tokens per sentence ``(B, N)``, greedy for ``beam=1``, else beam search ranking by
    ``logprob / len ** length_penalty`` (Hugging Face's and CTranslate2's normalisation)."""
    if beam == 1:
        return greedy(model, src, max_len=new)
    ids = beam_search(model, src, beam=beam, length_penalty=length_penalty, max_len=new, normalize="length")
    return cast(Tensor, ids)  # the tokens alone: no return_scores


def generate_marian(hf: Any, src: Tensor, beam: int, new: int, length_penalty: float) -> Tensor:
    """``MarianMTModel.generate``: ``new`` tokens per sentence ``(B, N)``, without the start token."""
    beams = {} if beam == 1 else {"num_beams": beam, "length_penalty": length_penalty}
    out = hf.generate(input_ids=src, attention_mask=torch.ones_like(src), do_sample=False, max_new_tokens=new,
                      **beams)
    return out[:, 1:]


def translation_decoding(name: str, beam: int, quick: bool, device: torch.device) -> Case:
    """Decode a batch with our cache against ``MarianMTModel.generate`` on the same weights.

    Both must run the same number of steps: the shared weights give ``</s>`` (and padding) a logits bias of
    -10^4, so neither ever ends a sentence and both produce exactly ``N`` tokens per sentence (no extra
    logits processors on either side). With every hypothesis the same length, beam search ranks by log-prob
    on both sides, whatever the length penalty.
    """
    t = translation(quick, device)
    cfg, (batch, length), new = t.cfg, t.src.shape, t.new

    def run_ours() -> Tensor:
        return decode(t.ours, t.src, beam, new, length_penalty=1.0)

    def run_hf() -> Tensor:
        return generate_marian(t.hf, t.src, beam, new, length_penalty=1.0)

    got, expected = run_ours(), run_hf()
    check = same(f"generated ids, {new} tokens per sentence on both sides", got, expected)
    check["ok"] = check["ok"] and got.shape == (batch, new)
    how = "greedy decoding" if beam == 1 else f"beam search (beam {beam})"
    what = (f"translation, {how} with our KV cache against MarianMTModel.generate on the same weights "
            f"({_describe(cfg)}), batch {batch} sources of {length} tokens, {new} tokens generated per sentence "
            f"(end of sentence blocked on both sides)")
    target = Target(1.5)
    return Case(name, what, [Side("aiayn", run_ours), Side("MarianMTModel.generate", run_hf)], units=batch * new,
                unit="tokens", checks={"MarianMTModel.generate": check}, target=target,
                extra={"config": dataclasses.asdict(t.ours.cfg), "batch": batch, "source_length": length,
                       "new_tokens": new, "beam": beam})


def decode_greedy(quick: bool, device: torch.device) -> Case:
    return translation_decoding("decode-greedy", 1, quick, device)


def decode_beam(quick: bool, device: torch.device) -> Case:
    return translation_decoding("decode-beam", 4, quick, device)


# --- GPT-2 --------------------------------------------------------------------------------------------------

def gpt2_hf(quick: bool) -> nn.Module:
    """``GPT2LMHeadModel`` of the 124M config (quick: a tiny one), random weights."""
    import transformers

    if quick:
        cfg = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=500, n_positions=64,
                                      bos_token_id=499, eos_token_id=499)
    else:
        cfg = transformers.GPT2Config()
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(cfg)


@dataclass
class Generation:
    """The generation cases' work: a Hugging Face model (``GPT2LMHeadModel``, ``LlamaForCausalLM``) with random
    weights and no end token in its generation config, ours with the same weights, a ``(B, T)`` prompt and ``new``
    tokens to generate."""

    hf: Any  # GPT2LMHeadModel or LlamaForCausalLM: .generate
    ours: GPT
    prompt: Tensor
    new: int


def generation(quick: bool, device: torch.device) -> Generation:
    """:func:`gpt2_hf` with neither an end token nor a padding token to generate with, so it takes every step
    with no logits processor added, as ours given no ``eos_id``; a 16-token prompt, 256 new tokens (quick: 4, 8)."""
    prompt_len, new = (4, 8) if quick else (16, 256)
    hf: Any = gpt2_hf(quick).eval()
    hf.generation_config.eos_token_id = None
    hf.generation_config.pad_token_id = None
    ours = aiayn.from_hf(hf).eval()
    prompt = torch.randint(0, ours.cfg.vocab_size, (1, prompt_len), generator=torch.Generator().manual_seed(0))
    return Generation(hf.to(device), ours.to(device), prompt.to(device), new)


def weight_bytes_per_token(model: GPT) -> int:
    """Bytes of weights one new token reads at batch 1: every parameter once (a tied table once), except the
    tables of which one row is read: the learned positions, and the token table when the output is untied."""
    weights = {id(p): p for p in model.parameters()}
    read = sum(p.numel() * p.element_size() for p in weights.values())
    if isinstance(model.embed.positions, LearnedPositionalEmbedding):  # GPT-2's table
        read -= model.embed.positions.weight.nbytes
    if not model.cfg.tie_output:
        read -= model.embed.tokens.weight.nbytes
    return read


def generate_case(name: str, what: str, g: Generation, peer: str, target: Target, quick: bool,
                  device: torch.device) -> Case:
    """Greedy generation with the KV cache, ours against ``g.hf.generate`` on the same weights; neither stops
    early (ours is given no ``eos_id``, Hugging Face's generation config none either). At batch 1 each new
    token reads every weight once, so memory bandwidth bounds the speed:

        best tokens/s = bandwidth / bytes of weights read per token   (:func:`weight_bytes_per_token`)

    and that ceiling is recorded, the bandwidth measured with a large copy."""
    hf, ours, prompt, new = g.hf, g.ours, g.prompt, g.new
    batch, prompt_len = prompt.shape
    mask = torch.ones_like(prompt)

    def run_ours() -> Tensor:
        return cast(Tensor, sample(ours, prompt, new, temperature=0))  # a tensor prompt gives a tensor

    def run_hf() -> Tensor:
        return hf.generate(prompt, attention_mask=mask, max_new_tokens=new, do_sample=False)

    got, expected = run_ours(), run_hf()
    check = same(f"prompts + {new} generated ids, batch {batch}", got, expected)
    check["ok"] = check["ok"] and got.shape == (batch, prompt_len + new)
    extra: dict[str, Any] = {"batch": batch, "prompt_tokens": prompt_len, "new_tokens": new}
    if batch == 1:
        read = weight_bytes_per_token(ours)
        bandwidth = memory_bandwidth(mib=16 if quick else 512, device=device)
        extra.update(weight_bytes_per_token=read, memory_bandwidth_bytes_per_s=bandwidth,
                     ceiling_tokens_per_s=bandwidth / read)
    return Case(name, what, [Side("aiayn", run_ours), Side(peer, run_hf)], units=batch * new, unit="tokens",
                checks={peer: check}, target=target, extra=extra)


def gpt2_generate(quick: bool, device: torch.device) -> Case:
    """Greedy generation with the KV cache, batch 1, against ``GPT2LMHeadModel.generate`` on the same weights
    (:func:`generate_case`)."""
    g = generation(quick, device)
    what = (f"gpt2 ({_millions(g.ours)} parameters, random weights) greedy generation with the KV cache, batch 1, "
            f"{g.prompt.size(1)}-token prompt, {g.new} new tokens, against GPT2LMHeadModel.generate on the same "
            f"weights")
    return generate_case("gpt2-generate", what, g, "GPT2LMHeadModel.generate", Target(1.3), quick, device)


# --- Llama ---------------------------------------------------------------------------------------------------

# GPT-2 small's sizes with Llama's switches: 4 kv heads, SwiGLU's d_ff 2048 (about 8/3 d_model), Llama 2's
# vocabulary; 124,668,672 parameters (the untied output included)
LLAMA_124M = dataclasses.replace(PRESETS["llama-tiny"], vocab_size=32000, max_len=1024, d_model=768, n_layers=12,
                                 n_heads=12, n_kv_heads=4, d_ff=2048)


def llama_generation(cfg: GPTConfig, batch: int, quick: bool, device: torch.device) -> Generation:
    """Our GPT of ``cfg`` (quick: ``llama-tiny``) with random weights, and the ``LlamaForCausalLM`` that
    Hugging Face loads from its :func:`~aiayn.convert.to_hf.to_hf` folder, with neither an end token nor a
    padding token to generate with (as :func:`generation`); ``batch`` prompts of 16 tokens, 256 new tokens at
    batch 1 (as many as fit in ``max_len``) and 64 at batch 16 (quick: 4, 8)."""
    import transformers

    from aiayn.convert.to_hf import to_hf

    prompt_len, new = (4, 8) if quick else (16, 256 if batch == 1 else 64)
    torch.manual_seed(0)
    ours = GPT(PRESETS["llama-tiny"] if quick else cfg).eval()
    new = min(new, ours.cfg.max_len - prompt_len)  # llama-tiny's 256 positions: 240 new tokens
    with tempfile.TemporaryDirectory() as folder:
        to_hf(ours, folder)
        hf: Any = transformers.LlamaForCausalLM.from_pretrained(folder).eval()
    hf.generation_config.eos_token_id = None
    hf.generation_config.pad_token_id = None
    prompt = torch.randint(0, ours.cfg.vocab_size, (batch, prompt_len), generator=torch.Generator().manual_seed(0))
    return Generation(hf.to(device), ours.to(device), prompt.to(device), new)


def llama_generate(name: str, label: str, cfg: GPTConfig, batch: int, quick: bool, device: torch.device) -> Case:
    """Greedy generation with the KV cache, ``batch`` same-length prompts, against ``LlamaForCausalLM.generate``
    on the same weights (:func:`generate_case`)."""
    g = llama_generation(cfg, batch, quick, device)
    what = (f"{'llama-tiny' if quick else label} ({_millions(g.ours)} parameters, random weights) greedy "
            f"generation with the KV cache, batch {batch}, {g.prompt.size(1)}-token prompts, {g.new} new tokens, "
            f"against LlamaForCausalLM.generate on the same weights (exported with to_hf); no side has an end token")
    return generate_case(name, what, g, "LlamaForCausalLM.generate", Target(1.0), quick, device)


def llama_tiny_generate(quick: bool, device: torch.device) -> Case:
    return llama_generate("llama-tiny-generate", "llama-tiny", PRESETS["llama-tiny"], 1, quick, device)


def llama_tiny_generate_b16(quick: bool, device: torch.device) -> Case:
    return llama_generate("llama-tiny-generate-b16", "llama-tiny", PRESETS["llama-tiny"], 16, quick, device)


def llama_124m_generate(quick: bool, device: torch.device) -> Case:
    return llama_generate("llama-124m-generate", "Llama-shaped 124M", LLAMA_124M, 1, quick, device)


def llama_124m_generate_b16(quick: bool, device: torch.device) -> Case:
    return llama_generate("llama-124m-generate-b16", "Llama-shaped 124M", LLAMA_124M, 16, quick, device)


def gpt2_train(quick: bool, device: torch.device) -> Case:
    """One training step (forward, next-token cross-entropy, backward, AdamW) against ``GPT2LMHeadModel`` on the
    same weights, with GPT-2's dropout (0.1) on both. The check runs with dropout off (eval): the loss and
    the gradients must agree."""
    batch, length = (2, 16) if quick else (4, 256)
    hf = gpt2_hf(quick)
    ours = aiayn.from_hf(hf)
    v = ours.cfg.vocab_size
    ids = torch.randint(0, v, (batch, length), generator=torch.Generator().manual_seed(0))  # (B, T)

    def ours_loss() -> Tensor:
        logits = ours(ids)  # (B, T, V)
        return F.cross_entropy(logits[:, :-1].reshape(-1, v), ids[:, 1:].reshape(-1))

    def hf_loss() -> Tensor:
        return hf(input_ids=ids, labels=ids).loss  # shifts the labels itself

    ours.eval()
    hf.eval()
    mine, theirs = ours_loss(), hf_loss()
    mine.backward()
    theirs.backward()
    check = close("loss, dropout off (eval)", mine.detach(), theirs.detach())
    grads = []
    for name, hf_name, transposed in (("embed.tokens.weight", "transformer.wte.weight", False),
                                      ("decoder.layers.0.ff.fc1.weight", "transformer.h.0.mlp.c_fc.weight", True)):
        expected = hf.get_parameter(hf_name).grad
        assert expected is not None  # theirs.backward() above
        expected = expected.T if transposed else expected  # GPT-2's Conv1D stores (in, out)
        scale = expected.abs().max()
        grads.append(close(f"gradient of {name} / its largest entry", ours.get_parameter(name).grad / scale,
                           expected / scale))
    check["gradients"] = grads
    check["ok"] = check["ok"] and all(g["ok"] for g in grads)
    ours.zero_grad(set_to_none=True)
    hf.zero_grad(set_to_none=True)

    ours, hf, ids = ours.to(device), hf.to(device), ids.to(device)

    def adamw(model: nn.Module) -> torch.optim.AdamW:
        return torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1)

    sides = [Side("aiayn", _training_step(ours, adamw(ours), ours_loss)),
             Side("GPT2LMHeadModel", _training_step(hf, adamw(hf), hf_loss))]
    what = (f"gpt2 ({_millions(ours)} parameters) training step (forward, cross-entropy, "
            f"backward, AdamW), batch {batch} x {length} tokens, dropout 0.1, against GPT2LMHeadModel on the same "
            f"weights")
    return Case("gpt2-train", what, sides, units=batch * length, unit="tokens",
                checks={"GPT2LMHeadModel": check}, extra={"batch": batch, "length": length})


# --- against CTranslate2 -----------------------------------------------------------------------------------

CT2_LENGTH_PENALTY = 0.6  # section 6.1's alpha, as len ** alpha on every side (CTranslate2 has no GNMT penalty)
INT8_WORDS = ("in int8 (ours: aiayn.layers.int8.quantize, every Linear and token table, fbgemm's dynamic int8 "
              "products; CTranslate2: int8 weights, compute type int8)")


def _ct2(device: torch.device) -> Any:
    """:mod:`aiayn.benchmark.ct2`, once CTranslate2 is known to be installed and the device is the CPU."""
    from aiayn.benchmark import ct2

    ct2.require()
    if device.type != "cpu":
        raise Unavailable(f"runs on the CPU only (fbgemm's int8 kernels, CTranslate2's CPU build), not {device}")
    return ct2


def _threads() -> str:
    """The threads every side runs on (torch's, and CTranslate2's ``intra_threads``)."""
    n = torch.get_num_threads()
    return f"{n} thread" + ("s" if n != 1 else "")


def agreement(got: Tensor, expected: Tensor) -> float:
    """The share of positions where ``got`` and ``expected`` ``(B, N)`` hold the same id; 0 if their shapes
    differ."""
    return (got == expected).float().mean().item() if got.shape == expected.shape else 0.0


def agreeing_prefix(got: Tensor, expected: Tensor) -> float:
    """Tokens before the first difference between ``got`` and ``expected`` ``(B, N)``, the mean over rows; 0 if
    their shapes differ."""
    if got.shape != expected.shape:
        return 0.0
    return (got == expected).long().cumprod(dim=1).sum(dim=1).float().mean().item()  # (B,) leading run, averaged


def against_ct2(name: str, what: str, precision: str, model: nn.Module, ours: Callable[[nn.Module], Tensor],
                peers: list[Side], unit_shape: tuple[int, int], extra: dict[str, Any]) -> Case:
    """A case of ours against CTranslate2 (and, at float32, Hugging Face) at ``precision``.

    Args:
        model: ours at float32; at ``"int8"`` the sides run :func:`aiayn.layers.int8.quantize` of it.
        ours: decodes with a model, giving the new tokens ``(B, N)``; every peer's ``run`` gives them too.
        unit_shape: ``(B, N)``: every side must take every step.

    At float32 every peer must give ours' tokens. In int8 rounding may flip a close choice, and a sequence
    goes its own way from there, so tokens are not required to agree: ``extra["agreement_with_float32"]``
    holds each side's share of tokens equal to ours' at float32 (which the float32 case checks CTranslate2
    reproduces), and ``extra["agreeing_prefix_with_float32"]`` how many tokens per sequence agree before the
    first difference. The FLOPs are counted on ours at float32 (PyTorch does not count the int8 products).
    """
    extra = {**extra, "precision": precision, "new_tokens": unit_shape[1]}
    if precision == "float32":
        expected = ours(model)
        checks = {}
        for peer in peers:
            got = peer.run()
            check = same(f"generated ids, {unit_shape[1]} tokens per sequence on both sides", got, expected)
            check["ok"] = check["ok"] and got.shape == unit_shape
            checks[peer.name] = check
        sides = [Side("aiayn", lambda: ours(model)), *peers]
        return Case(name, what, sides, units=unit_shape[0] * unit_shape[1], unit="tokens", checks=checks,
                    target=Target(1.0), extra=extra)

    from aiayn.layers.int8 import quantize

    reference: list[Tensor] = []
    flops = count_flops(lambda: reference.append(ours(model)))
    small = quantize(model)
    mine = ours(small)
    outputs = {"aiayn": mine}
    checks = {}
    for peer in peers:
        got = outputs[peer.name] = peer.run()
        checks[peer.name] = {"what": f"int8: {unit_shape[1]} tokens per sequence on both sides, not required to equal "
                                     f"(rounding differs); shares agreeing with float32 in extra",
                             "shape": list(got.shape), "agreement_with_ours": agreement(got, mine),
                             "ok": got.shape == unit_shape and mine.shape == unit_shape}
    extra["agreement_with_float32"] = {k: agreement(v, reference[0]) for k, v in outputs.items()}
    extra["agreeing_prefix_with_float32"] = {k: agreeing_prefix(v, reference[0]) for k, v in outputs.items()}
    return Case(name, what, [Side("aiayn", lambda: ours(small)), *peers], units=unit_shape[0] * unit_shape[1],
                unit="tokens", checks=checks, target=Target(1.0), flops=flops, extra=extra)


def gpt2_ct2(precision: str, quick: bool, device: torch.device) -> Case:
    """:func:`gpt2_generate`'s work against CTranslate2's ``Generator`` on the same weights (and at float32 also
    ``GPT2LMHeadModel.generate``). CTranslate2 gets ``end_token=[]``: no token ends its sequence, as ours has
    no ``eos_id`` and Hugging Face's config no end token, so every side takes every step and none changes a
    logit."""
    ct2 = _ct2(device)
    g = generation(quick, device)
    hf, prompt, new = g.hf, g.prompt, g.new
    eos = hf.config.eos_token_id
    vocab = ct2.Vocabulary(g.ours.cfg.vocab_size, {eos: "<|endoftext|>"}, bos=eos, eos=eos)
    generator = ct2.generator(hf, vocab, precision)
    start, t = vocab.tokens(prompt), prompt.size(1)
    mask = torch.ones_like(prompt)

    def run_ours(model: nn.Module) -> Tensor:
        return cast(Tensor, sample(model, prompt, new, temperature=0))[:, t:]  # (1, N) a tensor prompt: a tensor

    def run_hf() -> Tensor:
        return hf.generate(prompt, attention_mask=mask, max_new_tokens=new, do_sample=False)[:, t:]

    def run_ct2() -> Tensor:
        out = generator.generate_batch(start, max_length=new, include_prompt_in_result=False, end_token=[],
                                       beam_size=1)
        return torch.tensor([r.sequences_ids[0] for r in out])  # (1, N)

    peer = Side("ctranslate2.Generator", run_ct2, torch_memory=False)
    peers = [Side("GPT2LMHeadModel.generate", run_hf), peer] if precision == "float32" else [peer]
    against = " and ".join(p.name for p in peers)
    words = "float32" if precision == "float32" else INT8_WORDS
    what = (f"gpt2 ({_millions(g.ours)} parameters, random weights) greedy generation with the KV cache, batch 1, "
            f"{t}-token prompt, {new} new tokens, {words}, against {against} (CTranslate2 {ct2.version()}, "
            f"{_threads()}) on the same weights; no side has an end token")
    name = "gpt2-generate-ct2" + ("" if precision == "float32" else "-int8")
    return against_ct2(name, what, precision, g.ours, run_ours, peers, (1, new),
                       {"prompt_tokens": t, "ctranslate2": ct2.version()})


def llama_ct2(batch: int, quick: bool, device: torch.device) -> Case:
    """:func:`llama_generate`'s work on the Llama-shaped 124M at float32 against CTranslate2's ``Generator``
    (converted from the ``LlamaForCausalLM``) and ``LlamaForCausalLM.generate``, with ``end_token=[]`` as in
    :func:`gpt2_ct2`."""
    ct2 = _ct2(device)
    g = llama_generation(LLAMA_124M, batch, quick, device)
    hf, prompt, new = g.hf, g.prompt, g.new
    eos = g.ours.cfg.eos_id
    vocab = ct2.Vocabulary(g.ours.cfg.vocab_size, {eos: "</s>"}, bos=eos, eos=eos)
    generator = ct2.generator(hf, vocab, "float32")
    start, t = vocab.tokens(prompt), prompt.size(1)
    mask = torch.ones_like(prompt)

    def run_ours(model: nn.Module) -> Tensor:
        return cast(Tensor, sample(model, prompt, new, temperature=0))[:, t:]  # (B, N) a tensor prompt: a tensor

    def run_hf() -> Tensor:
        return hf.generate(prompt, attention_mask=mask, max_new_tokens=new, do_sample=False)[:, t:]

    def run_ct2() -> Tensor:
        out = generator.generate_batch(start, max_length=new, include_prompt_in_result=False, end_token=[],
                                       beam_size=1)
        return torch.tensor([r.sequences_ids[0] for r in out])  # (B, N)

    peers = [Side("LlamaForCausalLM.generate", run_hf), Side("ctranslate2.Generator", run_ct2, torch_memory=False)]
    what = (f"{'llama-tiny' if quick else 'Llama-shaped 124M'} ({_millions(g.ours)} parameters, random weights) "
            f"greedy generation with the KV cache, batch {batch}, {t}-token prompts, {new} new tokens, float32, "
            f"against LlamaForCausalLM.generate and ctranslate2.Generator (CTranslate2 {ct2.version()}, "
            f"{_threads()}) on the same weights; no side has an end token")
    name = "llama-124m-generate" + ("" if batch == 1 else f"-b{batch}") + "-ct2"
    return against_ct2(name, what, "float32", g.ours, run_ours, peers, (batch, new),
                       {"batch": batch, "prompt_tokens": t, "ctranslate2": ct2.version()})


def llama_124m_generate_ct2(quick: bool, device: torch.device) -> Case:
    return llama_ct2(1, quick, device)


def llama_124m_generate_b16_ct2(quick: bool, device: torch.device) -> Case:
    return llama_ct2(16, quick, device)


def translation_ct2(name: str, beam: int, precision: str, quick: bool, device: torch.device) -> Case:
    """:func:`translation_decoding`'s work against CTranslate2's ``Translator`` on the same weights (and at
    float32 also ``MarianMTModel.generate``); beam search ranks by ``logprob / len ** 0.6`` on every side (every
    hypothesis has ``N`` tokens, so the ranking is by log-prob whatever the penalty)."""
    ct2 = _ct2(device)
    tr = translation(quick, device)
    cfg, src, new = tr.cfg, tr.src, tr.new
    vocab = ct2.Vocabulary(cfg.tgt_vocab_size, {cfg.pad_id: "<pad>", cfg.bos_id: "<s>", cfg.eos_id: "</s>"},
                           bos=cfg.bos_id, eos=cfg.eos_id)
    translator = ct2.translator(tr.hf, vocab, precision)
    source = vocab.tokens(src)

    def run_ours(model: nn.Module) -> Tensor:
        return decode(model, src, beam, new, CT2_LENGTH_PENALTY)

    def run_hf() -> Tensor:
        return generate_marian(tr.hf, src, beam, new, CT2_LENGTH_PENALTY)

    def run_ct2() -> Tensor:
        out = translator.translate_batch(source, beam_size=beam, length_penalty=CT2_LENGTH_PENALTY,
                                         max_decoding_length=new)
        return vocab.ids([r.hypotheses[0] for r in out])  # (B, N)

    peer = Side("ctranslate2.Translator", run_ct2, torch_memory=False)
    peers = [Side("MarianMTModel.generate", run_hf), peer] if precision == "float32" else [peer]
    how = "greedy decoding" if beam == 1 else f"beam search (beam {beam}, length penalty {CT2_LENGTH_PENALTY})"
    against = " and ".join(p.name for p in peers)
    words = "float32" if precision == "float32" else INT8_WORDS
    what = (f"translation, {how} with our KV cache, {words}, against {against} (CTranslate2 {ct2.version()}, "
            f"{_threads()}) on the same weights ({_describe(cfg)}), batch {src.size(0)} sources "
            f"of {src.size(1)} tokens, {new} tokens generated per sentence (end of sentence blocked on every side)")
    return against_ct2(name, what, precision, tr.ours, run_ours, peers, (src.size(0), new),
                       {"config": dataclasses.asdict(tr.ours.cfg), "batch": src.size(0), "source_length": src.size(1),
                        "beam": beam, "ctranslate2": ct2.version()})


def gpt2_generate_ct2(quick: bool, device: torch.device) -> Case:
    return gpt2_ct2("float32", quick, device)


def gpt2_generate_ct2_int8(quick: bool, device: torch.device) -> Case:
    return gpt2_ct2("int8", quick, device)


def decode_greedy_ct2(quick: bool, device: torch.device) -> Case:
    return translation_ct2("decode-greedy-ct2", 1, "float32", quick, device)


def decode_greedy_ct2_int8(quick: bool, device: torch.device) -> Case:
    return translation_ct2("decode-greedy-ct2-int8", 1, "int8", quick, device)


def decode_beam_ct2(quick: bool, device: torch.device) -> Case:
    return translation_ct2("decode-beam-ct2", 4, "float32", quick, device)


def decode_beam_ct2_int8(quick: bool, device: torch.device) -> Case:
    return translation_ct2("decode-beam-ct2-int8", 4, "int8", quick, device)


# --- against onnxruntime ----------------------------------------------------------------------------------

def _ort(device: torch.device) -> Any:
    """:mod:`aiayn.benchmark.ort`, once onnxruntime and the exporter are known to be installed and the device is
    the CPU."""
    from aiayn.benchmark import ort

    ort.require()
    if device.type != "cpu":
        raise Unavailable(f"runs on the CPU only (onnxruntime's CPU execution provider), not {device}")
    return ort


def _opset(peer: Any) -> int:
    return next(iter(peer.spec["graphs"].values()))["opset"]


def _ort_words(ort: Any, peer: Any) -> str:
    """How the onnxruntime side runs, for a case's ``what``."""
    return (f"exported to ONNX (aiayn.convert.onnx: torch.onnx.export(dynamo=True), opset {_opset(peer)}) and "
            f"decoded greedily through onnxruntime {ort.version()} (CPU execution provider, {_threads()}; a Python "
            f"loop around one session run per step, the cache going in and out of each run as past/present tensors)")


def decode_greedy_ort(quick: bool, device: torch.device) -> Case:
    """:func:`translation_decoding`'s greedy work against the same model exported to ONNX and decoded greedily
    through onnxruntime (:class:`~aiayn.convert.onnx.OnnxSeq2Seq`): the same steps, ``pad_id`` never chosen, rows
    leaving the batch at ``</s>`` (which the case's logits bias keeps from ever coming)."""
    ort = _ort(device)
    tr = translation(quick, device)
    cfg, src, new = tr.cfg, tr.src, tr.new
    peer = ort.seq2seq(tr.ours)

    def run_ours() -> Tensor:
        return greedy(tr.ours, src, max_len=new)

    def run_ort() -> Tensor:
        return peer.greedy(src, max_len=new)

    got, expected = run_ort(), run_ours()
    check = same(f"generated ids, {new} tokens per sentence on both sides", got, expected)
    check["ok"] = check["ok"] and got.shape == (src.size(0), new)
    what = (f"translation, greedy decoding with our KV cache, float32, against the same weights "
            f"({_describe(cfg)}) {_ort_words(ort, peer)}, batch {src.size(0)} sources of {src.size(1)} tokens, "
            f"{new} tokens generated per sentence (end of sentence blocked on both sides)")
    return Case("decode-greedy-ort", what, [Side("aiayn", run_ours), Side("onnxruntime", run_ort, torch_memory=False)],
                units=src.size(0) * new, unit="tokens", checks={"onnxruntime": check}, target=Target(1.0),
                extra={"config": dataclasses.asdict(tr.ours.cfg), "batch": src.size(0), "source_length": src.size(1),
                       "new_tokens": new, "onnxruntime": ort.version(), "opset": _opset(peer),
                       "exporter": peer.spec["exporter"]})


def gpt2_generate_ort(quick: bool, device: torch.device) -> Case:
    """:func:`gpt2_generate`'s work against the same model exported to ONNX and generating greedily through
    onnxruntime (:class:`~aiayn.convert.onnx.OnnxGPT`): one graph runs the prompt (on an empty past) and every
    step after it. No side has an end token, so both take every step."""
    ort = _ort(device)
    g = generation(quick, device)
    ours, prompt, new = g.ours, g.prompt, g.new
    t = prompt.size(1)
    peer = ort.gpt(ours)

    def run_ours() -> Tensor:
        return cast(Tensor, sample(ours, prompt, new, temperature=0))[:, t:]  # (1, N) a tensor prompt: a tensor

    def run_ort() -> Tensor:
        return peer.generate(prompt, max_new_tokens=new)[:, t:]  # (1, N)

    got, expected = run_ort(), run_ours()
    check = same(f"generated ids, {new} tokens on both sides", got, expected)
    check["ok"] = check["ok"] and got.shape == (1, new)
    what = (f"gpt2 ({_millions(ours)} parameters, random weights) greedy generation with the KV cache, batch 1, "
            f"{t}-token prompt, {new} new tokens, float32, against the same weights {_ort_words(ort, peer)}; no "
            f"side has an end token")
    return Case("gpt2-generate-ort", what, [Side("aiayn", run_ours), Side("onnxruntime", run_ort, torch_memory=False)],
                units=new, unit="tokens", checks={"onnxruntime": check}, target=Target(1.0),
                extra={"prompt_tokens": t, "new_tokens": new, "onnxruntime": ort.version(), "opset": _opset(peer),
                       "exporter": peer.spec["exporter"]})


# --- vision -------------------------------------------------------------------------------------------------

def vision_hf(name: str) -> nn.Module:
    """The Hugging Face image classifier with the sizes of our preset ``name`` (random weights)."""
    import transformers

    cfg = aiayn.preset(name)
    if name.startswith("swin"):
        return transformers.SwinForImageClassification(transformers.SwinConfig(
            image_size=cfg.image_size, patch_size=cfg.patch_size, num_channels=cfg.in_channels, embed_dim=cfg.d_model,
            depths=list(cfg.n_layers), num_heads=list(cfg.n_heads), window_size=cfg.window_size,
            mlp_ratio=cfg.mlp_ratio, num_labels=cfg.num_classes))
    return transformers.ViTForImageClassification(transformers.ViTConfig(
        image_size=cfg.image_size, patch_size=cfg.patch_size, num_channels=cfg.in_channels, hidden_size=cfg.d_model,
        num_hidden_layers=cfg.n_layers, num_attention_heads=cfg.n_heads, intermediate_size=cfg.d_ff,
        num_labels=cfg.num_classes))


def vision_forward(name: str, preset: str, peer: str, quick: bool, device: torch.device) -> Case:
    """Forward of ``preset`` in eval mode without gradients against Hugging Face's, on the same weights."""
    batch = 2 if quick else 8
    torch.manual_seed(0)
    hf = vision_hf(preset).eval()
    ours = aiayn.from_hf(hf).eval()
    hf, ours = hf.to(device), ours.to(device)
    cfg = ours.cfg
    images = torch.randn(batch, cfg.in_channels, cfg.image_size, cfg.image_size, device=device)

    def run_ours() -> Tensor:
        with torch.no_grad():
            return ours(images)

    def run_hf() -> Tensor:
        with torch.no_grad():
            return hf(pixel_values=images).logits

    checks = {peer: close("class logits", run_ours(), run_hf())}
    what = (f"{preset} forward ({_millions(ours)} parameters), {cfg.image_size} px, batch "
            f"{batch}, eval, no gradients, against {peer} on the same weights")
    return Case(name, what, [Side("aiayn", run_ours), Side(peer, run_hf)], units=batch, unit="images",
                checks=checks, target=Target(1.2), extra={"preset": preset, "batch": batch})


def swin_forward(quick: bool, device: torch.device) -> Case:
    return vision_forward("swin-forward", "swin-tiny" if quick else "swin-t", "SwinForImageClassification", quick,
                          device)


def vit_forward(quick: bool, device: torch.device) -> Case:
    return vision_forward("vit-forward", "vit-tiny" if quick else "vit-b16", "ViTForImageClassification", quick,
                          device)


CASES: dict[str, Callable[[bool, torch.device], Case]] = {
    "train-small": train_small,
    "train-base": train_base,
    "decode-greedy": decode_greedy,
    "decode-beam": decode_beam,
    "gpt2-generate": gpt2_generate,
    "gpt2-train": gpt2_train,
    "llama-tiny-generate": llama_tiny_generate,
    "llama-tiny-generate-b16": llama_tiny_generate_b16,
    "llama-124m-generate": llama_124m_generate,
    "llama-124m-generate-b16": llama_124m_generate_b16,
    "swin-forward": swin_forward,
    "vit-forward": vit_forward,
    "gpt2-generate-ct2": gpt2_generate_ct2,
    "gpt2-generate-ct2-int8": gpt2_generate_ct2_int8,
    "llama-124m-generate-ct2": llama_124m_generate_ct2,
    "llama-124m-generate-b16-ct2": llama_124m_generate_b16_ct2,
    "decode-greedy-ct2": decode_greedy_ct2,
    "decode-greedy-ct2-int8": decode_greedy_ct2_int8,
    "decode-beam-ct2": decode_beam_ct2,
    "decode-beam-ct2-int8": decode_beam_ct2_int8,
    "decode-greedy-ort": decode_greedy_ort,
    "gpt2-generate-ort": gpt2_generate_ort,
}

__all__ = ["CASES", "TorchTransformer", "base_transformer", "close", "marian", "same", "small_transformer"]
