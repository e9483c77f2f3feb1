"""Models called as transformers users call them (aiayn.models.outputs): each family's keyword call against the
transformers class it converts from (random weights from a config, no download): the same logits, the same loss
for the same labels, the same hidden states; plus the call's properties (positional calls unchanged, the cache
continues a call, return_dict=False, refusals by name)."""

import pytest
import torch

import aiayn
from aiayn.models.outputs import ModelOutput

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.parity
close = {"atol": 1e-4, "rtol": 1e-4}


def pair(hf_model):
    torch.manual_seed(0)
    hf = hf_model.eval()
    return hf, aiayn.from_hf(hf).eval()


def gpt2(**kw):
    return transformers.GPT2Config(vocab_size=97, n_positions=32, n_embd=32, n_layer=2, n_head=4, pad_token_id=0,
                                   bos_token_id=1, eos_token_id=1,
                                   **kw)


def text_batch(vocab=97, b=3, t=9, pad=0, lengths=(9, 6, 4)):
    """Right-padded ids, their mask, and labels with -100 on the padding."""
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, vocab, (b, t), generator=g)
    mask = (torch.arange(t)[None] < torch.tensor(lengths)[:, None]).long()
    ids = ids.masked_fill(mask == 0, pad)
    return ids, mask, ids.masked_fill(mask == 0, -100)


@pytest.mark.parametrize("make", [
    lambda: transformers.GPT2LMHeadModel(gpt2()),
    lambda: transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=32, pad_token_id=0)),
], ids=["gpt2", "llama"])
def test_a_causal_lm_gives_transformers_loss_and_logits(make):
    hf, ours = pair(make())
    ids, mask, labels = text_batch()
    with torch.no_grad():
        want = hf(input_ids=ids, attention_mask=mask, labels=labels)
        got = ours(input_ids=ids, attention_mask=mask, labels=labels)
    real = mask.bool()
    torch.testing.assert_close(got.logits[real], want.logits[real], **close)  # padding's logits are unread
    torch.testing.assert_close(got.loss, want.loss, **close)
    assert got.last_hidden_state.shape == (*ids.shape, 32)
    assert torch.equal(ours(ids, mask), got.logits)  # the positional call: the paper's forward, a tensor


def test_the_cache_a_call_returns_continues_it():
    """Two calls over a cache give the one call's logits (positions and mask counted over both)."""
    _, ours = pair(transformers.GPT2LMHeadModel(gpt2()))
    ids, mask, _ = text_batch(lengths=(9, 9, 9))
    with torch.no_grad():
        whole = ours(input_ids=ids, attention_mask=mask).logits
        first = ours(input_ids=ids[:, :5], attention_mask=mask[:, :5], use_cache=True)
        second = ours(input_ids=ids[:, 5:], attention_mask=mask, past_key_values=first.past_key_values)
    torch.testing.assert_close(torch.cat([first.logits, second.logits], 1), whole, **close)
    assert second.past_key_values is first.past_key_values and second.past_key_values.length == 9


@pytest.mark.parametrize("num_labels, labels", [
    (3, torch.tensor([0, 2, 1])),                                   # single-label: cross-entropy
    (1, torch.tensor([0.5, -1.0, 2.0])),                            # regression: mean squared error
    (3, torch.tensor([[1.0, 0, 1], [0, 0, 1], [1, 1, 0]])),         # multi-label: binary cross-entropy
], ids=["single", "regression", "multi"])
def test_classifiers_choose_transformers_problem_type_from_the_labels(num_labels, labels):
    cfg = transformers.BertConfig(vocab_size=97, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=48, max_position_embeddings=32, num_labels=num_labels)
    hf, ours = pair(transformers.BertForSequenceClassification(cfg))
    ids, mask, _ = text_batch()
    with torch.no_grad():
        want, got = hf(input_ids=ids, attention_mask=mask, labels=labels), ours(input_ids=ids, attention_mask=mask,
                                                                                labels=labels)
    torch.testing.assert_close(got.logits, want.logits, **close)
    torch.testing.assert_close(got.loss, want.loss, **close)


def test_a_gpt_classifier_answers_as_gpt2_for_sequence_classification():
    hf, ours = pair(transformers.GPT2ForSequenceClassification(gpt2(num_labels=3)))
    ids, mask, _ = text_batch()
    labels = torch.tensor([2, 0, 1])
    with torch.no_grad():
        want, got = hf(input_ids=ids, attention_mask=mask, labels=labels), ours(input_ids=ids, attention_mask=mask,
                                                                                labels=labels)
    torch.testing.assert_close(got.logits, want.logits, **close)
    torch.testing.assert_close(got.loss, want.loss, **close)


