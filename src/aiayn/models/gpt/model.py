"""GPT-2 (Radford et al., 2019): the Transformer's decoder alone, trained to predict the next token.

    ids -> token + learned position embeddings, dropout -> N x pre-norm DecoderBlock (causal
    self-attention, no encoder-decoder attention) -> LayerNorm -> Linear (tied to the tokens) -> logits

The blocks are the Transformer's own :class:`~aiayn.layers.DecoderBlock` with ``cross_attention=False``
and ``norm_first=True`` (section 2.3 of the GPT-2 paper moves LayerNorm to the input of each sub-block
and adds one after the last block), GELU in its tanh form, and GPT-2's initialisation: N(0, 0.02) for
weights, with the projections that write into the residual stream scaled by 1/sqrt(2 * n_layers).

Llama (Touvron et al. 2023, section 2.2) is this model with five switches of the shared layers, and Mistral
(Jiang et al. 2023) adds a sixth; each is a config field, and GPT-2's defaults leave every one off:

    field                 GPT-2           Llama / Mistral
    positional            "learned"       "rope": rotary positions on q and k (rope_theta, rope_scaling)
    norm                  "layernorm"     "rmsnorm" (eps: layer_norm_eps)
    activation            "gelu_tanh"     "swiglu": gate and up projections, then the down projection
    n_kv_heads            None (= heads)  fewer key/value heads than query heads (grouped-query attention)
    bias                  True            False: no biases in the attention and feed-forward linears
    attention_window      None            Mistral: each position sees only the last W positions; the KV
                                          cache then keeps about the last 2W (a rolling buffer)

Fine-tuning for classification (Radford et al. 2018, section 3.2 and Figure 1) reads the final hidden state
of the last token of each text (their extract token) into a linear layer; ``head="classification"`` adds that
layer, named ``score`` as in Hugging Face's ``GPT2ForSequenceClassification``:

    ids -> ... -> LayerNorm -> hidden (B, T, C) -> the last real token's state (B, C) -> dropout -> Linear -> (B, K)

Shapes: B batch, T new positions, S all positions (cached + new), C d_model, V vocabulary, K classes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from aiayn.layers import NORMS, DecoderBlock, DecoderCache, Embedding, RotaryEmbedding, Stack, causal_mask, combine
from aiayn.layers.embedding import check_ids
from aiayn.layers.feedforward import ACTIVATIONS, GATED
from aiayn.layers.linear import Linear
from aiayn.layers.positional import rope_frequencies
from aiayn.layers.session import Session
from aiayn.models.config import check_choice, check_divisible, check_positive, check_probability
from aiayn.models.gpt.session import PackedSlots, Slots, SlotSession, make_session
from aiayn.models.outputs import CausalLMOutput, SequenceClassifierOutput, causal_lm_loss, classification_loss
from aiayn.models.pretrained import GenerationMixin, PretrainedMixin

POSITIONAL = ("learned", "rope")
# Llama's switches besides a gated activation: any of them set otherwise than GPT-2 makes the model a Llama
LLAMA_SWITCHES = ("positional", "norm", "n_kv_heads", "bias", "attention_window")
HEADS = ("lm", "classification")


@dataclass(frozen=True)
class GPTConfig:
    """Sizes of a decoder-only language model; defaults are GPT-2 small (124M).

    ``dropout`` is GPT-2's ``resid_pdrop`` and ``embd_pdrop``, ``attention_dropout`` its ``attn_pdrop``.
    ``eos_id`` ends generation (GPT-2's ``<|endoftext|>``, 50256; ``None``: no token does, as a Hugging Face
    config without ``eos_token_id``); ``stop_ids`` are other tokens that end it too (Llama 3.1's chat models list
    three ends: ``eos_id`` 128001, then ``<|eom_id|>`` and ``<|eot_id|>``).

    Llama's switches (module docstring): ``positional="rope"`` with ``rope_theta`` and ``rope_scaling`` (Hugging
    Face's dict, ``{"rope_type": "llama3", "factor", "low_freq_factor", "high_freq_factor",
    "original_max_position_embeddings"}``, or ``None``); ``norm="rmsnorm"`` (its epsilon is ``layer_norm_eps``);
    ``activation="swiglu"``; ``n_kv_heads`` (``None``: as many as ``n_heads``); ``bias``; ``attention_window``
    (``None``: the whole causal past). With rotary positions ``max_len`` is the context the model is sized for
    (no table is learned).

    ``head``: ``"lm"`` (next-token logits only) or ``"classification"`` (also ``num_labels`` class logits from
    the last real token, :meth:`GPT.classify`). ``pad_id``: the token that pads texts for classification
    (``None``: none chosen); it is Hugging Face's ``pad_token_id``, which picks the last token there.
    """

    vocab_size: int = 50257
    max_len: int = 1024
    d_model: int = 768
    n_heads: int = 12
    n_layers: int = 12
    d_ff: int = 3072
    dropout: float = 0.1
    attention_dropout: float = 0.1
    activation: str = "gelu_tanh"
    layer_norm_eps: float = 1e-5
    tie_output: bool = True
    eos_id: int | None = 50256
    positional: str = "learned"
    rope_theta: float = 10000.0
    rope_scaling: dict[str, Any] | None = None
    norm: str = "layernorm"
    n_kv_heads: int | None = None
    bias: bool = True
    attention_window: int | None = None
    head: str = "lm"
    num_labels: int = 2
    pad_id: int | None = None
    stop_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        check_positive(self, "vocab_size", "max_len", "d_model", "n_heads", "n_layers", "d_ff")
        check_divisible(self, "d_model", "n_heads")
        check_probability(self, "dropout", "attention_dropout")
        check_choice(self, "activation", tuple(ACTIVATIONS) + tuple(GATED))
        check_choice(self, "positional", POSITIONAL)
        check_choice(self, "norm", NORMS)
        check_choice(self, "head", HEADS)
        check_positive(self, "num_labels")
        if self.pad_id is not None and not 0 <= self.pad_id < self.vocab_size:
            raise ValueError(f"pad_id={self.pad_id} must be a token id inside the vocabulary [0, {self.vocab_size})")
        if self.eos_id is not None and not 0 <= self.eos_id < self.vocab_size:
            raise ValueError(f"eos_id={self.eos_id} must be a token id inside the vocabulary [0, {self.vocab_size})")
        object.__setattr__(self, "stop_ids", tuple(self.stop_ids))  # a list read back from JSON compares equal
        if not all(isinstance(i, int) and 0 <= i < self.vocab_size for i in self.stop_ids):
            raise ValueError(f"stop_ids={self.stop_ids!r} must be token ids inside the vocabulary [0, "
                             f"{self.vocab_size})")
        if self.n_kv_heads is not None:
            check_positive(self, "n_kv_heads")
            if self.n_heads % self.n_kv_heads:
                raise ValueError(f"n_kv_heads={self.n_kv_heads} must divide n_heads={self.n_heads}")
            if self.n_kv_heads == self.n_heads:  # not grouped has one spelling, so equal models have equal configs
                object.__setattr__(self, "n_kv_heads", None)
        if self.attention_window is not None:
            check_positive(self, "attention_window")
        if not self.rope_theta > 0:
            raise ValueError(f"rope_theta={self.rope_theta!r} must be positive")
        if self.rope_scaling is not None and "type" in self.rope_scaling and "rope_type" not in self.rope_scaling:
            # the old spelling of Hugging Face's key; one spelling, so an export says "rope_type" (which
            # transformers reads first: a dict with only "type" would run there as no scaling at all)
            object.__setattr__(self, "rope_scaling", {"rope_type" if k == "type" else k: v
                                                      for k, v in self.rope_scaling.items()})
        if self.positional == "rope":
            if (self.d_model // self.n_heads) % 2:
                raise ValueError(f"positional='rope' turns pairs of dimensions, so the head dim d_model / n_heads = "
                                 f"{self.d_model} / {self.n_heads} = {self.d_model // self.n_heads} must be even")
            try:
                rope_frequencies(self.d_model // self.n_heads, self.rope_theta, self.rope_scaling)
            except (KeyError, ValueError) as e:
                raise ValueError(f"rope_scaling={self.rope_scaling!r}: {e}") from None
        elif self.rope_scaling is not None:
            raise ValueError(f"rope_scaling={self.rope_scaling!r} needs positional='rope', got {self.positional!r}")

    @property
    def is_encoder_decoder(self) -> bool:
        """``transformers``' name for what ``generate`` asks of a config: a language model continues its prompt."""
        return False

    @property
    def kv_heads(self) -> int:
        """Key/value heads: ``n_kv_heads``, or ``n_heads`` when not grouped."""
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads


