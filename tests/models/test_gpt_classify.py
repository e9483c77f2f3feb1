"""GPT's classification head (Radford et al. 2018, Figure 1): the last real token's state into a linear layer.

Checked against a property (a batch padded on either side gives each text's logits alone) and against Hugging
Face's ``GPT2ForSequenceClassification`` built from a small random config, both ways through the conversion."""

import pytest
import torch

import aiayn

PAD = 0


def tiny(**kw):
    torch.manual_seed(0)
    return aiayn.build("gpt-tiny", vocab_size=50, d_model=32, n_heads=4, n_layers=2, d_ff=64, head="classification",
                       num_labels=3, pad_id=PAD, **kw).eval()


def texts(n=4, seed=1):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(1, 50, (int(length),), generator=gen).tolist() for length in torch.randint(2, 9, (n,),
                                                                                                     generator=gen)]


def padded(rows, left):
    width = max(map(len, rows))
    fill = [[PAD] * (width - len(r)) for r in rows]
    ids = torch.tensor([f + r if left else r + f for f, r in zip(fill, rows)])
    return ids, ids != PAD


def logits(model, ids, mask=None):
    with torch.no_grad():
        return model.classify(model.features(ids, attention_mask=mask), mask)


@pytest.mark.parametrize("left", [False, True], ids=["right-padded", "left-padded"])
def test_a_padded_batch_gives_each_texts_logits_alone(left):
    model, rows = tiny(), texts()
    alone = torch.cat([logits(model, torch.tensor([r])) for r in rows])  # (N, K), no padding at all
    ids, mask = padded(rows, left)
    assert mask.sum(-1).min() < mask.size(1)  # some rows are padded
    torch.testing.assert_close(logits(model, ids, mask), alone, atol=1e-5, rtol=1e-5)
    # the head reads the last real token: changing a real token changes a row, changing padding does not
    ids2 = ids.clone()
    ids2[~mask] = 7
    torch.testing.assert_close(logits(model, ids2, mask), alone, atol=1e-5, rtol=1e-5)


def test_the_head_is_additive_and_refusals_name_the_argument():
    plain, model = aiayn.build("gpt-tiny"), aiayn.build("gpt-tiny", head="classification", num_labels=5)
    size = [sum(p.numel() for p in m.parameters()) for m in (plain, model)]  # tied weights once
    assert size[1] - size[0] == 5 * 128 and model.score.bias is None  # score: one matrix
    ids = torch.randint(0, 256, (2, 6))
    assert model(ids).shape == (2, 6, 256) and plain.score is None  # forward stays next-token logits
    with pytest.raises(ValueError, match="build it with head='classification'"):
        plain.classify(plain.features(ids))
    with pytest.raises(ValueError, match=r"attention_mask must be \(batch, positions\)"):
        model.classify(model.features(ids), torch.ones(2, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="head="):
        aiayn.build("gpt-tiny", head="pooled")
    with pytest.raises(ValueError, match="pad_id=300"):
        aiayn.build("gpt-tiny", pad_id=300)


@pytest.mark.parity
@pytest.mark.parametrize("left", [False, True], ids=["right-padded", "left-padded"])
def test_matches_hugging_face_gpt2_for_sequence_classification(left):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    hf = transformers.GPT2ForSequenceClassification(transformers.GPT2Config(
        vocab_size=50, n_positions=32, n_embd=32, n_layer=2, n_head=4, num_labels=3, pad_token_id=PAD, bos_token_id=49,
        eos_token_id=49)).eval()
    ours = aiayn.from_hf(hf).eval()
    assert ours.cfg.head == "classification" and ours.cfg.num_labels == 3 and ours.cfg.pad_id == PAD
    ids, mask = padded(texts(), left)
    # Hugging Face reads the rightmost token that is not pad_token_id; right padding needs no positions fixed,
    # left padding gets them from the mask as generate() makes them
    extra = {"position_ids": (mask.long().cumsum(-1) - 1).clamp(min=0)} if left else {}
    with torch.no_grad():
        theirs = hf(ids, attention_mask=mask.long(), **extra).logits
    torch.testing.assert_close(logits(ours, ids, mask), theirs, atol=1e-4, rtol=1e-4)


@pytest.mark.parity
def test_export_round_trip_through_gpt2_for_sequence_classification(tmp_path):
    transformers = pytest.importorskip("transformers")
    model = tiny()
    folder = aiayn.to_hf(model, tmp_path / "hf")
    hf = transformers.AutoModelForSequenceClassification.from_pretrained(folder).eval()
    assert type(hf).__name__ == "GPT2ForSequenceClassification" and hf.config.pad_token_id == PAD
    ids, mask = padded(texts(), left=False)
    with torch.no_grad():
        theirs = hf(ids, attention_mask=mask.long()).logits
    torch.testing.assert_close(theirs, logits(model, ids, mask), atol=1e-4, rtol=1e-4)
    back = aiayn.from_hf(folder)
    assert back.cfg == model.cfg
    assert all(torch.equal(v, back.state_dict()[k]) for k, v in model.state_dict().items())
    untied = aiayn.build("gpt-tiny", head="classification", tie_output=False)
    with pytest.raises(ValueError, match="tie_output=False cannot be exported"):
        aiayn.to_hf(untied, tmp_path / "untied")
    llama = aiayn.build("llama-tiny", head="classification")
    with pytest.raises(ValueError, match="head='classification' cannot be exported"):
        aiayn.to_hf(llama, tmp_path / "llama")


# --- GPT-2's zero-shot task form: "TL;DR:" (Radford et al. 2019, section 3.6) ---------------------------------


@pytest.fixture(scope="module")
def gpt2_folder(tmp_path_factory):
    """A converted-GPT-2-shaped folder: a random GPT2LMHeadModel and a byte-level BPE tokenizer.json."""
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer, bpe.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
    lines = ["The cat sat on the mat. It was warm!", "A dog ran in the park; TL;DR: a dog ran.", "Is it? Yes."]
    bpe.train_from_iterator(lines * 20, trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"],
                                                            initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    folder = tmp_path_factory.mktemp("gpt2")
    torch.manual_seed(0)
    transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=bpe.get_vocab_size(), n_positions=128, n_embd=32, n_layer=2, n_head=4, bos_token_id=0,
        eos_token_id=0)).save_pretrained(folder)
    bpe.save(str(folder / "tokenizer.json"))
    return folder


