"""Transformer-XL (aiayn.models.transfo_xl): the recurrence against one pass over the whole text, causality across
segments, the masks against transformers 4's formula, the adaptive embedding and softmax against plain ones and by
their own normalisation, the WikiText-103 count, and the conversion both ways. (Parity with transformers 4.46.3's
TransfoXLLMHeadModel, which transformers 5 dropped: benchmarks/transfo_xl_parity.py and its results file.)"""

import pytest
import torch
import torch.nn.functional as F

import aiayn
from aiayn.layers.adaptive import AdaptiveEmbedding, AdaptiveLogSoftmax
from aiayn.models.transfo_xl import TransfoXL, TransfoXLConfig
from aiayn.models.transfo_xl.counts import count
from aiayn.models.transfo_xl.hf import convert, export

SMALL = {"vocab_size": 53, "d_model": 24, "n_heads": 3, "n_layers": 2, "d_ff": 40, "cutoffs": (10, 30), "div_val": 2,
         "mem_len": 6, "clamp_len": None, "same_length": False, "dropout": 0.0}


def small(**kw):
    torch.manual_seed(0)
    return TransfoXL(TransfoXLConfig(**{**SMALL, **kw})).eval()


def test_segments_read_through_the_memory_as_one_pass_over_the_text():
    """With a memory at least as long as the text before, each segment's log-probabilities are those of one causal
    pass over the whole text: the recurrence and the relative positions see exactly what one pass sees."""
    model = small()
    ids = torch.randint(0, 53, (2, 13))
    with torch.no_grad():
        whole = model(ids)
        memory = model.new_memory(mem_len=13)
        parts = [model(ids[:, a:b], memory) for a, b in ((0, 5), (5, 9), (9, 13))]
    torch.testing.assert_close(torch.cat(parts, 1), whole, atol=1e-5, rtol=1e-5)
    assert memory.length == 13 and memory[0].shape == (2, 13, 24) and not memory[0].requires_grad


def test_the_memory_keeps_the_last_mem_len_states_and_no_gradient():
    model = small().train()  # dropout 0: the states are the evaluation's
    memory = model.new_memory()  # mem_len 6
    ids = torch.randint(0, 53, (2, 9))
    model(ids[:, :4], memory)
    model(ids[:, 4:], memory)
    assert memory.length == 6  # 4 + 5 positions, the last 6 kept
    with torch.no_grad():  # the first layer's memory is its input: the embedded last 6 tokens
        torch.testing.assert_close(memory[0], model.embed(ids)[:, -6:])
    assert not any(m.requires_grad for m in memory)


def test_a_future_token_never_changes_an_earlier_output_across_segments():
    model = small()
    ids = torch.randint(0, 53, (1, 10))
    changed = ids.clone()
    changed[0, 8] = (ids[0, 8] + 1) % 53
    with torch.no_grad():
        outs = []
        for x in (ids, changed):
            memory = model.new_memory()
            outs.append(torch.cat([model(x[:, :5], memory), model(x[:, 5:], memory)], 1))
    torch.testing.assert_close(outs[0][:, :8], outs[1][:, :8])
    assert (outs[0][:, 8:] - outs[1][:, 8:]).abs().max() > 1e-4


@pytest.mark.parametrize("same_length", [False, True])
@pytest.mark.parametrize("t, m, mem_len", [(4, 0, 6), (4, 6, 6), (3, 2, 4), (5, 5, 3)])
def test_the_mask_is_transformers_triu_and_tril(same_length, t, m, mem_len):
    """transformers 4's TransfoXLModel masks ``triu(ones, 1 + mlen)`` and, with same_length,
    ``tril(ones, -shift)``, shift = qlen - (klen - mem_len) when klen > mem_len, else qlen (1 = masked)."""
    model = small(same_length=same_length, mem_len=mem_len)
    ones = torch.ones(t, m + t, dtype=torch.bool)
    masked = torch.triu(ones, 1 + m)
    if same_length:
        over = m + t - mem_len
        masked = masked | torch.tril(ones, -(t - over if over > 0 else t))
    assert torch.equal(model.attention_mask(t, m, torch.device("cpu")), ~masked)


def test_one_cluster_is_a_plain_embedding_and_softmax():
    torch.manual_seed(0)
    emb = AdaptiveEmbedding(30, 8, 8)
    soft = AdaptiveLogSoftmax(30, 8, 8, embedding=emb)
    ids = torch.randint(0, 30, (2, 5))
    torch.testing.assert_close(emb(ids), F.embedding(ids, emb.emb_layers[0].weight) * 8**0.5)
    h = torch.randn(2, 5, 8)
    torch.testing.assert_close(soft(h), F.log_softmax(h @ emb.emb_layers[0].weight.T + soft.out_layers[0].bias, -1))


@pytest.mark.parametrize("div_val, d_embed", [(1, 8), (1, 6), (2, 8), (4, 16)])
def test_the_adaptive_softmax_is_a_distribution_and_its_clusters_add_up(div_val, d_embed):
    """Every row sums to 1; a word of a tail cluster has log p(cluster) + log p(word | cluster) (Grave et al.)."""
    torch.manual_seed(0)
    emb = AdaptiveEmbedding(40, d_embed, 8, (10, 25), div_val)
    soft = AdaptiveLogSoftmax(40, d_embed, 8, (10, 25), div_val, embedding=emb, tie_projs=(False, True, True))
    with torch.no_grad():
        soft.cluster_weight.normal_()
    h = torch.randn(3, 8)
    logp = soft(h)
    torch.testing.assert_close(logp.logsumexp(-1), torch.zeros(3), atol=1e-5, rtol=0)
    cluster_mass = logp[:, 10:25].logsumexp(-1)  # p(cluster 1) = the head's entry for it
    head = soft._logits(h, 0, torch.cat([soft._cluster(0)[0], soft.cluster_weight]),
                        torch.cat([soft._cluster(0)[1], soft.cluster_bias])).log_softmax(-1)
    torch.testing.assert_close(cluster_mass, head[:, 10], atol=1e-5, rtol=1e-5)
    assert soft.out_layers[0].weight is emb.emb_layers[0].weight  # tied tables
    if len(soft.out_projs) > 1:
        assert soft.out_projs[1] is emb.emb_projs[1 if div_val != 1 else 0]  # shared all but the first


