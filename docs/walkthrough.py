# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     name: python3
# ---

# %% [markdown]
# # One attention computation, step by step, on a trained model
#
# This walkthrough follows "Attention Is All You Need" (Vaswani et al., 2017) through a real, trained
# Transformer: it trains a small one on the copy task (The Annotated Transformer's first example), then
# recomputes by hand what the model computes: embeddings and positions, Q/K/V as matrix products, the
# scores, the division by sqrt(d_k), the softmax, the weighted sum, the heads concatenated and W_O; then
# the masks, the decoder and the output softmax. Every step prints shapes and values and is checked
# against the library's own modules. At the end, the scoring functions the literature lists are set side
# by side, and we see why the scaling by sqrt(d_k) keeps softmax out of saturation. Then the places where the
# tutorials say it differently (label smoothing as KL or cross-entropy, masks multiplied by 0/1, the decoder's
# own K and V, attention dropout), and last GPT-2 turned into Llama one change at a time.
#
# Run it as a script (`python docs/walkthrough.py`) or open it as a notebook with jupytext. CI runs it.
# 中文版: `docs/walkthrough.zh.py`.

# %%
import math
import os
import tempfile

import torch
import torch.nn.functional as F

from aiayn import recipes
from aiayn.data import seq2seq_batch
from aiayn.decoding import greedy
from aiayn.layers import causal_mask, padding_mask, record_attention, sinusoidal_encoding
from aiayn.pipelines.translation import load_run

torch.manual_seed(0)
torch.set_printoptions(precision=3, sci_mode=False)


def check(name, ours, library, atol=1e-5):
    """Our hand computation must equal the library's module."""
    torch.testing.assert_close(ours, library, atol=atol, rtol=1e-4)
    print(f"  ok: {name} equals the library's result {tuple(ours.shape)}")


# %% [markdown]
# ## 0. A trained model
# Two hundred updates of the copy task: the model learns to write its input back, so its encoder-decoder
# attention should look along the diagonal. (The checks below hold for any weights, trained or not: the tests
# run this file with fewer updates, `AIAYN_WALKTHROUGH_STEPS`.)

# %%
updates = int(os.environ.get("AIAYN_WALKTHROUGH_STEPS", "200"))
run = recipes.train("copy", steps=updates, n_train=5000, n_test=50, out=tempfile.mkdtemp(), progress=False,
                    verbose=False)["run"]
model, src_tok, tgt_tok = load_run(run)
model.eval()
torch.set_grad_enabled(False)  # trained: from here on only computation
cfg = model.cfg
print(f"d_model={cfg.d_model}, heads={cfg.n_heads}, d_k={cfg.d_head}, "
      f"layers={cfg.n_encoder_layers}+{cfg.n_decoder_layers}")
text = "abcde"
src, tgt_in, tgt_out = seq2seq_batch([(text, text)], src_tok, tgt_tok)
print("source ids", src.tolist(), " decoder input", tgt_in.tolist())

# %% [markdown]
# ## 1. Embeddings and positions (sections 3.4 and 3.5)
# Each token id picks a row of the embedding table, multiplied by sqrt(d_model); the positional encoding
# PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(...) is added.

# %%
tokens = model.src_embed.tokens.weight[src] * math.sqrt(cfg.d_model)  # (1, S, C)
pe = sinusoidal_encoding(src.size(1), cfg.d_model)  # (S, C)
x = tokens + pe
print("embeddings", tuple(tokens.shape), " PE[1, :4] =", pe[1, :4])
check("embedding + position", x, model.src_embed(src))

# %% [markdown]
# ## 2. Queries, keys and values are matrix products (section 3.2.2)
# One (3C, C) matrix holds W^Q, W^K and W^V of every head. Splitting the C columns of Q into h heads of
# d_k = C/h gives each head its own subspace.

# %%
layer = model.encoder.layers[0]
attn = layer.self_attn
w_q, w_k, w_v = attn.in_proj.weight.split(cfg.d_model)  # each (C, C)
b_q, b_k, b_v = attn.in_proj.bias.split(cfg.d_model)
q, k, v = x @ w_q.T + b_q, x @ w_k.T + b_k, x @ w_v.T + b_v  # (1, S, C)


def heads(t):  # (1, S, C) -> (1, H, S, d_k)
    return t.view(1, -1, cfg.n_heads, cfg.d_head).transpose(1, 2)


q, k, v = heads(q), heads(k), heads(v)
print("Q, K, V per head:", tuple(q.shape))

