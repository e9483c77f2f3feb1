"""DistilBERT (Sanh et al. 2019) against what is independent of it: Hugging Face's DistilBERT models built from
configs with random weights (no download), converted both ways and compared output by output; the published
parameter count (distilbert-base-uncased's DistilBertModel: 66,362,880) and transformers' own count; the FLOP
counter; sentence embeddings computed by hand; and a fine-tuning run of the textclass recipe."""

import json

import pytest
import torch
from safetensors.torch import load_file

import aiayn
from aiayn import recipes
from aiayn.analysis import counts, measure, parameter_table
from aiayn.convert.to_hf import to_hf
from aiayn.data.wordpiece import WordPieceTokenizer
from aiayn.models.bert import BERT, BertConfig, mean_pool
from aiayn.models.distilbert import DistilBERT, DistilBertConfig
from aiayn.pipelines.textclass import encode, load_classifier
from aiayn.recipes.textclass import date_halves

transformers = pytest.importorskip("transformers")
pytestmark = [pytest.mark.parity, pytest.mark.usefixtures("one_thread")]  # one_thread: see conftest.py

QUIET = {"progress": False, "verbose": False}
HF_CLASSES = {"none": transformers.AutoModel, "mlm": transformers.AutoModelForMaskedLM,
              "classification": transformers.AutoModelForSequenceClassification}


def hf_config(**overrides):
    """A small Hugging Face DistilBertConfig at odd sizes: 60 channels in 5 heads of 12, 3 layers."""
    cfg = {"vocab_size": 120, "dim": 60, "n_heads": 5, "n_layers": 3, "hidden_dim": 84, "max_position_embeddings": 40,
           "initializer_range": 0.2, "pad_token_id": 0}
    cfg.update(overrides)
    return transformers.DistilBertConfig(**cfg)


def randomized(model):
    """Every bias and LayerNorm gain of ``model`` (ours or theirs) away from its 0/1 start, so a dropped or mixed-up
    one shows (a tied weight once)."""
    with torch.no_grad():
        seen = set()
        for _, p in model.named_parameters():
            if p.dim() == 1 and id(p) not in seen:
                seen.add(id(p))
                p.add_(torch.randn_like(p) * 0.2)
    return model.eval()


def batch():
    """Two rows, the second padded: [CLS] text [SEP] (ids as aiayn's WordPiece numbers them), and its mask."""
    ids = torch.tensor([[2, 7, 8, 9, 3, 10, 11, 3], [2, 5, 6, 3, 0, 0, 0, 0]])
    return ids, (ids != 0).long()


def close(a, b):
    torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


# --- Hugging Face -> ours ----------------------------------------------------------------------------------


@pytest.mark.parametrize("overrides", [{}, {"activation": "relu", "n_layers": 2}], ids=["gelu", "relu"])
def test_hidden_states_equal_distilbert_model_on_a_padded_batch(overrides):
    hf = randomized(transformers.DistilBertModel(hf_config(**overrides)))
    ours = aiayn.from_hf(hf)
    ids, mask = batch()
    real = mask.bool()
    with torch.no_grad():
        expected = hf(input_ids=ids, attention_mask=mask).last_hidden_state
        close(ours(ids, attention_mask=mask)[real], expected[real])
        close(ours(ids)[real], expected[real])  # the mask made from pad_id
        close(ours(ids, torch.zeros_like(ids), mask)[real], expected[real])  # all-zero token types: ignored
    assert type(ours) is DistilBERT and isinstance(ours, BERT) and isinstance(ours.cfg, BertConfig)
    assert ours.cfg.head == "none" and ours.cfg.n_layers == hf.config.n_layers and ours.cfg.d_model == 60
    assert ours.embed.segments is None and not hasattr(ours, "pooler")  # no token types, no pooler (section 2)
    assert aiayn.count_parameters(ours) == sum(p.numel() for p in hf.parameters())


def test_masked_lm_logits_equal_distilbert_for_masked_lm():
    hf = randomized(transformers.DistilBertForMaskedLM(hf_config(activation="gelu_new")))
    ours = aiayn.from_hf(hf)
    ids, mask = batch()
    real = mask.bool()
    with torch.no_grad():
        expected = hf(input_ids=ids, attention_mask=mask).logits
        close(ours.mlm_logits(ours(ids, attention_mask=mask))[real], expected[real])
    assert ours.cfg.head == "mlm" and ours.cfg.activation == "gelu_tanh"
    assert ours.mlm.tokens.weight is ours.embed.tokens.weight  # the projector tied to the word embeddings
    assert aiayn.count_parameters(ours) == sum(p.numel() for p in hf.parameters())