def test_the_wikitext_103_model_has_transformers_285_205_322_parameters():
    """The count transformers 4.46.3's TransfoXLLMHeadModel(TransfoXLConfig()) gives (tied weights once)."""
    cfg = aiayn.preset("transfo-xl-wt103")
    with torch.device("meta"):
        model = aiayn.build(cfg)
    assert isinstance(model, TransfoXL)
    assert sum(p.numel() for p in model.parameters()) == 285_205_322 == count(cfg, 128).total_parameters


@pytest.mark.parametrize("kw", [{}, {"div_val": 1, "d_embed": 16, "tie_projs": False}, {"cutoffs": (), "div_val": 1},
                                {"norm_first": True, "same_length": True, "clamp_len": 3}])
def test_the_closed_form_count_is_the_models_and_conversion_goes_both_ways(kw):
    model = small(**kw)
    assert sum(p.numel() for p in model.parameters()) == count(model.cfg, 7).total_parameters
    hf, tensors = export(model)
    back = convert(hf, {k: v.clone() for k, v in tensors.items()})
    assert back.cfg == model.cfg
    ids = torch.randint(0, 53, (2, 7))
    with torch.no_grad():
        torch.testing.assert_close(back(ids, back.new_memory()), model(ids, model.new_memory()))


def test_the_keyword_call_gives_the_mean_next_token_loss_and_the_memory():
    model = small()
    ids = torch.randint(0, 53, (2, 6))
    with torch.no_grad():
        out = model(input_ids=ids, labels=ids)
        nll = -model(ids)[:, :-1].gather(-1, ids[:, 1:, None])  # (B, T - 1, 1): each next token's
        more = model(input_ids=ids, mems=out.past_key_values)
    torch.testing.assert_close(out.loss, nll.mean())
    assert out.past_key_values.length == 6 and more.past_key_values.length == 6  # mem_len 6


def test_generate_over_the_memory_continues_as_a_pass_over_the_whole_text():
    """Greedy decoding through the session (the prompt one segment, each token the next) picks what the argmax of
    one pass over everything so far picks; beam search of one beam is greedy decoding."""
    model = small(mem_len=64, eos_id=None)
    ids = torch.randint(0, 53, (2, 5))
    out = model.generate(ids, max_new_tokens=8, do_sample=False)
    x = ids
    with torch.no_grad():
        for _ in range(8):
            x = torch.cat([x, model(x)[:, -1].argmax(-1, keepdim=True)], 1)
    assert torch.equal(out, x)
    assert torch.equal(model.generate(ids, max_new_tokens=8, num_beams=1, do_sample=False), out)
    assert model.generate(ids, max_new_tokens=4, num_beams=3).shape == (2, 9)


def test_the_session_refuses_what_it_does_not_do():
    model = small()
    with pytest.raises(ValueError, match="compile=True"):
        model.session(compile=True)
    with pytest.raises(ValueError, match="use_cache=False"):
        model.session(use_cache=False)
    with pytest.raises(ValueError, match="unpadded prompts"):
        model.generate(torch.ones(2, 3, dtype=torch.long), attention_mask=torch.tensor([[0, 1, 1], [1, 1, 1]]))


def test_training_over_streams_carries_the_memory_and_learns_what_only_it_holds():
    """Every block of 8 random tokens is followed by the same 8: the copy is predictable only from the block before,
    which a segment of 8 reads through its memory alone. Trained over ordered streams (aiayn.data.lm_streams) with
    the memory carried from batch to batch, the copies' loss falls far below chance (log 20 = 3.0); with no memory
    it stays at chance."""
    from aiayn.data import lm_streams

    def copy_loss(mem_len):
        torch.manual_seed(0)
        chunks = torch.randint(0, 20, (400, 8), generator=torch.Generator().manual_seed(1))
        tokens = torch.cat([chunks, chunks], 1).flatten()
        tokens = torch.cat([tokens, tokens[:1]])  # 4 streams of 1,600: each starts on a block and its copy
        model = TransfoXL(TransfoXLConfig(vocab_size=20, d_model=32, n_heads=4, n_layers=2, d_ff=64, cutoffs=(),
                                          div_val=1, mem_len=mem_len, clamp_len=None, same_length=False,
                                          dropout=0.0, eos_id=None))
        opt = torch.optim.Adam(model.parameters(), lr=3e-3)
        memory, streams = model.new_memory(), lm_streams(tokens, block=8, batch_size=4)
        for _ in range(800):
            x, y = next(streams)
            loss = F.nll_loss(model(x, memory).flatten(0, 1), y.flatten())
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.eval()
        memory, copies = model.new_memory(), []
        with torch.no_grad():
            for k in range(20):
                x, y = next(streams)
                log_probs = model(x, memory)
                if k % 2 == 1:  # a copy block (800 blocks read: the streams are at a block again)
                    copies.append(F.nll_loss(log_probs[:, :-1].flatten(0, 1), y[:, :-1].flatten()).item())
        return sum(copies) / len(copies)

    assert copy_loss(8) < 1.5 < 2.5 < copy_loss(0)
