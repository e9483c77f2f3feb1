# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     name: python3
# ---

# %% [markdown]
# # 一步一步看一次注意力计算:在训练好的模型上
#
# 本文按照《Attention Is All You Need》(Vaswani 等, 2017) 的顺序, 在一个真正训练过的 Transformer 上
# 逐步演示: 先在复制任务 (The Annotated Transformer 的第一个例子) 上训练一个小模型, 然后手工重算模型所做的
# 每一步: 词嵌入与位置编码、以矩阵乘法得到 Q/K/V、打分、除以 sqrt(d_k)、softmax、加权求和、拼接各个头再乘 W_O;
# 接着是掩码、解码器和输出的 softmax。每一步都打印形状和数值, 并与库中的模块逐一核对。最后把文献中常见的
# 几种打分函数放在一起比较, 并说明为什么除以 sqrt(d_k) 能让 softmax 不至于饱和。
#
# 可以直接运行 (`python docs/walkthrough.zh.py`), 也可以用 jupytext 当作 notebook 打开。CI 会运行英文版;
# 测试保证两个版本的代码完全相同, 只有说明文字不同。English: `docs/walkthrough.py`.

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
    """我们手算的结果必须等于库中模块的结果。"""
    torch.testing.assert_close(ours, library, atol=atol, rtol=1e-4)
    print(f"  ok: {name} equals the library's result {tuple(ours.shape)}")


# %% [markdown]
# ## 0. 一个训练好的模型
# 在复制任务上更新两百次: 模型学会把输入原样写出, 所以它的编码器-解码器注意力应当沿对角线分布。

# %%
run = recipes.train("copy", steps=200, n_train=5000, n_test=50, out=tempfile.mkdtemp(), progress=False,
                    verbose=False)["run"]
model, src_tok, tgt_tok = load_run(run)
model.eval()
torch.set_grad_enabled(False)  # 之后只做计算, 不做训练
cfg = model.cfg
print(f"d_model={cfg.d_model}, heads={cfg.n_heads}, d_k={cfg.d_head}, "
      f"layers={cfg.n_encoder_layers}+{cfg.n_decoder_layers}")
text = "abcde"
src, tgt_in, tgt_out = seq2seq_batch([(text, text)], src_tok, tgt_tok)
print("source ids", src.tolist(), " decoder input", tgt_in.tolist())

# %% [markdown]
# ## 1. 词嵌入与位置编码 (第 3.4、3.5 节)
# 每个词的编号取出嵌入表中的一行, 乘以 sqrt(d_model); 再加上位置编码
# PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(...)。

# %%
tokens = model.src_embed.tokens.weight[src] * math.sqrt(cfg.d_model)  # (1, S, C)
pe = sinusoidal_encoding(src.size(1), cfg.d_model)  # (S, C)
x = tokens + pe
print("embeddings", tuple(tokens.shape), " PE[1, :4] =", pe[1, :4])
check("embedding + position", x, model.src_embed(src))

# %% [markdown]
# ## 2. 查询、键、值都是矩阵乘法 (第 3.2.2 节)
# 一个 (3C, C) 的矩阵装着所有头的 W^Q、W^K、W^V。把 Q 的 C 列分成 h 个宽 d_k = C/h 的头,
# 每个头就有了自己的子空间。

# %%
layer = model.encoder.layers[0]
attn = layer.self_attn
w_q, w_k, w_v = attn.in_proj.weight.split(cfg.d_model)  # 各为 (C, C)
b_q, b_k, b_v = attn.in_proj.bias.split(cfg.d_model)
q, k, v = x @ w_q.T + b_q, x @ w_k.T + b_k, x @ w_v.T + b_v  # (1, S, C)


def heads(t):  # (1, S, C) -> (1, H, S, d_k)
    return t.view(1, -1, cfg.n_heads, cfg.d_head).transpose(1, 2)


q, k, v = heads(q), heads(k), heads(v)
print("Q, K, V per head:", tuple(q.shape))

# %% [markdown]
# ## 3. 打分、缩放、softmax、加权求和 (公式 1)
# Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V。

# %%
scores = q @ k.transpose(-2, -1)  # (1, H, S, S)
scaled = scores / math.sqrt(cfg.d_head)
mask = padding_mask(src, cfg.pad_id)  # (1, 1, 1, S): True = 可以关注
weights = scaled.masked_fill(~mask, float("-inf")).softmax(-1)
print("scores of head 0, first query:", scores[0, 0, 0], "\n  / sqrt(d_k):", scaled[0, 0, 0],
      "\n  softmax:", weights[0, 0, 0], " (sums to", float(weights[0, 0, 0].sum()), ")")