def bert_family(name, head):
    sizes = {"vocab_size": 97, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
             "intermediate_size": 48, "max_position_embeddings": 40, "pad_token_id": 0}
    if name == "distilbert":
        cfg = transformers.DistilBertConfig(vocab_size=97, dim=32, n_layers=2, n_heads=4, hidden_dim=48,
                                            max_position_embeddings=40, pad_token_id=0)
    elif name == "albert":
        cfg = transformers.AlbertConfig(embedding_size=16, **sizes)
    else:
        cfg = getattr(transformers, {"bert": "BertConfig", "roberta": "RobertaConfig"}[name])(**sizes)
    prefix = {"bert": "Bert", "roberta": "Roberta", "albert": "Albert", "distilbert": "DistilBert"}[name]
    return getattr(transformers, f"{prefix}{head}")(cfg)


@pytest.mark.parametrize("name", ["bert", "roberta", "albert", "distilbert"])
def test_encoders_give_the_hidden_states_and_masked_lm_loss_of_transformers(name):
    ids, mask, _ = text_batch()
    labels = torch.full_like(ids, -100)
    labels[:, 1:3] = ids[:, 1:3]  # two masked positions a row
    hf, ours = pair(bert_family(name, "Model"))
    with torch.no_grad():
        want, got = hf(input_ids=ids, attention_mask=mask), ours(input_ids=ids, attention_mask=mask)
    real = mask.bool()
    torch.testing.assert_close(got.last_hidden_state[real], want.last_hidden_state[real], **close)
    if name == "distilbert":
        assert got.pooler_output is None and "pooler_output" not in got.keys()  # DistilBERT has no pooler
    else:
        torch.testing.assert_close(got.pooler_output, want.pooler_output, **close)
    hf, ours = pair(bert_family(name, "ForMaskedLM"))
    with torch.no_grad():
        want, got = hf(input_ids=ids, attention_mask=mask, labels=labels), ours(input_ids=ids, attention_mask=mask,
                                                                                labels=labels)
    torch.testing.assert_close(got.logits[real], want.logits[real], **close)
    torch.testing.assert_close(got.loss, want.loss, **close)


def test_bert_pretraining_loss_adds_the_next_sentence_loss_as_transformers():
    hf, ours = pair(bert_family("bert", "ForPreTraining"))
    ids, mask, labels = text_batch()
    types = (torch.arange(9) >= 4).long().expand(3, -1) * mask
    nsp = torch.tensor([0, 1, 1])
    with torch.no_grad():
        want = hf(input_ids=ids, attention_mask=mask, token_type_ids=types, labels=labels, next_sentence_label=nsp)
        got = ours(input_ids=ids, attention_mask=mask, token_type_ids=types, labels=labels, next_sentence_label=nsp)
    torch.testing.assert_close(got.seq_relationship_logits, want.seq_relationship_logits, **close)
    torch.testing.assert_close(got.loss, want.loss, **close)


def test_a_tokenizers_batch_is_a_call(tmp_path):
    """``model(**tokenizer(texts, return_tensors="pt", padding=True))``: a BERT tokenizer's batch (with
    token_type_ids) gives transformers' hidden states."""
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat", "a", "dog", "##s"]
    (tmp_path / "vocab.txt").write_text("\n".join(words + [f"w{i}" for i in range(97 - len(words))]) + "\n")
    tok = transformers.BertTokenizerFast(vocab_file=str(tmp_path / "vocab.txt"))
    batch = tok(["the cat sat on the mat", "a dog", "dogs"], ["a cat", "the mat", "on"], return_tensors="pt",
                padding=True)
    assert set(batch) == {"input_ids", "token_type_ids", "attention_mask"} and batch["token_type_ids"].any()
    hf, ours = pair(bert_family("bert", "Model"))
    with torch.no_grad():
        want, got = hf(**batch), ours(**batch)
    real = batch["attention_mask"].bool()
    torch.testing.assert_close(got.last_hidden_state[real], want.last_hidden_state[real], **close)


TEXTS = ["the cat sat on the mat", "a dog", "the dogs sat"]