def _gpt2(d_model: int, n_layers: int, n_heads: int) -> GPTConfig:
    return GPTConfig(d_model=d_model, n_layers=n_layers, n_heads=n_heads, d_ff=4 * d_model)


def _gpt3(d_model: int, n_layers: int, n_heads: int) -> GPTConfig:
    return GPTConfig(max_len=2048, d_model=d_model, n_layers=n_layers, n_heads=n_heads, d_ff=4 * d_model)


def _llama(vocab_size: int, max_len: int, d_model: int, n_layers: int, n_heads: int, n_kv_heads: int, d_ff: int,
           eps: float = 1e-5, **kw: Any) -> GPTConfig:
    """Llama's block: rotary positions, RMSNorm, SwiGLU, no biases, no dropout, an untied output."""
    return GPTConfig(vocab_size=vocab_size, max_len=max_len, d_model=d_model, n_layers=n_layers, n_heads=n_heads,
                     n_kv_heads=n_kv_heads, d_ff=d_ff, dropout=0.0, attention_dropout=0.0, activation="swiglu",
                     layer_norm_eps=eps, tie_output=False, positional="rope", norm="rmsnorm", bias=False, **kw)


PRESETS = {
    # Table 2 of the GPT-2 paper (with the released models' sizes: 124M, 355M, 774M, 1.5B).
    "gpt2": _gpt2(768, 12, 12),
    "gpt2-medium": _gpt2(1024, 24, 16),
    "gpt2-large": _gpt2(1280, 36, 20),
    "gpt2-xl": _gpt2(1600, 48, 25),
    # GPT-3 (Brown et al. 2020), Table 2.1: n_layers, d_model, n_heads (d_head = d_model / n_heads), context
    # 2048, GPT-2's vocabulary of 50257, d_ff = 4 d_model. For counting (`aiayn count gpt3-175b` builds on the
    # meta device); no weights were released. Two rows of the table do not multiply out: XL lists 24 heads of
    # 128 for d_model 2048, and 13B d_model 5140 for 40 heads of 128; here XL has 16 heads of 128 (neither
    # parameters nor multiply-adds depend on the split) and 13B d_model 5120 = 40 x 128. GPT-3 alternates
    # dense and locally banded sparse attention; these presets are dense, with the same parameters.
    "gpt3-small": _gpt3(768, 12, 12),  # 125M in the table; 125,226,240 here
    "gpt3-medium": _gpt3(1024, 24, 16),  # 350M; 355,871,744
    "gpt3-large": _gpt3(1536, 24, 16),  # 760M; 760,300,032
    "gpt3-xl": _gpt3(2048, 24, 16),  # 1.3B; 1,315,723,264
    "gpt3-2.7b": _gpt3(2560, 32, 32),  # 2.7B; 2,651,553,280
    "gpt3-6.7b": _gpt3(4096, 32, 32),  # 6.7B; 6,658,404,352
    "gpt3-13b": _gpt3(5120, 40, 40),  # 13B; 12,853,386,240
    "gpt3-175b": _gpt3(12288, 96, 96),  # 175B (Table D.1: 174,600M); 174,604,259,328
    # For the default LM job and tests on a laptop CPU; the vocabulary comes from the tokenizer. No
    # dropout: the made-up data never repeats enough to overfit (pass dropout=0.2 for a small real text).
    "gpt-tiny": GPTConfig(vocab_size=256, max_len=256, d_model=128, n_heads=4, n_layers=4, d_ff=512, dropout=0.0,
                          attention_dropout=0.0, eos_id=2),
    # Llama 2 (Touvron et al. 2023, Table 1 and section 2.2; the released config): 6,738,415,616 parameters.
    "llama2-7b": _llama(32000, 4096, 4096, 32, 32, 32, 11008, eos_id=2),
    # Llama 3 (Meta's model card and released config: 8 kv heads, 128K vocabulary, theta 500000): 8,030,261,248.
    "llama3-8b": _llama(128256, 8192, 4096, 32, 32, 8, 14336, eos_id=128001, rope_theta=500000.0),
    # Mistral 7B (Jiang et al. 2023, Table 1: window 4096, 8 kv heads, context 8192; the released v0.1 config
    # allows 32768 positions): 7,241,732,096.
    "mistral-7b": _llama(32000, 32768, 4096, 32, 32, 8, 14336, eos_id=2, attention_window=4096),
    # For tests and CPU training: every Llama switch on, grouped heads (4 query heads share 2 kv heads).
    "llama-tiny": _llama(256, 256, 128, 4, 4, 2, 352, eos_id=2),
}