per_head = weights @ v  # (1, H, S, d_k)

# %% [markdown]
# ## 4. 拼接各个头, 再乘 W^O

# %%
concat = per_head.transpose(1, 2).reshape(1, -1, cfg.d_model)  # (1, S, C)
out = concat @ attn.out_proj.weight.T + attn.out_proj.bias
with record_attention(model) as rec:
    library_out, _ = attn(x, mask=mask)
check("multi-head attention", out, library_out)
check("attention weights", weights, rec["encoder.layers.0.self_attn"][0])

# %% [markdown]
# ## 5. 残差、LayerNorm、前馈网络 (第 3.1、3.3 节)
# 论文的层是后归一化 (post-norm): x = LayerNorm(x + Sublayer(x)); FFN(x) = max(0, x W1 + b1) W2 + b2。

# %%
h = layer.norm1(x + out)
ffn = F.relu(h @ layer.ff.fc1.weight.T + layer.ff.fc1.bias) @ layer.ff.fc2.weight.T + layer.ff.fc2.bias
check("one encoder layer", layer.norm2(h + ffn), layer(x, mask))

# %% [markdown]
# ## 6. 掩码 (第 3.2.3 节)
# 填充掩码: 任何查询都不能看填充的位置。因果掩码: 解码器第 i 个位置只能看 <= i 的位置,
# 所以后面的词永远改变不了前面的输出。

# %%
batch = torch.tensor([[5, 6, 7, 2], [5, 6, 2, 0]])  # 第二句用编号 0 填充
print("padding mask (True = may attend):\n", padding_mask(batch, 0)[:, 0, 0].int())
print("causal mask:\n", causal_mask(4).int())
with record_attention(model) as rec:
    model(src, tgt_in)
decoder_weights = rec["decoder.layers.0.self_attn"][0][0]  # (H, T, T)
assert (decoder_weights.triu(1) == 0).all()
print("decoder self-attention above the diagonal: all zero")
changed = tgt_in.clone()
changed[0, -1] = 7  # 改动解码器的最后一个输入
with torch.no_grad():
    before, after = model(src, tgt_in), model(src, changed)
assert torch.allclose(before[:, :-1], after[:, :-1])
print("changing the last token changed no earlier output")

# %% [markdown]
# ## 7. 解码器的输出: 线性层, 然后 softmax (第 3.4 节)

# %%
with torch.no_grad():
    memory = model.encode(src)
    logits = model.decode(tgt_in, memory, src)  # (1, T, V)
probs = logits.softmax(-1)
print("most likely next tokens:", repr(tgt_tok.decode(probs.argmax(-1)[0].tolist())))
cross = rec["decoder.layers.0.cross_attn"][0][0].mean(0)  # (T, S), 各个头取平均
print("encoder-decoder attention (mean of heads), rows = outputs:\n", cross)
print("greedy translation:", repr(tgt_tok.decode(greedy(model, src)[0].tolist())))

# %% [markdown]
# ## 8. 几种打分函数的比较
# 同一个查询和同一组键, 用四种方式打分: 加性 (Bahdanau 等)、点积 (Luong 等)、缩放点积 (本文)
# 和双线性 ("general")。软注意力按 softmax 权重对值取加权平均; 硬注意力只取得分最高的那一个。

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
# ## 9. 为什么要除以 sqrt(d_k)
# 若 q 和 k 的各分量独立、方差为 1, 则 q . k 的方差是 d_k (第 3.2.1 节脚注 4): d_k 越大, 未缩放的分数
# 越分散, softmax 几乎把全部权重放在一个键上, 梯度也随之消失。除以 sqrt(d_k) 让方差回到 1。

# %%
for d_k in (4, 16, 64, 256, 1024):
    qs, ks = torch.randn(2000, d_k, generator=g), torch.randn(2000, 10, d_k, generator=g)
    raw = torch.einsum("nd,nkd->nk", qs, ks)
    top_raw = raw.softmax(-1).max(-1).values.mean()
    top_scaled = (raw / math.sqrt(d_k)).softmax(-1).max(-1).values.mean()
    print(f"d_k={d_k:5d}: variance of q.k {float(raw.var()):8.1f}; mean largest softmax weight over 10 keys: "
          f"unscaled {float(top_raw):.2f}, scaled {float(top_scaled):.2f}")
    if d_k >= 256:
        assert top_raw > 0.9 > top_scaled  # 未缩放: 饱和; 缩放后: 仍然分散
print("done: every step above matched the library")