@pytest.mark.parametrize("kind", ["gpt", "transformer", "bert"])
def test_our_tokenizers_batch_is_a_call_equal_to_the_positional_one(kind):
    """``model(**tok(texts, return_tensors="pt", padding=True))`` with aiayn's own callable tokenizer, for a
    decoder (left padding), an encoder-decoder (labels) and an encoder: the paper's forward's numbers."""
    from aiayn.data.callable import CallableTokenizer
    from aiayn.data.tokenizer import CharTokenizer
    from aiayn.data.wordpiece import WordPieceTokenizer

    torch.manual_seed(0)
    if kind == "bert":
        base = WordPieceTokenizer.train(TEXTS * 5, vocab_size=60, min_frequency=1)
        tok = CallableTokenizer(base, "bert")
        model = aiayn.build("bert-base", vocab_size=len(base), d_model=32, n_heads=4, d_ff=48, n_layers=2,
                            **{f"{s}_id": getattr(base, f"{s}_id") for s in ("pad", "cls", "sep", "mask")}).eval()
    else:
        base = CharTokenizer.train(TEXTS)
        tok = CallableTokenizer(base, "none" if kind == "gpt" else "eos", padding_side="left" if kind == "gpt"
                                else "right")
        model = (aiayn.build("gpt2", vocab_size=len(base), max_len=32, d_model=32, n_heads=4, d_ff=48, n_layers=2,
                             eos_id=base.eos_id) if kind == "gpt" else
                 aiayn.build("transformer-base", src_vocab_size=len(base), tgt_vocab_size=len(base), d_model=32,
                             n_heads=4, d_ff=48, n_encoder_layers=1, n_decoder_layers=1, pad_id=base.pad_id,
                             bos_id=base.bos_id, eos_id=base.eos_id)).eval()
    batch = tok(TEXTS, return_tensors="pt", padding=True)
    ids, mask = batch["input_ids"], batch["attention_mask"]
    with torch.no_grad():
        if kind == "gpt":
            torch.testing.assert_close(model(**batch).logits, model(ids, mask))
        elif kind == "transformer":
            labels = ids.masked_fill(mask == 0, -100)
            out = model(**batch, labels=labels)
            shifted = torch.cat([torch.full_like(ids[:, :1], base.bos_id), ids[:, :-1]], 1)  # pad stays pad
            torch.testing.assert_close(out.logits, model(ids, shifted))
            assert out.loss > 0
        else:
            torch.testing.assert_close(model(**batch).last_hidden_state, model(ids, None, mask))


@pytest.mark.parametrize("make", [
    lambda: transformers.MarianMTModel(transformers.MarianConfig(
        vocab_size=61, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=48, decoder_ffn_dim=48, max_position_embeddings=32, pad_token_id=60,
        eos_token_id=0, decoder_start_token_id=60)),
    lambda: transformers.BartForConditionalGeneration(transformers.BartConfig(
        vocab_size=61, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=48, decoder_ffn_dim=48, max_position_embeddings=32)),
], ids=["marian", "bart"])
def test_an_encoder_decoder_shifts_labels_right_as_transformers(make):
    hf, ours = pair(make())
    pad = ours.cfg.pad_id
    g = torch.Generator().manual_seed(2)
    src = torch.randint(3, 59, (2, 7), generator=g)
    src[1, 5:] = pad
    labels = torch.randint(3, 59, (2, 6), generator=g)
    labels[0, 4:] = -100
    mask = (src != pad).long()
    with torch.no_grad():
        want = hf(input_ids=src, attention_mask=mask, labels=labels)
        got = ours(input_ids=src, attention_mask=mask, labels=labels)
    torch.testing.assert_close(got.logits, want.logits, **close)
    torch.testing.assert_close(got.loss, want.loss, **close)
    torch.testing.assert_close(got.encoder_last_hidden_state[mask.bool()],
                               want.encoder_last_hidden_state[mask.bool()], **close)


@pytest.mark.parametrize("make", [
    lambda: transformers.ViTForImageClassification(transformers.ViTConfig(
        image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=48, num_labels=5)),
    lambda: transformers.SwinForImageClassification(transformers.SwinConfig(
        image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 4], window_size=4, num_labels=5)),
], ids=["vit", "swin"])
def test_image_classifiers_give_transformers_loss(make):
    hf, ours = pair(make())
    images, labels = torch.randn(2, 3, 32, 32), torch.tensor([4, 1])
    with torch.no_grad():
        want, got = hf(pixel_values=images, labels=labels), ours(pixel_values=images, labels=labels)
    torch.testing.assert_close(got.logits, want.logits, **close)
    torch.testing.assert_close(got.loss, want.loss, **close)


