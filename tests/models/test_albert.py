"""ALBERT against what is independent of it: Hugging Face's ALBERT models built from configs with random weights
(no download), both ways; transformers' own parameter counts and FlopCounterMode's multiply-adds; the shared
layer applied by hand; sentence embeddings pooled by hand; and the fine-tuning recipe end to end."""

import json

import pytest
import torch
from safetensors.torch import load_file

import aiayn
from aiayn import recipes
from aiayn.analysis import counts, measure, parameter_table
from aiayn.convert.to_hf import to_hf
from aiayn.data.wordpiece import WordPieceTokenizer
from aiayn.layers import EncoderBlock
from aiayn.models.albert import ALBERT, AlbertConfig
from aiayn.models.bert import BERT, BertConfig
from aiayn.recipes.textclass import date_halves
from aiayn.training.activations import checkpoint_blocks

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors on a shared machine (see conftest.py)
QUIET = {"progress": False, "verbose": False}


def hf_config(**overrides):
    """Odd sizes: E = 24 beside H = 60 in 5 heads of 12, 3 applications of the shared layer."""
    cfg = {"vocab_size": 120, "embedding_size": 24, "hidden_size": 60, "num_attention_heads": 5,
           "intermediate_size": 96, "num_hidden_layers": 3, "max_position_embeddings": 40, "type_vocab_size": 2,
           "initializer_range": 0.2, "pad_token_id": 0}
    return transformers.AlbertConfig(**{**cfg, **overrides})


def randomized(model):
    """Every bias and norm gain away from its 0/1 start (matrices keep their random init), each tied one once,
    so a dropped or mixed-up one shows."""
    with torch.no_grad():
        seen = set()
        for t in model.state_dict(keep_vars=True).values():
            if t.is_floating_point() and t.dim() == 1 and id(t) not in seen:
                seen.add(id(t))
                t.add_(torch.randn_like(t) * 0.2)
    return model.eval()


def batch():
    ids = torch.tensor([[2, 7, 8, 9, 3, 10, 11, 3], [2, 5, 6, 3, 0, 0, 0, 0]])  # [CLS] A [SEP] B [SEP], padded
    types = torch.tensor([[0, 0, 0, 0, 0, 1, 1, 1], [0, 0, 0, 0, 0, 0, 0, 0]])
    return ids, types, (ids != 0).long()


def close(a, b):
    torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


def assert_outputs_equal(ours, hf, head):
    """Our outputs for ``head`` against the Hugging Face model's, on the real tokens of a padded pair batch."""
    ids, types, mask = batch()
    real = mask.bool()
    with torch.no_grad():
        got, expected = ours(ids, types, mask), hf(input_ids=ids, token_type_ids=types, attention_mask=mask)
    if head == "none":
        close(got[real], expected.last_hidden_state[real])
        close(ours.pooled(got), expected.pooler_output)
    elif head == "mlm":
        close(ours.mlm_logits(got)[real], expected.logits[real])
    elif head == "pretraining":
        close(ours.mlm_logits(got)[real], expected.prediction_logits[real])
        close(ours.nsp_logits(got), expected.sop_logits)
    else:
        close(ours.classify(got), expected.logits)


HF_CLASSES = {"none": "AlbertModel", "mlm": "AlbertForMaskedLM", "pretraining": "AlbertForPreTraining",
              "classification": "AlbertForSequenceClassification"}
AUTO = {"none": "AutoModel", "mlm": "AutoModelForMaskedLM", "pretraining": "AutoModelForPreTraining",
        "classification": "AutoModelForSequenceClassification"}


# --- Hugging Face -> ours -------------------------------------------------------------------------------------

@pytest.mark.parity
@pytest.mark.parametrize("head", HF_CLASSES)
@pytest.mark.parametrize("overrides", [{}, {"hidden_act": "gelu", "layer_norm_eps": 1e-5, "num_hidden_layers": 2}],
                         ids=["gelu-tanh", "gelu-erf"])
def test_each_hugging_face_albert_converts_to_the_same_outputs(head, overrides):
    hf = randomized(getattr(transformers, HF_CLASSES[head])(hf_config(num_labels=3 if head == "classification"
                                                                      else 2, **overrides)))
    ours = aiayn.from_hf(hf)
    assert type(ours) is ALBERT and isinstance(ours, BERT) and ours.cfg.head == head
    assert ours.cfg.embedding_size == 24 and ours.cfg.n_layers == hf.config.num_hidden_layers
    assert_outputs_equal(ours, hf, head)
    if head in ("mlm", "pretraining"):
        assert ours.mlm.tokens.weight is ours.embed.tokens.weight  # the decoder is tied, as theirs
    if head == "classification":
        assert ours.cfg.num_labels == 3