# %% [markdown]
# ## 3. Scores, scaling, softmax, weighted sum (equation 1)
# Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V.

# %%
scores = q @ k.transpose(-2, -1)  # (1, H, S, S)
scaled = scores / math.sqrt(cfg.d_head)
mask = padding_mask(src, cfg.pad_id)  # (1, 1, 1, S): True = may attend
weights = scaled.masked_fill(~mask, float("-inf")).softmax(-1)
print("scores of head 0, first query:", scores[0, 0, 0], "\n  / sqrt(d_k):", scaled[0, 0, 0],
      "\n  softmax:", weights[0, 0, 0], " (sums to", float(weights[0, 0, 0].sum()), ")")
per_head = weights @ v  # (1, H, S, d_k)

# %% [markdown]
# ## 4. Heads concatenated, then W^O

# %%
concat = per_head.transpose(1, 2).reshape(1, -1, cfg.d_model)  # (1, S, C)
out = concat @ attn.out_proj.weight.T + attn.out_proj.bias
with record_attention(model) as rec:
    library_out, _ = attn(x, mask=mask)
check("multi-head attention", out, library_out)
check("attention weights", weights, rec["encoder.layers.0.self_attn"][0])

# %% [markdown]
# ## 5. Residual, LayerNorm, feed-forward (sections 3.1 and 3.3)
# The paper's layer is post-norm: x = LayerNorm(x + Sublayer(x)); FFN(x) = max(0, x W1 + b1) W2 + b2.

# %%
h = layer.norm1(x + out)
ffn = F.relu(h @ layer.ff.fc1.weight.T + layer.ff.fc1.bias) @ layer.ff.fc2.weight.T + layer.ff.fc2.bias
check("one encoder layer", layer.norm2(h + ffn), layer(x, mask=mask))

# %% [markdown]
# ## 6. Masks (section 3.2.3)
# Padding: no query may look at a padded key. Causal: decoder position i may look only at positions <= i,
# so a future token can never change an earlier output.

# %%
batch = torch.tensor([[5, 6, 7, 2], [5, 6, 2, 0]])  # the second sentence is padded with id 0
print("padding mask (True = may attend):\n", padding_mask(batch, 0)[:, 0, 0].int())
print("causal mask:\n", causal_mask(4).int())
with record_attention(model) as rec:
    model(src, tgt_in)
decoder_weights = rec["decoder.layers.0.self_attn"][0][0]  # (H, T, T)
assert (decoder_weights.triu(1) == 0).all()
print("decoder self-attention above the diagonal: all zero")
changed = tgt_in.clone()
changed[0, -1] = 7  # change the last decoder input
with torch.no_grad():
    before, after = model(src, tgt_in), model(src, changed)
assert torch.allclose(before[:, :-1], after[:, :-1])
print("changing the last token changed no earlier output")

# %% [markdown]
# ## 7. The decoder's output: linear, then softmax (section 3.4)

# %%
with torch.no_grad():
    memory = model.encode(src)
    logits = model.decode(tgt_in, memory, src)  # (1, T, V)
probs = logits.softmax(-1)
print("most likely next tokens:", repr(tgt_tok.decode(probs.argmax(-1)[0].tolist())))
cross = rec["decoder.layers.0.cross_attn"][0][0].mean(0)  # (T, S), averaged over heads
print("encoder-decoder attention (mean of heads), rows = outputs:\n", cross)
print("greedy translation:", repr(tgt_tok.decode(greedy(model, src)[0].tolist())))

# %% [markdown]
# ## 8. Scoring functions side by side
# The same query and keys scored four ways: additive (Bahdanau et al.), dot product (Luong et al.),
# scaled dot product (this paper) and bilinear ("general"). Soft attention averages the values with the
# softmax weights; hard attention takes the single best one.

# %%
g = torch.Generator().manual_seed(0)
d = 64
query, keys_ = torch.randn(d, generator=g), torch.randn(6, d, generator=g)
values = torch.randn(6, 3, generator=g)
W1, W2, vec = torch.randn(d, d, generator=g) / 8, torch.randn(d, d, generator=g) / 8, torch.randn(d, generator=g)
W = torch.randn(d, d, generator=g) / 8
scoring = {
    "additive   v^T tanh(W1 q + W2 k)": torch.tanh(query @ W1.T + keys_ @ W2.T) @ vec,
    "dot        q . k": keys_ @ query,
    "scaled dot q . k / sqrt(d)": keys_ @ query / math.sqrt(d),
    "bilinear   q^T W k": keys_ @ (W.T @ query),
}
for name, s in scoring.items():
    w = s.softmax(-1)
    print(f"{name:36s} weights {w.numpy().round(3)}  max {float(w.max()):.2f}")