def test_detr_gives_transformers_set_loss_and_adds_the_auxiliary_layers_alike():
    """The last layer's loss and its parts equal DetrForObjectDetection's; ours adds each auxiliary layer's with
    the same weights (1, 5, 2), as the paper trains. (transformers 5's ``auxiliary_loss=True`` also puts the
    decoder's LayerNorm into the residual stream after every layer, so its logits differ from DETR's own: compared
    without it.)"""
    pytest.importorskip("scipy")
    from tests.convert.test_detr import detr_config, images_and_mask, randomized

    torch.manual_seed(0)
    hf = randomized(transformers.DetrForObjectDetection(detr_config()))
    ours = aiayn.from_hf(hf).eval()
    images, mask = images_and_mask()
    labels = [{"class_labels": torch.tensor([0, 2]),
               "boxes": torch.tensor([[0.3, 0.4, 0.2, 0.3], [0.6, 0.5, 0.4, 0.2]])},
              {"class_labels": torch.tensor([1]), "boxes": torch.tensor([[0.5, 0.5, 0.3, 0.3]])}]
    with torch.no_grad():
        want = hf(pixel_values=images, pixel_mask=mask, labels=labels)
        got = ours(pixel_values=images, pixel_mask=mask, labels=labels)
    torch.testing.assert_close(got.logits, want.logits, **close)
    torch.testing.assert_close(got.pred_boxes, want.pred_boxes, **close)
    for name in ("loss_ce", "loss_bbox", "loss_giou"):
        torch.testing.assert_close(got.loss_dict[name], want.loss_dict[name], **close)
    weights = {"ce": 1.0, "bbox": 5.0, "giou": 2.0}
    aux = sum(w * got.loss_dict[f"loss_{k}_{i}"] for k, w in weights.items() for i in range(2))  # 3 layers: 2 aux
    torch.testing.assert_close(got.loss - aux, want.loss, **close)
    assert len(got.auxiliary_outputs) == 2 and got.auxiliary_outputs[0]["pred_boxes"].shape == got.pred_boxes.shape


def test_an_output_reads_by_name_by_key_by_position_and_as_a_tuple():
    _, ours = pair(transformers.GPT2LMHeadModel(gpt2()))
    ids, _, _ = text_batch(lengths=(9, 9, 9))
    with torch.no_grad():
        out = ours(input_ids=ids, labels=ids)
        plain = ours(input_ids=ids, labels=ids, return_dict=False)
    assert isinstance(out, ModelOutput) and out.keys() == ["loss", "logits", "last_hidden_state"] == list(out)
    assert out["logits"] is out.logits and out[0] is out.loss and out[1] is out.logits
    assert isinstance(plain, tuple) and len(plain) == 3 and torch.equal(plain[1], out.logits)
    assert ours.config is ours.cfg and ours.device == torch.device("cpu") and ours.dtype == torch.float32
    with pytest.raises(KeyError, match="past_key_values"):
        out["past_key_values"]


def test_the_keyword_call_refuses_by_name():
    _, gpt = pair(transformers.GPT2LMHeadModel(gpt2()))
    ids, _, _ = text_batch(lengths=(9, 9, 9))
    with pytest.raises(TypeError, match="position_ids"):
        gpt(input_ids=ids, position_ids=ids)
    with pytest.raises(ValueError, match="output_attentions=True"):
        gpt(input_ids=ids, output_attentions=True)
    with pytest.raises(ValueError, match=r"labels must be shaped \(3, 9\)"):
        gpt(input_ids=ids, labels=ids[:, :4])
    with pytest.raises(ValueError, match="labels must be integer"):
        gpt(input_ids=ids, labels=ids.float())
    gpt(input_ids=ids, output_attentions=False, output_hidden_states=False)  # False is what it does anyway
    seq = aiayn.build(aiayn.preset("transformer-base", src_vocab_size=50, tgt_vocab_size=50, d_model=32, n_heads=4,
                                   d_ff=48, n_encoder_layers=1, n_decoder_layers=1))
    with pytest.raises(ValueError, match="decoder_input_ids and labels are both None"):
        seq(input_ids=ids % 50)
    with pytest.raises(ValueError, match="attention_mask must be 0 exactly where input_ids hold pad_id"):
        seq(input_ids=ids % 50, attention_mask=torch.zeros_like(ids), labels=ids % 50)
