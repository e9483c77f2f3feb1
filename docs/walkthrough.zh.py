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
# 几种打分函数放在一起比较, 并说明为什么除以 sqrt(d_k) 能让 softmax 不至于饱和。随后指出教程的几处说法与本包的
# 差别 (标签平滑的 KL 与交叉熵、0/1 乘法掩码、解码器各层自己投影 K 和 V、注意力 dropout), 最后把 GPT-2
# 一步一步改成 Llama。
#
# 可以直接运行 (`python docs/walkthrough.zh.py`), 也可以用 jupytext 当作 notebook 打开。CI 会运行英文版;
# 测试保证两个版本的代码完全相同, 只有说明文字不同。English: `docs/walkthrough.py`.

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
    """我们手算的结果必须等于库中模块的结果。"""
    torch.testing.assert_close(ours, library, atol=atol, rtol=1e-4)
    print(f"  ok: {name} equals the library's result {tuple(ours.shape)}")


# %% [markdown]
# ## 0. 一个训练好的模型
# 在复制任务上更新两百次: 模型学会把输入原样写出, 所以它的编码器-解码器注意力应当沿对角线分布。
# (下面的检查对任何权重都成立, 无论是否训练过: 测试用更少的更新次数运行本文件, 见 `AIAYN_WALKTHROUGH_STEPS`。)

