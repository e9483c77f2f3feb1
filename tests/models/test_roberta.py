"""Our RoBERTa against Hugging Face's (random weights from small configs, no download), both ways; its counts
against the built models and transformers' own; and what it does through the package: sentence embeddings of
a run or Hugging Face folder, and fine-tuning a text classifier from one."""

import json

import pytest
import torch
import torch.nn.functional as F

import aiayn
from aiayn import recipes
from aiayn.analysis import counts, measure, parameter_table
from aiayn.convert.to_hf import to_hf
from aiayn.data.wordpiece import WordPieceTokenizer
from aiayn.models.bert import BERT, BertConfig
from aiayn.models.roberta import RoBERTa, RobertaConfig
from aiayn.pipelines.textclass import load_classifier
from aiayn.recipes.textclass import date_halves

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")  # see conftest.py

QUIET = {"progress": False, "verbose": False}
PAD = 1  # RoBERTa's <pad>; <s> is 0, </s> 2


def roberta_config(**overrides):
    cfg = {"vocab_size": 120, "hidden_size": 60, "num_hidden_layers": 3, "num_attention_heads": 5,
           "intermediate_size": 96, "max_position_embeddings": 20, "type_vocab_size": 1, "layer_norm_eps": 1e-5,
           "initializer_range": 0.2}
    cfg.update(overrides)
    return transformers.RobertaConfig(**cfg)


def randomized(model):
    """Every bias and norm gain away from its 0/1 start (matrices keep their random initialisation), so a
    dropped or mixed-up one shows; works for theirs and ours."""
    with torch.no_grad():
        seen = set()
        for t in model.state_dict(keep_vars=True).values():
            if t.is_floating_point() and t.dim() == 1 and id(t) not in seen:
                seen.add(id(t))  # a tied bias once
                t.add_(torch.randn_like(t) * 0.2)
    return model.eval()


def batch(side):
    """Two rows, the second padded on the ``side``: ``(ids, attention mask)``, the mask ``ids != <pad>``."""
    long, short = [0, 7, 8, 9, 10, 11, 12, 2], [0, 5, 6, 2]
    pads = [PAD] * (len(long) - len(short))
    ids = torch.tensor([long, short + pads if side == "right" else pads + short])
    return ids, (ids != PAD).long()


def close(a, b):
    torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


# --- Hugging Face -> ours ----------------------------------------------------------------------------------


@pytest.mark.parametrize("side", ["right", "left"])
def test_hidden_states_and_pooler_equal_roberta_model_on_a_padded_batch(side):
    torch.manual_seed(0)
    hf = randomized(transformers.RobertaModel(roberta_config()))
    ours = aiayn.from_hf(hf)
    assert type(ours) is RoBERTa and isinstance(ours, BERT) and isinstance(ours.cfg, BertConfig)
    cfg = ours.cfg
    assert (cfg.pad_id, cfg.cls_id, cfg.sep_id, cfg.mask_id, cfg.head) == (1, 0, 2, 119, "none")  # <mask> last
    ids, mask = batch(side)
    with torch.no_grad():
        expected = hf(input_ids=ids, attention_mask=mask)
        hidden = ours(ids, attention_mask=mask)
        default = ours(ids)  # the mask from pad_id
    real = mask.bool()
    close(hidden[real], expected.last_hidden_state[real])
    close(default[real], hidden[real])
    if side == "right":  # the pooler reads position 0, a real token only with right padding
        close(ours.pooled(hidden), expected.pooler_output)


def test_positions_count_real_tokens_from_pad_id_so_left_padding_changes_nothing():
    torch.manual_seed(0)
    ours = aiayn.from_hf(randomized(transformers.RobertaModel(roberta_config())))
    right, _ = batch("right")
    left, _ = batch("left")
    assert ours.position_ids(right).tolist() == [[2, 3, 4, 5, 6, 7, 8, 9], [2, 3, 4, 5, 1, 1, 1, 1]]
    assert ours.position_ids(left).tolist() == [[2, 3, 4, 5, 6, 7, 8, 9], [1, 1, 1, 1, 2, 3, 4, 5]]
    with torch.no_grad():
        alone = ours(torch.tensor([[0, 5, 6, 2]]))[0]
        close(ours(right)[1, :4], alone)
        close(ours(left)[1, 4:], alone)