def test_class_logits_equal_distilbert_for_sequence_classification():
    hf = randomized(transformers.DistilBertForSequenceClassification(hf_config(num_labels=3)))
    ours = aiayn.from_hf(hf)
    ids, mask = batch()
    with torch.no_grad():
        hidden = ours(ids, attention_mask=mask)
        close(ours.classify(hidden), hf(input_ids=ids, attention_mask=mask).logits)
        # pooled is ReLU(pre_classifier([CLS])), not BERT's tanh pooler
        close(ours.pooled(hidden), torch.relu(hf.pre_classifier(hidden[:, 0])))
    assert ours.cfg.head == "classification" and ours.cfg.num_labels == 3
    assert ours.cfg.classifier_dropout == hf.config.seq_classif_dropout


@pytest.mark.parametrize("cls", ["DistilBertForTokenClassification", "DistilBertForQuestionAnswering"])
def test_heads_we_do_not_compute_are_refused_not_converted_to_another(cls, tmp_path):
    said = f"{cls} cannot be converted"
    model = getattr(transformers, cls)(hf_config(num_labels=2))
    with pytest.raises(ValueError, match=said):
        aiayn.from_hf(model)
    model.save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=said):
        aiayn.from_hf(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    del config["architectures"]  # weights alone say it too: a classifier without pre_classifier is left over
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="unexpected keys"):
        aiayn.from_hf(tmp_path)


def test_sinusoidal_positions_are_refused_by_name():
    with pytest.raises(ValueError, match="sinusoidal_pos_embds=True"):
        aiayn.from_hf(transformers.DistilBertModel(hf_config(sinusoidal_pos_embds=True)))


# --- ours -> Hugging Face ----------------------------------------------------------------------------------


def exported(model, folder, auto):
    """``to_hf(model, folder)`` loaded by ``auto.from_pretrained``: the class ``config.json`` names, with nothing
    missing, unexpected or misshapen, and a folder holding what ``save_pretrained`` of it holds."""
    assert to_hf(model, folder) == folder
    config = json.loads((folder / "config.json").read_text())
    hf, info = auto.from_pretrained(folder, output_loading_info=True)
    assert type(hf).__name__ == config["architectures"][0]
    assert not any(info.values()), info
    hf.save_pretrained(folder / "saved")
    ours, theirs = load_file(folder / "model.safetensors"), load_file(folder / "saved" / "model.safetensors")
    assert sorted(ours) == sorted(theirs)
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)
    return hf.eval()


@pytest.mark.parametrize("head", HF_CLASSES)
def test_ours_exports_to_the_class_of_its_head_and_comes_back_unchanged(head, tmp_path):
    ours = randomized(aiayn.build("distilbert-tiny", vocab_size=120, max_len=40, d_model=60, n_heads=5, n_layers=3,
                                  d_ff=84, head=head, num_labels=3, activation="relu" if head == "mlm" else "gelu"))
    hf = exported(ours, tmp_path / "hf", HF_CLASSES[head])
    assert hf.config.sinusoidal_pos_embds is False and hf.config.n_layers == 3 and hf.config.dim == 60
    ids, mask = batch()
    real = mask.bool()
    with torch.no_grad():
        got, expected = ours(ids, attention_mask=mask), hf(input_ids=ids, attention_mask=mask)
        if head == "none":
            close(got[real], expected.last_hidden_state[real])
        elif head == "mlm":
            close(ours.mlm_logits(got)[real], expected.logits[real])
        else:
            close(ours.classify(got), expected.logits)
    back = aiayn.from_hf(tmp_path / "hf")  # the same class, config (specials 2, 3, 4 kept) and weights
    assert type(back) is DistilBERT and back.cfg == ours.cfg
    assert back.state_dict().keys() == ours.state_dict().keys()
    assert all(torch.equal(v, back.state_dict()[k]) for k, v in ours.state_dict().items())