w = scoring["scaled dot q . k / sqrt(d)"].softmax(-1)
soft, hard = w @ values, values[w.argmax()]
print("soft attention (weighted mean of values):", soft, "\nhard attention (the best value only):", hard)

# %% [markdown]
# ## 9. Why divide by sqrt(d_k)
# With q and k of independent unit-variance components, q . k has variance d_k (section 3.2.1, footnote 4):
# the larger d_k, the more the unscaled scores spread, and softmax puts almost all weight on one key,
# where its gradient vanishes. Dividing by sqrt(d_k) brings the variance back to 1.

# %%
for d_k in (4, 16, 64, 256, 1024):
    qs, ks = torch.randn(2000, d_k, generator=g), torch.randn(2000, 10, d_k, generator=g)
    raw = torch.einsum("nd,nkd->nk", qs, ks)
    top_raw = raw.softmax(-1).max(-1).values.mean()
    top_scaled = (raw / math.sqrt(d_k)).softmax(-1).max(-1).values.mean()
    print(f"d_k={d_k:5d}: variance of q.k {float(raw.var()):8.1f}; mean largest softmax weight over 10 keys: "
          f"unscaled {float(top_raw):.2f}, scaled {float(top_scaled):.2f}")
    if d_k >= 256:
        assert top_raw > 0.9 > top_scaled  # unscaled: saturated; scaled: still spread out

# %% [markdown]
# ## 10. Where the tutorials say it differently
# **Label smoothing: KL divergence or cross-entropy.** Some tutorials write the smoothed loss as the KL
# divergence KL(q || p) from the smoothed target q to the model's p; we (like fairseq and tensor2tensor) take
# the cross-entropy H(q, p). They differ by H(q), the target's own entropy, which does not depend on the model:
# the gradients are the same and the cross-entropy is higher by H(q) per token.

# %%
from aiayn.training.losses import label_smoothed_loss, smoothing_entropy  # noqa: E402

eps, vocab = 0.1, cfg.tgt_vocab_size
with torch.enable_grad():
    z = model(src, tgt_in).detach().requires_grad_(True)  # (1, T, V)
    q = torch.full_like(z, eps / (vocab - 2))  # eps spread over every token but the target and padding
    q[..., cfg.pad_id] = 0.0
    q.scatter_(-1, tgt_out[..., None], 1.0 - eps)
    ce, _, n = label_smoothed_loss(z, tgt_out, cfg.pad_id, eps)
    kl = F.kl_div(z.log_softmax(-1), q, reduction="sum")
    (grad_ce,), (grad_kl,) = torch.autograd.grad(ce, z), torch.autograd.grad(kl, z)
print(f"cross-entropy {float(ce) / n:.4f}, KL {float(kl) / n:.4f} per token; the difference "
      f"{float(ce - kl) / n:.4f} = H(q) = {smoothing_entropy(vocab, eps):.4f}")
check("the gradients of cross-entropy and KL", grad_ce, grad_kl)

# %% [markdown]
# **Masking by multiplying with 0/1.** A mask has to make a weight exactly zero. Multiplying the *scores* by 0
# leaves a score of 0, and softmax gives exp(0) a share: the future still leaks in. Multiplying the *weights* by
# 0 after the softmax removes it but the row no longer sums to 1. Setting the score to -inf (what we do, as
# PyTorch's `scaled_dot_product_attention` does) gives exp(-inf) = 0 and rows that sum to 1.

# %%
s4 = torch.tensor([[2.0, -1.0, 0.5, 1.0]] * 4)  # four queries over four keys
look_ahead = causal_mask(4)  # (4, 4), True = may attend
times_mask = (s4 * look_ahead).softmax(-1)
after = s4.softmax(-1) * look_ahead
ours = s4.masked_fill(~look_ahead, float("-inf")).softmax(-1)
print("scores x mask, then softmax: weight on the future", times_mask[0, 1:].sum().item(), "(should be 0)")
print("softmax, then x mask: rows sum to", after.sum(-1).tolist())
print("-inf, then softmax: future weight", ours.triu(1).abs().sum().item(), ", rows sum to", ours.sum(-1).tolist())
assert times_mask[0, 1:].sum() > 0.2 and (ours.triu(1) == 0).all()

# %% [markdown]
# **"The encoder hands K and V to the decoder."** It hands over its output, the memory (B, S, C), once. Each
# decoder layer makes its own keys and values from it with its own W^K and W^V (that is what the KV cache keeps
# per layer during decoding), so no two layers attend over the same keys.