@pytest.mark.parametrize("act", ["gelu", "gelu_new"])
def test_masked_lm_logits_equal_roberta_for_masked_lm(act):
    # RobertaLMHead applies the erf GELU whatever hidden_act is: gelu_new moves the encoder, not the head
    torch.manual_seed(0)
    hf = randomized(transformers.RobertaForMaskedLM(roberta_config(hidden_act=act)))
    ours = aiayn.from_hf(hf)
    assert ours.cfg.head == "mlm" and ours.mlm.tokens.weight is ours.embed.tokens.weight
    assert not ours.pooler.weight.any()  # RobertaForMaskedLM has none; ours is unused
    for side in ("right", "left"):
        ids, mask = batch(side)
        with torch.no_grad():
            expected = hf(input_ids=ids, attention_mask=mask).logits
            got = ours.mlm_logits(ours(ids, attention_mask=mask))
        close(got[mask.bool()], expected[mask.bool()])


def test_classification_logits_equal_roberta_for_sequence_classification_in_eval_and_in_training():
    torch.manual_seed(0)
    hf = randomized(transformers.RobertaForSequenceClassification(roberta_config(num_labels=3)))
    ours = aiayn.from_hf(hf)
    assert ours.cfg.head == "classification" and ours.cfg.num_labels == 3
    torch.testing.assert_close(ours.pooler.weight, hf.classifier.dense.weight, atol=0, rtol=0)
    ids, mask = batch("right")
    with torch.no_grad():
        close(ours.classify(ours(ids, attention_mask=mask)), hf(input_ids=ids, attention_mask=mask).logits)
    # in training too: its dropout falls on the <s> state before the dense layer and again after the tanh,
    # the same draws in the same order as RobertaClassificationHead's
    with torch.no_grad():
        hidden = ours(ids, attention_mask=mask)
        ours.train(), hf.classifier.train()
        torch.manual_seed(1)
        got = ours.classify(hidden)
        torch.manual_seed(1)
        expected = hf.classifier(hidden)
    close(got, expected)
    assert not torch.allclose(got, ours.eval().classify(hidden))


@pytest.mark.parametrize(("cls", "said"), [("RobertaForTokenClassification", "RobertaForTokenClassification cannot"),
                                         ("RobertaForCausalLM", "is_decoder=True"),
                                         ("RobertaForQuestionAnswering", "RobertaForQuestionAnswering cannot")])
def test_roberta_heads_we_do_not_compute_are_refused(cls, said, tmp_path):
    model = getattr(transformers, cls)(roberta_config(num_labels=3, is_decoder=cls == "RobertaForCausalLM"))
    with pytest.raises(ValueError, match=said):
        aiayn.from_hf(model)
    model.save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=said):
        aiayn.from_hf(tmp_path)


@pytest.mark.parametrize(("field", "value", "said"), [("position_embedding_type", "relative_key",
                                                       "position_embedding_type='relative_key'"),
                                                      ("pad_token_id", None, "pad_token_id=None"),
                                                      ("hidden_act", "mish", "hidden_act='mish'")])
def test_configs_we_cannot_express_are_refused_by_name(field, value, said, tmp_path):
    transformers.RobertaModel(roberta_config()).save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, field: value}))
    with pytest.raises(ValueError, match=said):
        aiayn.from_hf(tmp_path)


def test_a_config_that_claims_other_sizes_than_its_weights_is_refused_before_building(tmp_path):
    transformers.RobertaForMaskedLM(roberta_config()).save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "vocab_size": 10_000_000}))
    with pytest.raises(ValueError, match=r"config\.json wants \(.*\), from its vocab_size=10000000"):
        aiayn.from_hf(tmp_path)