class GPT(GenerationMixin, PretrainedMixin, nn.Module):
    """Decoder-only language model; ``forward(ids)`` returns next-token logits ``(B, T, V)``."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        rope = cfg.positional == "rope"
        self.embed = Embedding(cfg.vocab_size, cfg.d_model, max_len=cfg.max_len,
                               positional="none" if rope else "learned", dropout=cfg.dropout, scale=False)
        # RoPE: one table of angles for every layer, (cos, sin) handed to each (as Hugging Face's Llama does)
        self.rotary = RotaryEmbedding(cfg.d_model // cfg.n_heads, cfg.rope_theta, cfg.rope_scaling) if rope else None
        self.decoder = Stack(
            [DecoderBlock(cfg.d_model, cfg.n_heads, cfg.d_ff, cfg.dropout, cfg.attention_dropout,
                          activation=cfg.activation, norm_first=True, eps=cfg.layer_norm_eps, cross_attention=False,
                          norm=cfg.norm, n_kv_heads=cfg.n_kv_heads, bias=cfg.bias)
             for _ in range(cfg.n_layers)],
            cfg.d_model, final_norm=True, eps=cfg.layer_norm_eps, norm=cfg.norm,
        )
        self.lm_head = Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.score = Linear(cfg.d_model, cfg.num_labels, bias=False) if cfg.head == "classification" else None
        self._init_weights()
        if cfg.tie_output:
            self.lm_head.weight = self.embed.tokens.weight

    def _init_weights(self) -> None:
        residual = 0.02 / math.sqrt(2 * self.cfg.n_layers)  # GPT-2 section 2.3
        for name, p in self.named_parameters():
            if p.dim() == 1:
                nn.init.ones_(p) if "norm" in name else nn.init.zeros_(p)
            else:
                std = residual if name.endswith(("self_attn.out_proj.weight", "ff.fc2.weight")) else 0.02
                nn.init.normal_(p, std=std)

    def forward(self, ids: Tensor, attention_mask: Tensor | None = None, cache: DecoderCache | None = None) -> Tensor:
        """Logits ``(B, T, V)`` for ids ``(B, T)``: the output layer on :meth:`features` (arguments as there)."""
        return self.lm_head(self.features(ids, attention_mask=attention_mask, cache=cache))

    def features(self, ids: Tensor, attention_mask: Tensor | None = None,
                 cache: DecoderCache | None = None) -> Tensor:
        """Final hidden states ``(B, T, C)`` (after the last LayerNorm) for ids ``(B, T)``.

        Args:
            attention_mask: ``(B, S)`` bool or 0/1, ``True`` for real tokens, over every position so far
                (cached and new): rows padded on the left, as batched prompts of different lengths are.
                Positions then count real tokens only, as Hugging Face's GPT-2 counts them.
            cache: from :meth:`new_cache`; ``ids`` are then only the new positions.

        Without ``attention_mask`` self-attention is SDPA's ``is_causal`` (no mask is built, so CUDA may run
        its flash kernel); with one, a bool mask (the memory-efficient kernel). A sliding window
        (``attention_window``) is always a ``(T, S)`` mask, combined with the padding. Positions and masks are
        built once, by :meth:`positions_and_mask`.
        """
        check_ids(ids, self.cfg.vocab_size, values=False)  # the shape, before it is read; the values in the embedding
        position_ids, mask, is_causal, start = self.positions_and_mask(ids, attention_mask, cache)
        return self.hidden(ids, position_ids=position_ids, start=start, mask=mask, is_causal=is_causal, caches=cache)

    def hidden(self, ids: Tensor, *, position_ids: Tensor | None = None, start: int = 0, mask: Tensor | None = None,
               is_causal: bool = True, caches: Any = None) -> Tensor:
        """The embedding and the blocks on ids ``(B, T)`` whose positions and mask are already built (what
        :meth:`features` builds with :meth:`positions_and_mask`; a decode session's step builds its own):
        final hidden states ``(B, T, C)``.

        Args:
            position_ids: ``(B, T)``, or ``None``: ``start .. start + T - 1``.
            mask: bool, ``True`` = may attend, as :meth:`positions_and_mask` gives it; ``None`` with ``is_causal``.
            caches: one cache per block (a :class:`~aiayn.layers.DecoderCache` or a session's static layers).
        """
        x = self.embed(ids, start=start, position_ids=position_ids)  # (B, T, C)
        t = ids.size(1)
        rotary = None if self.rotary is None else self.rotary(t, start, position_ids)  # (T, D) or (B, 1, T, D)
        return self.decoder(x, self_mask=mask, is_causal=is_causal, caches=caches, rotary=rotary)  # (B, T, C)

    def positions_and_mask(self, ids: Tensor, attention_mask: Tensor | None = None,
                           cache: DecoderCache | None = None) -> tuple[Tensor | None, Tensor | None, bool, int]:
        """The new positions of ``ids`` and what they may attend to, built once for every layer (as Hugging Face
        builds its causal mask once, outside the layers).

        Args:
            ids: ``(B, T)``, the new positions only when there is a ``cache``.
            attention_mask: ``(B, S)`` as :meth:`features` takes it, or ``None``.
            cache: as :meth:`features` takes it, or ``None``.

        Returns:
            ``(position_ids, mask, is_causal, start)``:

            - ``position_ids``: ``(B, T)`` counting real tokens only (rows padded on the left), or ``None``
              without ``attention_mask``: the positions are then ``start .. start + T - 1``.
            - ``mask``: bool, ``True`` = may attend, over the S' keys the cache returns (from
              ``cache.first_visible(T)``: all S unless a sliding window's cache has rolled): ``(B, 1, T, S')``
              padding and causality together, ``(B, 1, 1, S')`` padding for one new token, ``(T, S')`` a
              sliding window alone; ``None`` when ``is_causal``.
            - ``is_causal``: self-attention is SDPA's causal one, no mask built (SDPA takes one or the other).
            - ``start``: the positions already cached, ``cache.length`` (0 without a cache).

        Raises:
            ValueError: ``attention_mask`` not ``(B, cached + new positions)``, or (learned positions) a row of
                more real tokens than ``max_len``.
        """
        start = 0 if cache is None else cache.length
        t = ids.size(1)
        s = start + t
        # the keys of this step start at position `first`: 0, unless a sliding window's cache has rolled
        first = 0 if cache is None else cache.first_visible(t)
        position_ids, mask, is_causal = None, None, True
        if attention_mask is not None:
            if attention_mask.shape != (ids.size(0), s):
                raise ValueError(f"attention_mask must be (batch, cached + new positions) = {(ids.size(0), s)}, "
                                 f"got {tuple(attention_mask.shape)}")
            real = attention_mask.bool()
            if s > self.cfg.max_len and self.rotary is None:  # positions count real tokens only: count them
                # (the one host read here; the embedding reads positions on the CPU only)
                n = int(real.sum(-1).max())
                if n > self.cfg.max_len:
                    raise ValueError(f"sequence of {n} positions is longer than the {self.cfg.max_len} learned "
                                     f"positions (max_len); use a shorter input")
            position_ids = (real.long().cumsum(-1) - 1).clamp(min=0)[:, start:]  # (B, T)
            # SDPA takes a mask or is_causal, not both, so padding with T > 1 needs the full (B, 1, T, S) mask;
            # one new token may see every earlier position, so there it is the key-only padding mask.
            keys = real[:, None, None, first:]  # (B, 1, 1, S - first)
            mask = keys if t == 1 else combine(keys, causal_mask(t, s - first, device=ids.device))  # (B, 1, T, S)
            is_causal = False
        if self.cfg.attention_window is not None:  # Mistral: the causal mask cut to the last W positions
            window = causal_mask(t, s - first, device=ids.device, window=self.cfg.attention_window)  # (T, S)
            mask, is_causal = combine(mask, window), False
        return position_ids, mask, is_causal, start

    def classify(self, hidden: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        """``(B, T, C)`` -> ``(B, num_labels)``: the linear head on the last real token of each row (head
        ``classification``; Radford et al. 2018, section 3.2).

        Args:
            hidden: :meth:`features` of the batch.
            attention_mask: ``(B, T)`` bool or 0/1, ``True`` for real tokens; the rightmost real token is read,
                so rows padded on the left or on the right both work (as ``GPT2ForSequenceClassification``
                reads the rightmost token that is not ``pad_token_id``). ``None``: the last position.
        """
        if self.score is None:
            raise ValueError(f"this GPT has head={self.cfg.head!r}; build it with head='classification'")
        if attention_mask is None:
            last = hidden[:, -1]  # (B, C)
        else:
            if attention_mask.shape != hidden.shape[:2]:
                raise ValueError(f"attention_mask must be (batch, positions) = {tuple(hidden.shape[:2])}, "
                                 f"got {tuple(attention_mask.shape)}")
            positions = torch.arange(hidden.size(1), device=hidden.device)  # (T,)
            index = (positions * attention_mask.bool()).argmax(-1)  # (B,) the rightmost real token
            last = hidden[torch.arange(hidden.size(0), device=hidden.device), index]  # (B, C)
        return self.score(self.embed.dropout(last))  # dropout on the classifier (section 4.1)

    def outputs(self, input_ids: Tensor, attention_mask: Tensor | None = None, labels: Tensor | None = None,
                past_key_values: DecoderCache | None = None, use_cache: bool = False
                ) -> CausalLMOutput | SequenceClassifierOutput:
        """``model(input_ids=..., ...)`` as ``GPT2LMHeadModel`` / ``LlamaForCausalLM`` answer it
        (:mod:`aiayn.models.outputs`); with head ``classification`` as ``GPT2ForSequenceClassification``.

        Args:
            input_ids: ``(B, T)``; the new positions only when ``past_key_values`` is given.
            attention_mask: ``(B, cached + T)``, 1 for real tokens, as :meth:`features` takes it.
            labels: ``(B, T)`` next-token targets, shifted inside (``labels=input_ids``), ``-100`` for none; or
                ``(B,)`` classes with head ``classification``.
            past_key_values: the cache an earlier call returned; ``use_cache``: start one (up to ``max_len``).
        """
        cache = past_key_values if past_key_values is not None or not use_cache else self.new_cache(self.cfg.max_len)
        hidden = self.features(input_ids, attention_mask=attention_mask, cache=cache)  # (B, T, C)
        if self.cfg.head == "classification":
            logits = self.classify(hidden, attention_mask)  # (B, num_labels)
            return SequenceClassifierOutput(loss=classification_loss(logits, labels), logits=logits,
                                            last_hidden_state=hidden)
        logits = self.lm_head(hidden)  # (B, T, V)
        return CausalLMOutput(loss=causal_lm_loss(logits, labels), logits=logits, past_key_values=cache,
                              last_hidden_state=hidden)

    def new_cache(self, max_len: int) -> DecoderCache:
        """An empty key/value cache for up to ``max_len`` positions (prompt and generated); with an
        ``attention_window`` W, it keeps only about the last 2W of them (a rolling buffer)."""
        if max_len > self.cfg.max_len:
            kind = "rotary" if self.rotary is not None else "learned"
            raise ValueError(f"{max_len} positions exceed the model's {self.cfg.max_len} {kind} positions (max_len)")
        return DecoderCache(len(self.decoder.layers), max_len, self.cfg.attention_window)

    def session(self, *, use_cache: bool = True, static: bool = False, compile: bool = False,
                beams: bool = False) -> Session:
        """A decode session (:mod:`aiayn.layers.session`; the prompt and the room for new tokens come with its
        ``prefill``): the one way decoding runs this model (:mod:`aiayn.models.gpt.session`).

        Args:
            use_cache: keep keys and values (``False``: every step recomputes the prefix; the same tokens).
            static: over static buffers, every step the same shapes; ``compile``: that step through
                ``torch.compile`` (implies ``static``).
            beams: the session serves beam search (a static one reorders rows in a table, not in its buffers).
        """
        return make_session(self, use_cache=use_cache, static=static, compile=compile, beams=beams)

    def slots(self, slots: int, length: int | None = None, *, static: bool = False, compile: bool = False) -> Slots:
        """A session of at most ``slots`` rows that requests join and leave (a server's continuous batching), each
        of ``length`` positions at most (default ``max_len``): packed into one growing cache
        (:class:`~aiayn.models.gpt.session.PackedSlots`), or with ``static`` (``compile``: its step compiled) in
        fixed slots (:class:`~aiayn.models.gpt.session.SlotSession`)."""
        if static or compile:
            return SlotSession(self, slots, length, compile=compile)
        return PackedSlots(self, slots, length)


__all__ = ["GPT", "HEADS", "LLAMA_SWITCHES", "PRESETS", "GPTConfig"]