def test_a_hugging_face_distilbert_comes_back_with_the_weights_it_had(tmp_path):
    hf = randomized(transformers.DistilBertForMaskedLM(hf_config()))
    again = exported(aiayn.from_hf(hf), tmp_path / "hf", transformers.AutoModelForMaskedLM)
    theirs, reloaded = hf.state_dict(), again.state_dict()
    assert theirs.keys() == reloaded.keys()
    assert all(torch.equal(theirs[k], reloaded[k]) for k in theirs)


def test_configs_hugging_face_cannot_express_are_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match="layer_norm_eps=1e-05 cannot be exported"):
        to_hf(aiayn.build("distilbert-tiny", layer_norm_eps=1e-5), tmp_path)


# --- the model's own rules ---------------------------------------------------------------------------------


def test_what_distilbert_has_not_is_refused_by_name():
    with pytest.raises(ValueError, match="head='pretraining': DistilBERT has no next-sentence head"):
        aiayn.build("distilbert-tiny", head="pretraining")
    with pytest.raises(ValueError, match="type_vocab_size=2: DistilBERT has no token-type embeddings"):
        DistilBertConfig(type_vocab_size=2)
    with pytest.raises(ValueError, match=r"classifier_dropout=1\.5 must be a probability"):
        DistilBertConfig(classifier_dropout=1.5)
    with pytest.raises(ValueError, match="d_model=100 must be divisible by n_heads=12"):
        DistilBertConfig(d_model=100)
    with pytest.raises(TypeError, match="cfg must be a DistilBertConfig, got BertConfig"):
        DistilBERT(BertConfig())
    model = aiayn.build("distilbert-tiny").eval()
    ids, mask = batch()
    with pytest.raises(ValueError, match="token_type_ids holds non-zero token types"):
        model(ids, (torch.arange(8) >= 5).long().expand(2, 8), mask)
    with pytest.raises(ValueError, match=r"token_type_ids must have the shape of ids \(2, 8\)"):
        model(ids, torch.zeros(2, 5, dtype=torch.long), mask)
    hidden = model(ids, attention_mask=mask)
    with pytest.raises(ValueError, match="head='mlm' and no pooler"):
        model.pooled(hidden)
    with pytest.raises(ValueError, match="head='mlm'; build it with head='classification'"):
        model.classify(hidden)
    with pytest.raises(ValueError, match="no next-sentence head"):
        model.nsp_logits(hidden)


# --- counts ------------------------------------------------------------------------------------------------


def test_distilbert_base_has_the_published_66_362_880_parameters():
    with torch.device("meta"):
        theirs = sum(p.numel() for p in transformers.DistilBertModel(transformers.DistilBertConfig()).parameters())
        built = aiayn.build("distilbert-base")
    assert counts("distilbert-base").total_parameters == 66_362_880 == theirs == aiayn.count_parameters(built)
    table = parameter_table("distilbert-base")  # built on meta, part by part
    assert table.pop("total") == 66_362_880 and counts("distilbert-base").parameters == table
    cfg = aiayn.preset("distilbert-base")
    assert (cfg.n_layers, cfg.d_model, cfg.n_heads, cfg.d_ff, cfg.vocab_size, cfg.max_len, cfg.head) == \
        (6, 768, 12, 3072, 30522, 512, "none")


@pytest.mark.parametrize("head", HF_CLASSES)
def test_formulas_equal_the_built_model_transformers_and_the_flop_counter(head):
    model = aiayn.build("distilbert-tiny", head=head, num_labels=3)
    formula = counts(model.cfg, seq_len=16, batch=2)
    table = parameter_table(model.cfg)
    assert formula.parameters == {k: v for k, v in table.items() if k != "total"}
    assert formula.total_parameters == table["total"] == aiayn.count_parameters(model)
    cfg = model.cfg
    with torch.device("meta"):
        hf = HF_CLASSES[head].from_config(transformers.DistilBertConfig(
            vocab_size=cfg.vocab_size, max_position_embeddings=cfg.max_len, dim=cfg.d_model, n_heads=cfg.n_heads,
            n_layers=cfg.n_layers, hidden_dim=cfg.d_ff, num_labels=3))
    assert formula.total_parameters == sum(p.numel() for p in hf.parameters())
    measured = measure(model, seq_len=16, batch=2)
    assert measured.parameters == formula.parameters and measured.macs == formula.macs
    assert measured.macs["attention scores"] > 0 and (head == "none" or measured.macs["output"] > 0)


# --- embedding and fine-tuning -----------------------------------------------------------------------------