def test_the_config_refuses_next_sentence_prediction_and_too_few_positions():
    with pytest.raises(ValueError, match=r"head='pretraining'.*RoBERTa dropped"):
        RobertaConfig(head="pretraining")
    with pytest.raises(ValueError, match=r"head='pretraining'"):
        aiayn.build("roberta-tiny", head="pretraining")
    with pytest.raises(ValueError, match=r"head='nsp' must be one of \('none', 'mlm', 'classification'\)"):
        RobertaConfig(head="nsp")
    with pytest.raises(ValueError, match=r"max_len=2 must be at least pad_id \+ 2 = 3"):
        RobertaConfig(max_len=2)
    assert RobertaConfig().max_tokens == 512 and aiayn.preset("roberta-tiny").max_tokens == 129
    model = aiayn.build("roberta-tiny", max_len=6, n_layers=1)
    model(torch.tensor([[2, 7, 7, 7, 3, 0, 0]]))  # five real tokens fit in six positions from pad_id 0
    with pytest.raises(ValueError, match=r"a row of 6 tokens; this RoBERTa reads at most max_len - pad_id - 1 = 5"):
        model(torch.tensor([[2, 7, 7, 7, 7, 3]]))
    with pytest.raises(ValueError, match="no next-sentence prediction head"):
        model.nsp_logits(torch.zeros(1, 3, 128))
    with pytest.raises(ValueError, match="head='mlm'; build it with head='classification'"):
        model.classify(torch.zeros(1, 3, 128))


# --- ours -> Hugging Face ----------------------------------------------------------------------------------

AUTO = {"none": "AutoModel", "mlm": "AutoModelForMaskedLM", "classification": "AutoModelForSequenceClassification"}


@pytest.mark.parametrize("head", AUTO)
def test_export_loads_in_transformers_with_the_same_outputs_and_comes_back_unchanged(head, tmp_path):
    torch.manual_seed(0)
    ours = randomized(aiayn.build("roberta-tiny", vocab_size=120, max_len=20, d_model=60, n_heads=5, n_layers=3,
                                  d_ff=96, head=head, num_labels=3, activation="gelu_tanh"))
    folder = to_hf(ours, tmp_path / "hf")
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == "roberta" and config["pad_token_id"] == 0
    hf, info = getattr(transformers, AUTO[head]).from_pretrained(folder, output_loading_info=True)
    assert type(hf).__name__ == config["architectures"][0] and not any(info.values()), info
    hf.eval()
    hf.save_pretrained(folder / "saved")  # we write what save_pretrained writes
    from safetensors.torch import load_file

    mine, theirs = load_file(folder / "model.safetensors"), load_file(folder / "saved" / "model.safetensors")
    assert sorted(mine) == sorted(theirs) and all(torch.equal(mine[k], theirs[k]) for k in mine)
    ids = torch.tensor([[2, 7, 8, 9, 10, 3], [0, 0, 2, 5, 6, 3]])  # left padding: pad_id 0
    mask = (ids != 0).long()
    with torch.no_grad():
        hidden, out = ours(ids, attention_mask=mask), hf(input_ids=ids, attention_mask=mask)
    real = mask.bool()
    if head == "none":
        close(hidden[real], out.last_hidden_state[real])
    elif head == "mlm":
        close(ours.mlm_logits(hidden)[real], out.logits[real])
    else:
        close(ours.classify(hidden[:1]), out.logits[:1])  # row 0 begins with <s>; row 1 with padding
    back = aiayn.from_hf(folder)
    assert type(back) is RoBERTa and back.cfg == ours.cfg
    skip = {"pooler.weight", "pooler.bias"} if head == "mlm" else set()  # RobertaForMaskedLM has no pooler
    assert back.state_dict().keys() == ours.state_dict().keys()
    for key in ours.state_dict().keys() - skip:
        assert torch.equal(back.state_dict()[key], ours.state_dict()[key]), key


# --- counts ------------------------------------------------------------------------------------------------


def test_roberta_base_and_large_count_what_transformers_builds():
    # roberta-base's config.json: 514 positions, one segment (RobertaConfig()'s defaults are BERT's 512 and 2,
    # 768 parameters fewer)
    for name, sizes, published in (("roberta-base", {}, 124_645_632),
                                   ("roberta-large", {"hidden_size": 1024, "num_hidden_layers": 24,
                                                      "num_attention_heads": 16, "intermediate_size": 4096},
                                    355_359_744)):
        with torch.device("meta"):
            theirs = transformers.RobertaModel(transformers.RobertaConfig(max_position_embeddings=514,
                                                                         type_vocab_size=1, **sizes))
            built = aiayn.build(name)
        assert counts(name).total_parameters == published == aiayn.count_parameters(built), name
        assert sum(p.numel() for p in theirs.parameters()) == published, name