# %%
k0, _ = model.decoder.layers[0].cross_attn.project_kv(memory)  # (1, H, S, d_k)
k1, _ = model.decoder.layers[1].cross_attn.project_kv(memory)
print("memory", tuple(memory.shape), "-> layer 0 keys", tuple(k0.shape), "; layer 1's differ from layer 0's:",
      not torch.allclose(k0, k1))
assert not torch.allclose(k0, k1)

# %% [markdown]
# **Dropout on the attention weights.** The paper drops sub-layer outputs and the embedding sums (section 5.4)
# and never mentions the attention weights; the d2l code the tutorials quote drops them too. Ours follows the
# paper: `attention_dropout` is 0 unless set (tensor2tensor's later `transformer_base` uses 0.1).

# %%
print("attention_dropout =", cfg.attention_dropout, "; dropout (sub-layers, embeddings) =", cfg.dropout)

# %% [markdown]
# ## 11. From GPT-2 to Llama, one change at a time
# Llama's block is GPT-2's pre-norm decoder block with five changes, each a switch of the same layers
# (`aiayn.models.gpt`). We turn them on one after another on a small GPT-2 and check what each one does.

# %%
from aiayn import build, count_parameters  # noqa: E402
from aiayn.layers.positional import RotaryEmbedding, apply_rotary  # noqa: E402
from aiayn.models.gpt import GPTConfig  # noqa: E402

steps = {"GPT-2": {}, "+ RoPE": {"positional": "rope"}, "+ RMSNorm": {"norm": "rmsnorm"},
         "+ SwiGLU": {"activation": "swiglu", "d_ff": 344}, "+ grouped kv heads": {"n_kv_heads": 2},
         "+ no biases": {"bias": False}}
switches = {"vocab_size": 100, "max_len": 64, "eos_id": 2, "d_model": 128, "n_heads": 4, "n_layers": 2,
            "d_ff": 512, "dropout": 0.0, "attention_dropout": 0.0}  # a small GPT-2
for name, change in steps.items():
    switches.update(change)
    gpt = build(GPTConfig(**switches)).eval()
    gpt_cfg = gpt.cfg
    kv_per_token = 2 * gpt_cfg.n_layers * gpt_cfg.kv_heads * (gpt_cfg.d_model // gpt_cfg.n_heads) * 4
    print(f"{name:20s} {count_parameters(gpt):>8,} parameters, KV cache {kv_per_token:,} bytes per token")

# %% [markdown]
# **RoPE** turns q and k by angles proportional to their positions, so their dot product depends only on how
# far apart they are: the same pair of vectors scores the same at positions (3, 1) and (40, 38).

# %%
rope = RotaryEmbedding(32)
cos, sin = rope(64)  # (T, D)
qv, kv_ = torch.randn(32, generator=g), torch.randn(32, generator=g)


def rotated_score(m, n):
    return float(apply_rotary(qv, cos[m], sin[m]) @ apply_rotary(kv_, cos[n], sin[n]))


print(f"score at (3, 1): {rotated_score(3, 1):.4f}, at (40, 38): {rotated_score(40, 38):.4f}, "
      f"at (40, 30): {rotated_score(40, 30):.4f}")
assert abs(rotated_score(3, 1) - rotated_score(40, 38)) < 1e-4

# %% [markdown]
# **RMSNorm** drops LayerNorm's mean and bias: x / sqrt(mean(x^2) + eps) * w. **SwiGLU** gates the hidden
# layer: down(silu(gate(x)) * up(x)), three matrices, so d_ff shrinks to about 2/3 to keep the size.
# **Grouped kv heads** let 4 query heads share 2 key/value heads: the cache per token halves.

# %%
block = gpt.decoder.layers[0]
xs = torch.randn(1, 5, 128, generator=g)
rms = xs / xs.pow(2).mean(-1, keepdim=True).add(block.norm1.eps).sqrt() * block.norm1.weight
check("RMSNorm", rms, block.norm1(xs))
ff = block.ff
check("SwiGLU", ff.fc2(F.silu(ff.gate(xs)) * ff.fc1(xs)), ff(xs))
cache = gpt.new_cache(8)
gpt(torch.tensor([[5, 6, 7]]), cache=cache)
print("cached keys per layer:", tuple(cache[0].self_attn.k.shape), "(batch, kv heads, positions, head dim)")
assert cache[0].self_attn.k.size(1) == 2
print("done: every step above matched the library")