TEXTS = ["march 3, 1999", "the 30th of august, 2004", "21.03.1948"]


@pytest.fixture(scope="module")
def wordpiece():
    # 100 pieces: under 104, so a Hugging Face folder without our "aiayn" key reads [CLS] [SEP] [MASK] at 2, 3, 4
    return WordPieceTokenizer.train(date_halves(300, seed=1)[0], vocab_size=100)


def by_hand(hidden, mask):
    """The mean of the real tokens' states, L2-normalised: what embedding is, written out."""
    weights = mask[..., None].float()
    return torch.nn.functional.normalize((hidden * weights).sum(1) / weights.sum(1), dim=-1)


def test_a_saved_distilbert_and_a_hugging_face_folder_embed_as_mean_pooling_by_hand(wordpiece, tmp_path):
    tok = wordpiece
    ids, _, mask = tok.batch(TEXTS, max_len=32)
    model = randomized(aiayn.build("distilbert-tiny", vocab_size=tok.vocab_size, max_len=32, d_model=32, n_heads=4,
                                   n_layers=2, d_ff=64))
    aiayn.save(model, tmp_path / "run")
    tok.save(tmp_path / "run" / "tokenizer.json")
    p = aiayn.pipeline(tmp_path / "run")
    assert p.task == "feature-extraction" and type(p.model) is DistilBERT
    with torch.no_grad():
        expected = by_hand(model(ids, attention_mask=mask), mask)
    torch.testing.assert_close(p.embed(TEXTS), expected, atol=1e-6, rtol=0)
    torch.testing.assert_close(expected, mean_pool(model(ids, attention_mask=mask), mask).detach(), atol=1e-6, rtol=0)

    hf = randomized(transformers.DistilBertModel(hf_config(vocab_size=tok.vocab_size)))
    hf.save_pretrained(tmp_path / "hf")
    tok.save(tmp_path / "hf" / "tokenizer.json")
    p = aiayn.pipeline(tmp_path / "hf")  # converted in memory
    assert p.task == "feature-extraction" and type(p.model) is DistilBERT
    with torch.no_grad():
        expected = by_hand(hf(input_ids=ids, attention_mask=mask).last_hidden_state, mask)
    torch.testing.assert_close(p.embed(TEXTS), expected, atol=1e-5, rtol=1e-5)


def test_a_distilbert_fine_tunes_as_a_classifier_through_textclass(wordpiece, tmp_path):
    tok = wordpiece
    source = aiayn.build("distilbert-tiny", vocab_size=tok.vocab_size, max_len=64, d_model=32, n_heads=4, n_layers=2,
                         d_ff=64)
    aiayn.save(source, tmp_path / "mlm")
    tok.save(tmp_path / "mlm" / "tokenizer.json")
    run = recipes.train("textclass", init_from=str(tmp_path / "mlm"), freeze=1, n_examples=200, steps=3, warmup=1,
                        eval_every=0, batch_size=8, out=str(tmp_path), **QUIET)["run"]
    tuned = aiayn.load(run)
    assert type(tuned) is DistilBERT and tuned.cfg.head == "classification" and tuned.cfg.num_labels == 2
    assert (tuned.cfg.d_model, tuned.cfg.type_vocab_size) == (32, 0)  # the source's config
    start, after = source.state_dict(), tuned.state_dict()
    assert torch.equal(after["encoder.layers.0.ff.fc1.weight"], start["encoder.layers.0.ff.fc1.weight"])  # frozen
    assert not torch.equal(after["encoder.layers.1.ff.fc1.weight"], start["encoder.layers.1.ff.fc1.weight"])
    assert {"pre_classifier.weight", "classifier.weight"} <= after.keys() and "pooler.weight" not in after
    # the run classifies as the model says: classifier(ReLU(pre_classifier([CLS])))
    model, run_tok, classes = load_classifier(run)
    [row] = encode(run_tok, TEXTS[:1], tuned.cfg.max_len)
    with torch.no_grad():
        probs = model.classify(model(torch.tensor([row]))).softmax(-1)[0]
    [out] = aiayn.pipeline(run).classify(TEXTS[:1], top=2)
    assert [c["class"] for c in out["top"]] == [classes[i] for i in probs.argsort(descending=True).tolist()]
    assert [c["probability"] for c in out["top"]] == pytest.approx(sorted(probs.tolist(), reverse=True), abs=1e-5)
