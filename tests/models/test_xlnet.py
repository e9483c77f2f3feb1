"""XLNet (aiayn.models.xlnet) against transformers 5's XLNetModel, XLNetLMHeadModel and
XLNetForSequenceClassification built from random configs of odd sizes (no download): padded batches, perm_mask,
target_mapping, token_type_ids, mems over two segments, both attention types; the conversion both ways; the
published counts; and the two streams' defining property, checked without transformers: the query stream never
sees the token it predicts."""

import pytest
import torch

import aiayn
from aiayn.models.xlnet import XLNet, XLNetConfig
from aiayn.models.xlnet.counts import count

transformers = pytest.importorskip("transformers")

V = 97


def hf_model(cls="XLNetLMHeadModel", seed=0, **kw):
    torch.manual_seed(seed)
    config = transformers.XLNetConfig(vocab_size=V, d_model=40, n_layer=3, n_head=5, d_inner=56, mem_len=7,
                                      dropout=0.0, **kw)
    model = getattr(transformers, cls)(config).eval()
    with torch.no_grad():  # every weight away from its initial value (biases are zero, gains one, otherwise)
        for p in model.parameters():
            p.normal_(0, 0.3)
    return model


def inputs(b=3, t=9, k=4, seed=1):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, V, (b, t), generator=g)
    attention_mask = torch.ones(b, t)
    if b > 1:
        attention_mask[1, :2] = 0  # left padding on a row
    attention_mask[0, -1] = 0  # and right padding on another
    perm = (torch.rand(b, t, t, generator=g) < 0.4).float()
    # every query sees a real token (the first of rows 0 and 2, the third of row 1), as a causal one may: no row
    # with nothing to attend to, which transformers averages over every key and aiayn leaves at zero
    perm[:, :, 0] = perm[:, :, 2] = 0
    target_mapping = torch.zeros(b, k, t)
    for i in range(k):
        target_mapping[:, i, (2 * i + 1) % t] = 1
    token_types = torch.randint(0, 2, (b, t), generator=g)
    return {"input_ids": ids, "attention_mask": attention_mask, "perm_mask": perm, "target_mapping": target_mapping,
            "token_type_ids": token_types}


def assert_mems(theirs, memory):
    assert len(theirs) == len(memory)
    for a, m in zip(theirs, memory):
        torch.testing.assert_close(m, a.transpose(0, 1), atol=1e-4, rtol=1e-4)  # theirs (M, B, C), ours (B, M, C)


@pytest.mark.parametrize("kw", [{}, {"attn_type": "uni"}, {"attn_type": "uni", "same_length": True},
                                {"clamp_len": 3}, {"reuse_len": 5}])
def test_the_lm_head_matches_transformers_over_two_segments_with_every_input(kw):
    hf = hf_model(**kw)
    ours = aiayn.from_hf(hf)
    assert isinstance(ours, XLNet) and ours.cfg.head == "lm"
    # transformers 5.25 adds a batch's data mask in place to the causal one of attn_type="uni", which fails for
    # more than one row (a broadcast into a (T, S, 1, 1) tensor): "uni" is compared on one row
    rows = 1 if kw.get("attn_type") == "uni" else 3
    first, second = inputs(b=rows), inputs(b=rows, t=6, k=2, seed=2)
    if kw.get("same_length"):  # a first segment's query then sees itself alone: let it, or it sees nothing
        first["perm_mask"].diagonal(dim1=1, dim2=2).zero_()
    with torch.no_grad():
        a = hf(**first, use_mems=True)
        memory = ours.new_memory()
        b = ours(**first, mems=memory)
        torch.testing.assert_close(b.logits, a.logits, atol=1e-4, rtol=1e-4)  # (B, K, V): the query stream
        assert_mems(a.mems, memory)
        a2 = hf(**second, mems=a.mems, use_mems=True)
        b2 = ours(**second, mems=memory)
    torch.testing.assert_close(b2.logits, a2.logits, atol=1e-4, rtol=1e-4)
    assert_mems(a2.mems, memory)


def test_the_content_stream_and_the_loss_match_without_targets():
    hf = hf_model()
    ours = aiayn.from_hf(hf)
    x = inputs()
    del x["target_mapping"]
    labels = torch.randint(0, V, x["input_ids"].shape)
    labels[0, :2] = -100
    with torch.no_grad():
        a, b = hf(**x, labels=labels), ours(**x, labels=labels)
    torch.testing.assert_close(b.logits, a.logits, atol=1e-4, rtol=1e-4)  # (B, T, V)
    torch.testing.assert_close(b.loss, a.loss, atol=1e-5, rtol=1e-5)