@pytest.mark.parity
@pytest.mark.parametrize(("cls", "overrides", "said"), [
    ("AlbertForTokenClassification", {}, "AlbertForTokenClassification cannot"),  # classifier.weight, as ours
    ("AlbertForQuestionAnswering", {}, "AlbertForQuestionAnswering cannot"),
    ("AlbertModel", {"num_hidden_groups": 3}, "num_hidden_groups=3: only 1"),
    ("AlbertModel", {"inner_group_num": 2}, "inner_group_num=2: only 1"),
    ("AlbertForPreTraining", {"num_labels": 3}, "sentence-order head has 3 classes"),
])
def test_albert_configs_and_heads_we_do_not_compute_are_refused_by_name(cls, overrides, said, tmp_path):
    model = getattr(transformers, cls)(hf_config(**overrides))
    with pytest.raises(ValueError, match=said):
        aiayn.from_hf(model)
    model.save_pretrained(tmp_path)  # a folder says what it is in config.json
    with pytest.raises(ValueError, match=said):
        aiayn.from_hf(tmp_path)


# --- ours -> Hugging Face -------------------------------------------------------------------------------------

@pytest.mark.parity
@pytest.mark.parametrize("head", HF_CLASSES)
def test_our_albert_exports_to_the_class_of_its_head(head, tmp_path):
    ours = randomized(aiayn.build("albert-tiny", vocab_size=120, max_len=40, embedding_size=24, d_model=60, n_heads=5,
                                  n_layers=3, d_ff=96, head=head, num_labels=3 if head == "classification" else 2,
                                  dropout=0.1, classifier_dropout=0.2))
    folder = to_hf(ours, tmp_path / "hf")
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == "albert" and config["hidden_act"] == "gelu_new"
    assert config["architectures"] == [HF_CLASSES[head]] and config["embedding_size"] == 24
    hf, info = getattr(transformers, AUTO[head]).from_pretrained(folder, output_loading_info=True)
    assert type(hf).__name__ == HF_CLASSES[head] and not any(info.values()), info
    assert hf.config.classifier_dropout_prob == 0.2 and hf.config.hidden_dropout_prob == 0.1
    assert_outputs_equal(ours, hf.eval(), head)
    hf.save_pretrained(folder / "saved")  # the folder holds what save_pretrained writes, tied weights left out
    written, saved = load_file(folder / "model.safetensors"), load_file(folder / "saved" / "model.safetensors")
    assert sorted(written) == sorted(saved) and all(torch.equal(written[k], saved[k]) for k in written)
    back = aiayn.from_hf(folder)  # and comes back as it was (an mlm model's unused pooler: zero)
    skip = {"pooler.weight", "pooler.bias"} if head == "mlm" else set()
    assert type(back) is ALBERT and back.cfg == ours.cfg
    assert back.state_dict().keys() == ours.state_dict().keys()
    assert all(torch.equal(v, back.state_dict()[k]) for k, v in ours.state_dict().items() if k not in skip)


@pytest.mark.parity
def test_a_hugging_face_albert_comes_back_with_the_weights_it_had(tmp_path):
    hf = randomized(transformers.AlbertForSequenceClassification(hf_config(num_labels=4)))
    to_hf(aiayn.from_hf(hf), tmp_path)
    again = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path)
    assert hf.state_dict().keys() == again.state_dict().keys()
    assert all(torch.equal(v, again.state_dict()[k]) for k, v in hf.state_dict().items())


# --- counts ---------------------------------------------------------------------------------------------------

def hf_count(cls, **sizes):
    with torch.device("meta"):
        return sum(p.numel() for p in getattr(transformers, cls)(transformers.AlbertConfig(**sizes)).parameters())


ALBERT_BASE = {"vocab_size": 30000, "embedding_size": 128, "hidden_size": 768, "num_attention_heads": 12,
               "intermediate_size": 3072, "num_hidden_layers": 12}  # albert-base-v2's config.json


def test_albert_base_has_the_parameters_of_transformers_albert_model():
    with torch.device("meta"):
        built = aiayn.build("albert-base")
    assert counts("albert-base").total_parameters == 11_683_584 == hf_count("AlbertModel", **ALBERT_BASE)
    assert aiayn.count_parameters(built) == 11_683_584
    large = {**ALBERT_BASE, "hidden_size": 1024, "num_attention_heads": 16, "intermediate_size": 4096,
             "num_hidden_layers": 24}
    assert counts("albert-large").total_parameters == hf_count("AlbertModel", **large) == 17_683_968
    for name in ("albert-base", "albert-large"):  # part by part, module by module, as built
        table = parameter_table(name)
        table.pop("total")
        assert counts(name).parameters == table, name