# %%
updates = int(os.environ.get("AIAYN_WALKTHROUGH_STEPS", "200"))
run = recipes.train("copy", steps=updates, n_train=5000, n_test=50, out=tempfile.mkdtemp(), progress=False,
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
check("one encoder layer", layer.norm2(h + ffn), layer(x, mask=mask))

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

# %% [markdown]
# ## 10. 教程说法与本包不同之处
# **标签平滑: KL 散度还是交叉熵。** 有的教程把平滑后的损失写成平滑目标 q 到模型分布 p 的 KL 散度
# KL(q || p); 我们 (与 fairseq、tensor2tensor 一样) 用交叉熵 H(q, p)。两者相差 H(q), 即目标分布自身的熵,
# 与模型无关: 梯度完全相同, 交叉熵每个词元高出 H(q)。

# %%
from aiayn.training.losses import label_smoothed_loss, smoothing_entropy  # noqa: E402

eps, vocab = 0.1, cfg.tgt_vocab_size
with torch.enable_grad():
    z = model(src, tgt_in).detach().requires_grad_(True)  # (1, T, V)
    q = torch.full_like(z, eps / (vocab - 2))  # eps 均分给目标和填充以外的每个词元
    q[..., cfg.pad_id] = 0.0
    q.scatter_(-1, tgt_out[..., None], 1.0 - eps)
    ce, _, n = label_smoothed_loss(z, tgt_out, cfg.pad_id, eps)
    kl = F.kl_div(z.log_softmax(-1), q, reduction="sum")
    (grad_ce,), (grad_kl,) = torch.autograd.grad(ce, z), torch.autograd.grad(kl, z)
print(f"cross-entropy {float(ce) / n:.4f}, KL {float(kl) / n:.4f} per token; the difference "
      f"{float(ce - kl) / n:.4f} = H(q) = {smoothing_entropy(vocab, eps):.4f}")
check("the gradients of cross-entropy and KL", grad_ce, grad_kl)

# %% [markdown]
# **用 0/1 相乘来做掩码。** 掩码必须让权重恰好为零。把*分数*乘以 0, 分数变成 0, softmax 仍给 exp(0) 一份
# 权重: 未来的信息照样漏进来。softmax 之后再把*权重*乘以 0, 虽去掉了它, 但每行之和不再是 1。把分数设为
# -inf (我们的做法, 与 PyTorch 的 `scaled_dot_product_attention` 相同), exp(-inf) = 0, 每行之和仍为 1。

# %%
s4 = torch.tensor([[2.0, -1.0, 0.5, 1.0]] * 4)  # 四个查询, 四个键
look_ahead = causal_mask(4)  # (4, 4), True = 可以注意
times_mask = (s4 * look_ahead).softmax(-1)
after = s4.softmax(-1) * look_ahead
ours = s4.masked_fill(~look_ahead, float("-inf")).softmax(-1)
print("scores x mask, then softmax: weight on the future", times_mask[0, 1:].sum().item(), "(should be 0)")
print("softmax, then x mask: rows sum to", after.sum(-1).tolist())
print("-inf, then softmax: future weight", ours.triu(1).abs().sum().item(), ", rows sum to", ours.sum(-1).tolist())
assert times_mask[0, 1:].sum() > 0.2 and (ours.triu(1) == 0).all()

# %% [markdown]
# **"编码器把 K 和 V 交给解码器"。** 编码器交出的是它的输出 memory (B, S, C), 只交一次。每个解码器层用
# 自己的 W^K 和 W^V 从中算出自己的键和值 (解码时 KV 缓存按层保存的正是这些), 所以没有两层注意的是同一组键。

# %%
k0, _ = model.decoder.layers[0].cross_attn.project_kv(memory)  # (1, H, S, d_k)
k1, _ = model.decoder.layers[1].cross_attn.project_kv(memory)
print("memory", tuple(memory.shape), "-> layer 0 keys", tuple(k0.shape), "; layer 1's differ from layer 0's:",
      not torch.allclose(k0, k1))
assert not torch.allclose(k0, k1)

# %% [markdown]
# **注意力权重上的 dropout。** 论文只对子层输出和嵌入之和做 dropout (第 5.4 节), 从未提到注意力权重;
# 教程引用的 d2l 代码对注意力权重也做了 dropout。本包遵循论文: `attention_dropout` 默认为 0
# (tensor2tensor 后来的 `transformer_base` 用 0.1)。

# %%
print("attention_dropout =", cfg.attention_dropout, "; dropout (sub-layers, embeddings) =", cfg.dropout)

# %% [markdown]
# ## 11. 从 GPT-2 到 Llama, 一次一处改动
# Llama 的块就是 GPT-2 的前置归一化解码器块加上五处改动, 每处都是同一组层上的一个开关
# (`aiayn.models.gpt`)。我们在一个小 GPT-2 上依次打开它们, 并检查每一处做了什么。

# %%
from aiayn import build, count_parameters  # noqa: E402
from aiayn.layers.positional import RotaryEmbedding, apply_rotary  # noqa: E402
from aiayn.models.gpt import GPTConfig  # noqa: E402

steps = {"GPT-2": {}, "+ RoPE": {"positional": "rope"}, "+ RMSNorm": {"norm": "rmsnorm"},
         "+ SwiGLU": {"activation": "swiglu", "d_ff": 344}, "+ grouped kv heads": {"n_kv_heads": 2},
         "+ no biases": {"bias": False}}
switches = {"vocab_size": 100, "max_len": 64, "eos_id": 2, "d_model": 128, "n_heads": 4, "n_layers": 2,
            "d_ff": 512, "dropout": 0.0, "attention_dropout": 0.0}  # 一个小 GPT-2
for name, change in steps.items():
    switches.update(change)
    gpt = build(GPTConfig(**switches)).eval()
    gpt_cfg = gpt.cfg
    kv_per_token = 2 * gpt_cfg.n_layers * gpt_cfg.kv_heads * (gpt_cfg.d_model // gpt_cfg.n_heads) * 4
    print(f"{name:20s} {count_parameters(gpt):>8,} parameters, KV cache {kv_per_token:,} bytes per token")

# %% [markdown]
# **RoPE** 按位置成比例的角度旋转 q 和 k, 因此它们的点积只取决于两者相距多远: 同一对向量在位置 (3, 1)
# 和 (40, 38) 上得分相同。

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
# **RMSNorm** 去掉了 LayerNorm 的均值和偏置: x / sqrt(mean(x^2) + eps) * w。**SwiGLU** 给隐藏层加门控:
# down(silu(gate(x)) * up(x)), 三个矩阵, 所以 d_ff 缩到约 2/3 以保持参数量。**分组 kv 头** 让 4 个查询头
# 共用 2 个键/值头: 每个词元的缓存减半。

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
