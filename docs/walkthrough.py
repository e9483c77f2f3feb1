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
# by side, and we see why the scaling by sqrt(d_k) keeps softmax out of saturation.
#
# Run it as a script (`python docs/walkthrough.py`) or open it as a notebook with jupytext. CI runs it.
# 中文版: `docs/walkthrough.zh.py`.

# %%
import math
import tempfile

import torch
import torch.nn.functional as F

from aiayn import recipes
from aiayn.data import seq2seq_batch
from aiayn.decoding import greedy
from aiayn.layers import causal_mask, padding_mask, record_attention, sinusoidal_encoding
from aiayn.recipes.translation import load_run

torch.manual_seed(0)
torch.set_printoptions(precision=3, sci_mode=False)


def check(name, ours, library, atol=1e-5):
    """Our hand computation must equal the library's module."""
    torch.testing.assert_close(ours, library, atol=atol, rtol=1e-4)
    print(f"  ok: {name} equals the library's result {tuple(ours.shape)}")


# %% [markdown]
# ## 0. A trained model
# Two hundred updates of the copy task: the model learns to write its input back, so its encoder-decoder
# attention should look along the diagonal.

# %%
run = recipes.train("copy", steps=200, n_train=5000, n_test=50, out=tempfile.mkdtemp(), progress=False,
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
check("one encoder layer", layer.norm2(h + ffn), layer(x, mask))

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
print("done: every step above matched the library")