@pytest.mark.parametrize("head", HF_CLASSES)
def test_tiny_preset_counts_equal_transformers_and_the_flop_counter_with_each_head(head):
    cfg = aiayn.preset("albert-tiny", head=head, num_labels=3)
    tiny = {"vocab_size": 1000, "embedding_size": 64, "hidden_size": 128, "num_attention_heads": 4,
            "intermediate_size": 512, "num_hidden_layers": 2, "max_position_embeddings": 128,
            "num_labels": 3 if head == "classification" else 2}
    theirs = hf_count(HF_CLASSES[head], **tiny) + (128 * 128 + 128 if head == "mlm" else 0)  # + our unused pooler
    model = aiayn.build(cfg)
    assert counts(cfg).total_parameters == theirs == aiayn.count_parameters(model)
    measured, formula = measure(model, seq_len=16, batch=2), counts(cfg, seq_len=16, batch=2)
    assert measured.parameters == formula.parameters and measured.macs == formula.macs


def test_the_shared_layer_is_counted_once_for_parameters_and_n_times_for_multiply_adds():
    two, six = (counts(aiayn.preset("albert-tiny", n_layers=n), seq_len=32) for n in (2, 6))
    assert two.parameters == six.parameters
    per_layer = counts(aiayn.preset("bert-tiny", head="none", n_layers=1), seq_len=32).macs  # one BERT layer
    bert_layers = {p: per_layer[p] for p in ("attention projections", "attention scores", "feed-forward")}
    assert all(six.macs[p] - two.macs[p] == 4 * n for p, n in bert_layers.items())


# --- the shared layer -----------------------------------------------------------------------------------------

def test_one_layer_is_held_once_and_applied_n_times(tmp_path):
    model = randomized(aiayn.build("albert-tiny", n_layers=4, d_model=32, n_heads=2, d_ff=64, embedding_size=16))
    state = model.state_dict()
    layer_keys = [k for k in state if k.startswith("encoder.")]
    assert layer_keys and all(k.startswith("encoder.layers.0.") for k in layer_keys)
    assert len(model.encoder.layers) == 1 and isinstance(model.encoder.layers[0], EncoderBlock)
    assert aiayn.count_parameters(model) == aiayn.count_parameters(aiayn.build(model.cfg, n_layers=1))
    ids, types, mask = batch()
    key_mask = mask.bool()[:, None, None, :]
    with torch.no_grad():
        x = model.embed(ids, segment_ids=types)  # (B, T, H), projected from E
        by_hand = []
        for _ in range(4):
            x = model.encoder.layers[0](x, mask=key_mask)
            by_hand.append(x)
        outputs = model.encoder.layer_outputs(model.embed(ids, segment_ids=types), mask=key_mask)
        torch.testing.assert_close(model(ids, types, mask), by_hand[-1], rtol=0, atol=0)
        for got, want in zip(outputs, by_hand, strict=True):
            torch.testing.assert_close(got, want, rtol=0, atol=0)
        fc2 = model.encoder.layers[0].ff.fc2.bias
        fc2.add_(torch.randn_like(fc2))  # one change to the shared weights (not a constant: LayerNorm removes it) ...
        changed = model.encoder.layer_outputs(model.embed(ids, segment_ids=types), mask=key_mask)
    assert all(not torch.allclose(a, b) for a, b in zip(outputs, changed, strict=True))  # ... moves every layer
    aiayn.save(model, tmp_path / "m.safetensors")  # saved with the layer once, loaded back the same
    assert sorted(load_file(tmp_path / "m.safetensors")) == sorted(k for k in state if k != "mlm.tokens.weight")
    loaded = aiayn.load(tmp_path / "m.safetensors").eval()
    assert type(loaded) is ALBERT and loaded.cfg == model.cfg
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids, types, mask), model(ids, types, mask), rtol=0, atol=0)


def test_activation_checkpointing_recomputes_the_shared_layer_with_the_same_gradients():
    torch.manual_seed(0)
    plain = aiayn.build("albert-tiny", n_layers=3, d_model=32, n_heads=2, d_ff=64, embedding_size=16, dropout=0.1)
    checkpointed = aiayn.build(plain.cfg)
    checkpointed.load_state_dict(plain.state_dict())
    assert checkpoint_blocks(checkpointed) == 1  # one block, recomputed at each of its 3 applications
    ids, types, mask = batch()
    grads = []
    for model in (plain, checkpointed):
        torch.manual_seed(1)  # the same dropout masks
        model.mlm_logits(model(ids, types, mask)).logsumexp(-1).sum().backward()
        grads.append({k: p.grad for k, p in model.named_parameters()})
    for k, g in grads[0].items():
        torch.testing.assert_close(grads[1][k], g, rtol=1e-5, atol=1e-6)