def test_the_bare_model_and_the_classifier_match_their_classes():
    x = inputs()
    del x["perm_mask"], x["target_mapping"]
    hf = hf_model("XLNetModel")
    ours = aiayn.from_hf(hf)
    assert ours.cfg.head == "none"
    with torch.no_grad():
        torch.testing.assert_close(ours(**x).last_hidden_state, hf(**x).last_hidden_state, atol=1e-4, rtol=1e-4)
    hf = hf_model("XLNetForSequenceClassification", num_labels=3)
    ours = aiayn.from_hf(hf)
    # transformers classifies the last position whatever the mask (XLNet's tokenizer pads on the left); ours reads
    # each row's last real token, the same where no row is padded on the right
    x["attention_mask"][0, -1] = 1
    assert ours.cfg.head == "classification" and ours.cfg.num_labels == 3
    labels = torch.tensor([0, 2, 1])
    with torch.no_grad():
        a, b = hf(**x, labels=labels), ours(**x, labels=labels)
    torch.testing.assert_close(b.logits, a.logits, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(b.loss, a.loss, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("head", ["none", "lm", "classification"])
def test_export_gives_the_class_of_each_head_computing_the_same(head, tmp_path):
    torch.manual_seed(3)
    labels = {"num_labels": 3} if head == "classification" else {}
    ours = XLNet(XLNetConfig(vocab_size=V, d_model=24, n_heads=3, n_layers=2, d_ff=40, head=head, mem_len=5,
                             clamp_len=4, dropout=0.0, **labels)).eval()
    aiayn.to_hf(ours, tmp_path)
    hf = transformers.AutoConfig.from_pretrained(tmp_path)
    cls = getattr(transformers, hf.architectures[0])
    theirs = cls.from_pretrained(tmp_path).eval()
    x = inputs()
    del x["target_mapping"]
    if head == "classification":  # padded on the left only, as above
        del x["perm_mask"]
        x["attention_mask"][0, -1] = 1
    with torch.no_grad():
        a, b = theirs(**x), ours(**x)
    key = "last_hidden_state" if head == "none" else "logits"
    torch.testing.assert_close(b[key], a[key], atol=1e-4, rtol=1e-4)
    back = aiayn.from_hf(theirs)
    assert back.cfg == ours.cfg
    for (k, w), (k2, w2) in zip(ours.state_dict().items(), back.state_dict().items()):
        assert k == k2 and torch.equal(w, w2), k


def test_the_query_stream_never_sees_the_token_it_predicts():
    """The two streams' point (section 2.3): the prediction at position i depends on i's position and on the
    tokens before it in the factorisation order, never on the token at i (nor on any after it), while the content
    stream at i does read that token."""
    torch.manual_seed(0)
    model = XLNet(XLNetConfig(vocab_size=V, d_model=24, n_heads=3, n_layers=2, d_ff=40, dropout=0.0)).eval()
    t = 8
    order = torch.randperm(t)  # the factorisation order z
    rank = torch.empty(t, dtype=torch.long)
    rank[order] = torch.arange(t)
    perm = (rank[None, :] >= rank[:, None]).float()[None]  # i may not see j where j comes at or after i in z
    target = int(order[5])
    mapping = torch.zeros(1, 1, t)
    mapping[0, 0, target] = 1
    ids = torch.randint(0, V, (1, t))
    later = ids.clone()
    for j in order[5:].tolist():  # the target's token and every one after it in z
        later[0, j] = (ids[0, j] + 1 + j) % V
    earlier = ids.clone()
    earlier[0, int(order[0])] = (ids[0, int(order[0])] + 1) % V
    with torch.no_grad():
        run = lambda x, **kw: model(x, perm_mask=perm, **kw)  # noqa: E731
        query = [run(x, target_mapping=mapping) for x in (ids, later, earlier)]
        content = [run(x) for x in (ids, later)]
    torch.testing.assert_close(query[1], query[0])  # its own token and later ones: unseen
    assert not torch.allclose(query[2], query[0])  # an earlier token in z: seen
    assert not torch.allclose(content[1][0, target], content[0][0, target])  # the content stream reads itself


def test_a_classifier_reads_each_row_s_last_real_token_whichever_side_it_is_padded():
    torch.manual_seed(0)
    model = XLNet(XLNetConfig(vocab_size=V, d_model=24, n_heads=3, n_layers=2, d_ff=40, head="classification",
                              num_labels=3, dropout=0.0)).eval()
    short, long = torch.randint(7, V, (1, 5)), torch.randint(7, V, (1, 8))
    with torch.no_grad():
        alone = [model(input_ids=x).logits for x in (short, long)]
        for side in ("right", "left"):
            pad = torch.full((1, 3), 5)
            ids = torch.cat([torch.cat([short, pad], 1) if side == "right" else torch.cat([pad, short], 1), long])
            mask = (torch.arange(8) < 5 if side == "right" else torch.arange(8) >= 3).long()
            mask = torch.stack([mask, torch.ones(8, dtype=torch.long)])
            batch = model(input_ids=ids, attention_mask=mask).logits
            torch.testing.assert_close(batch, torch.cat(alone), atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="target_mapping"):
        model(input_ids=long, target_mapping=torch.ones(1, 1, 8))


def test_the_published_counts_of_xlnet_model():
    """XLNetModel's parameters for the two released sizes (computed from transformers' own class)."""
    for name, n in (("xlnet-base-cased", 116_718_336), ("xlnet-large-cased", 360_268_800)):
        cfg = aiayn.preset(name, head="none")
        with torch.device("meta"):
            model = XLNet(cfg)
        assert sum(p.numel() for p in model.parameters()) == n, name
        assert count(cfg, 512).total_parameters == n


def test_bad_inputs_are_refused_by_name():
    model = XLNet(XLNetConfig(vocab_size=V, d_model=24, n_heads=3, n_layers=1, d_ff=40))
    ids = torch.randint(0, V, (2, 5))
    with pytest.raises(ValueError, match="perm_mask must have shape"):
        model(ids, perm_mask=torch.zeros(2, 5, 4))
    with pytest.raises(ValueError, match="target_mapping must have shape"):
        model(ids, target_mapping=torch.zeros(2, 1, 4))
    with pytest.raises(ValueError, match="head='lm'"):
        XLNet(XLNetConfig(vocab_size=V, d_model=24, n_heads=3, n_layers=1, d_ff=40, head="none")).logits(
            torch.zeros(1, 1, 24))
    with pytest.raises(ValueError, match="attn_type"):
        XLNetConfig(attn_type="both")
    block = model.layers[0]
    with pytest.raises(ValueError, match="context= holds every key"):
        block(torch.zeros(2, 5, 24), context=torch.zeros(2, 7, 24), mems=torch.zeros(2, 2, 24))
    with pytest.raises(ValueError, match="bi_data"):
        aiayn.from_hf(hf_model(bi_data=True))