def test_tldr_continues_the_prompt_drawing_from_the_two_most_likely_tokens(gpt2_folder):
    from aiayn.inference import TLDR, tldr

    p = aiayn.pipeline(gpt2_folder)
    tok, text = p.parts["tok"], "The cat sat on the mat. It was warm!"
    fed_ids, last_logits = [], []  # of every step: the sampler embeds the new ids once per new token
    hooks = [p.model.embed.register_forward_hook(lambda m, args, out: fed_ids.append(args[0][0])),
             p.model.lm_head.register_forward_hook(  # (B, V): the output layer reads the last position only
                 lambda m, args, out: last_logits.append(out[0] if out.dim() == 2 else out[0, -1]))]
    try:
        out = tldr(p, text, max_new_tokens=30, sentences=None, seed=0)
    finally:
        for hook in hooks:
            hook.remove()
    calls = list(zip(fed_ids, last_logits, strict=True))  # (input ids, logits of the last position)
    assert calls[0][0].tolist() == tok.encode(text + TLDR)  # the paper's prompt, then one token a call
    fed = [int(ids[0]) for ids, _ in calls[1:]]  # each drawn token is the next call's input
    ranks = [int((logits > logits[t]).sum()) for (_, logits), t in zip(calls, fed)]
    assert set(ranks) == {0, 1}  # always one of the 2 most likely, and not always the most likely
    # the output is the continuation alone: the drawn tokens decoded (the last one drawn is never fed back)
    assert len(fed) > 5 and out.startswith(tok.decode(fed).rstrip("\ufffd").strip())
    assert tldr(p, text, max_new_tokens=30, sentences=None, seed=0) == out  # one seed, one summary
    assert tldr(p, text, max_new_tokens=30, sentences=None, seed=1) != out


def test_tldr_keeps_the_first_sentences_and_refuses_what_cannot_summarise(gpt2_folder, monkeypatch):
    from aiayn.inference import Pipeline, tldr

    p = aiayn.pipeline(gpt2_folder)
    monkeypatch.setattr(Pipeline, "generate", lambda self, prompt, **kw: " One. Two! Three? Four. Five")
    assert tldr(p, "an article") == "One. Two! Three?"  # the paper keeps the first 3 sentences
    assert tldr(p, "an article", sentences=1) == "One."
    with pytest.raises(ValueError, match="text must be a non-empty string"):
        tldr(p, "  ")
    with pytest.raises(ValueError, match="top_k and sentences must be >= 1"):
        tldr(p, "an article", top_k=0)