def test_the_config_is_a_bert_config_with_an_embedding_width():
    cfg = aiayn.preset("albert-base")
    assert isinstance(cfg, BertConfig) and type(cfg) is AlbertConfig
    assert (cfg.embedding_size, cfg.d_model, cfg.activation, cfg.vocab_size) == (128, 768, "gelu_tanh", 30000)
    tiny = aiayn.preset("albert-tiny")
    bert_tiny = aiayn.preset("bert-tiny")
    assert (tiny.pad_id, tiny.cls_id, tiny.sep_id, tiny.mask_id) == (bert_tiny.pad_id, bert_tiny.cls_id,
                                                                     bert_tiny.sep_id, bert_tiny.mask_id)
    with pytest.raises(ValueError, match="embedding_size=0 must be a positive integer"):
        AlbertConfig(embedding_size=0)
    with pytest.raises(ValueError, match=r"classifier_dropout=1\.5 must be a probability"):
        AlbertConfig(classifier_dropout=1.5)
    with pytest.raises(ValueError, match="head='pretrain' must be one of"):
        AlbertConfig(head="pretrain")
    model = aiayn.build("albert-tiny", head="none")
    with pytest.raises(ValueError, match="head='none'; build it with head='classification'"):
        model.classify(torch.zeros(1, 2, 128))


# --- embedding and fine-tuning --------------------------------------------------------------------------------

def tokenizer():
    return WordPieceTokenizer.train(date_halves(300, seed=3)[0], vocab_size=200, min_frequency=1)


def embedded_by_hand(hidden, mask):
    """Mean over the real tokens, then L2-normalised, written out."""
    rows = []
    for h, m in zip(hidden, mask.bool()):
        v = h[m].mean(0)
        rows.append(v / v.norm())
    return torch.stack(rows)


TEXTS = ["the 3rd of march 1999", "december 24, 2011", "june"]


def test_a_saved_albert_run_embeds_its_texts(tmp_path):
    tok = tokenizer()
    model = randomized(aiayn.build("albert-tiny", vocab_size=tok.vocab_size, d_model=32, n_heads=2, d_ff=64,
                                   embedding_size=16, max_len=64))
    aiayn.save(model, tmp_path)
    tok.save(tmp_path / "tokenizer.json")
    p = aiayn.pipeline(tmp_path)
    assert p.task == "feature-extraction" and type(p.model) is ALBERT
    ids, types, mask = tok.batch(TEXTS)
    with torch.no_grad():
        expected = embedded_by_hand(model(ids, types, mask), mask)
    torch.testing.assert_close(p.embed(TEXTS), expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parity
def test_a_hugging_face_albert_folder_embeds_as_its_hidden_states_pooled_by_hand(tmp_path):
    tok = tokenizer()
    hf = randomized(transformers.AlbertModel(hf_config(vocab_size=tok.vocab_size)))
    hf.save_pretrained(tmp_path)
    tok.save(tmp_path / "tokenizer.json")
    p = aiayn.pipeline(tmp_path)
    assert p.task == "feature-extraction" and type(p.model) is ALBERT
    ids, types, mask = tok.batch(TEXTS)
    with torch.no_grad():
        hidden = hf(input_ids=ids, token_type_ids=types, attention_mask=mask).last_hidden_state
    torch.testing.assert_close(p.embed(TEXTS), embedded_by_hand(hidden, mask), atol=1e-5, rtol=1e-5)


def test_a_tiny_albert_fine_tunes_as_a_text_classifier(tmp_path):
    tok = tokenizer()
    source = randomized(aiayn.build("albert-tiny", vocab_size=tok.vocab_size, d_model=32, n_heads=2, d_ff=64,
                                    embedding_size=16, max_len=64))
    aiayn.save(source, tmp_path / "albert")
    tok.save(tmp_path / "albert" / "tokenizer.json")
    run = recipes.train("textclass", init_from=str(tmp_path / "albert"), freeze=-1, n_examples=200, steps=3,
                        warmup=1, eval_every=0, batch_size=16, out=str(tmp_path), **QUIET)["run"]
    tuned = aiayn.load(run)
    assert type(tuned) is ALBERT and tuned.cfg.head == "classification" and tuned.cfg.num_labels == 2
    assert tuned.cfg.embedding_size == 16 and tuned.cfg.max_len == 64  # the source's config, not a preset's
    assert (run / "tokenizer.json").read_text() == (tmp_path / "albert" / "tokenizer.json").read_text()
    start, end = source.state_dict(), tuned.state_dict()
    for name, value in end.items():  # the body was loaded and frozen (the shared layer too); the head learnt
        if name.startswith(("embed.", "encoder.")):
            assert torch.equal(value, start[name]), name
    assert not torch.equal(end["pooler.weight"], start["pooler.weight"])
    p = aiayn.pipeline(run)
    assert p.task == "text-classification" and type(p.model) is ALBERT
    assert [o["text"] for o in p.classify(TEXTS[:2])] == TEXTS[:2]