@pytest.mark.parametrize("head", ["none", "mlm", "classification"])
def test_tiny_counts_equal_the_built_model_part_by_part_and_the_measured_multiply_adds(head):
    model = aiayn.build("roberta-tiny", head=head, num_labels=3)
    formula = counts(model.cfg, seq_len=24, batch=2)
    table = parameter_table(model.cfg)
    assert formula.total_parameters == table.pop("total") == aiayn.count_parameters(model)
    assert formula.parameters == table
    measured = measure(model, seq_len=24, batch=2)
    assert measured.parameters == formula.parameters and measured.macs == formula.macs
    assert counts("roberta-base").macs == counts("roberta-base", seq_len=512).macs  # its longest input


# --- through the package -----------------------------------------------------------------------------------

TEXTS = ["the third of march", "december 24, 2011", "a friday in june, the twelfth", "may"]


@pytest.fixture(scope="module")
def wordpiece():
    return WordPieceTokenizer.train(date_halves(300, seed=1)[0], vocab_size=200)


def tiny(tok, **fields):
    """roberta-tiny for ``tok`` (its specials are the preset's), smaller, with biases and gains moved."""
    torch.manual_seed(0)
    cfg = aiayn.preset("roberta-tiny", vocab_size=tok.vocab_size, d_model=32, n_heads=2, d_ff=64, **fields)
    assert (cfg.pad_id, cfg.cls_id, cfg.sep_id, cfg.mask_id) == (tok.pad_id, tok.cls_id, tok.sep_id, tok.mask_id)
    return randomized(aiayn.build(cfg))


@pytest.mark.parametrize("kind", ["run", "hf"])
def test_a_roberta_folder_embeds_as_transformers_mean_pooled_by_hand(kind, wordpiece, tmp_path):
    model = tiny(wordpiece, head="none")
    folder = tmp_path / kind
    model.save_pretrained(folder, format="aiayn" if kind == "run" else "hf")
    wordpiece.save(folder / "tokenizer.json")
    p = aiayn.pipeline(folder)
    assert p.task == "feature-extraction" and type(p.model) is RoBERTa
    got = p.embed(TEXTS)
    hf = transformers.RobertaModel.from_pretrained(to_hf(model, tmp_path / "reference")).eval()
    ids, _, mask = wordpiece.batch(TEXTS)
    assert not mask.all()  # padded on the right
    with torch.no_grad():
        hidden = hf(input_ids=ids, attention_mask=mask).last_hidden_state
    by_hand = torch.stack([hidden[i, mask[i].bool()].mean(0) for i in range(len(TEXTS))])
    close(got, F.normalize(by_hand, dim=-1))
    close(p.embed(TEXTS[2]), got[2])


@pytest.mark.parametrize("kind", ["run", "hf"])
def test_textclass_fine_tunes_a_roberta_into_a_roberta_classifier(kind, wordpiece, tmp_path):
    source = tiny(wordpiece)  # a masked LM, as pre-training leaves it
    folder = tmp_path / "source"
    source.save_pretrained(folder, format="aiayn" if kind == "run" else "hf")
    wordpiece.save(folder / "tokenizer.json")
    run = recipes.train("textclass", init_from=str(folder), freeze=-1, n_examples=200, steps=3, warmup=1,
                        eval_every=0, batch_size=8, out=str(tmp_path / "runs"), **QUIET)["run"]
    model, tok, classes = load_classifier(run)
    assert type(model) is RoBERTa and type(model.cfg) is RobertaConfig
    assert model.cfg.head == "classification" and model.cfg.num_labels == 2 and model.cfg.d_model == 32
    start, tuned = source.state_dict(), model.state_dict()
    for name, value in tuned.items():  # the body is the source's, frozen; the new head learnt
        if name.startswith(("embed.", "encoder.")):
            assert torch.equal(value, start[name]), name
    assert not torch.equal(tuned["pooler.weight"], start["pooler.weight"])
    ids, _, mask = tok.batch(TEXTS)
    with torch.no_grad():
        probs = model.classify(model(ids, attention_mask=mask)).softmax(-1)
    out = aiayn.pipeline(run).classify(TEXTS, top=1)
    assert [o["top"][0]["class"] for o in out] == [classes[int(i)] for i in probs.argmax(-1)]
    assert [o["top"][0]["probability"] for o in out] == pytest.approx(probs.max(-1).values.tolist(), abs=1e-5)
