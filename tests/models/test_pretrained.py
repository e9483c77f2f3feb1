"""``from_pretrained`` / ``save_pretrained`` on every model class (aiayn.models.pretrained): a model saved as a
Hugging Face folder opens in ``transformers`` with the same outputs and comes back the same; a run folder, a
Hugging Face folder and a model id (a Hugging Face cache built here: no download) all load; another family's
folder, and a config Hugging Face cannot express, are refused by name. Tiny random models only."""

import shutil

import pytest
import torch

import aiayn
from aiayn.models import BERT, DETR, GPT, Swin, Transformer, ViT

transformers = pytest.importorskip("transformers")
pytestmark = [pytest.mark.parity, pytest.mark.usefixtures("one_thread")]  # see tests/conftest.py


def randomized(model):
    """Biases and norm gains moved off their 0/1 start, so one dropped or mixed up on the way shows."""
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(torch.randn_like(p) * 0.2)
    return model.eval()


def same_state(a, b) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)


def gpt():
    return randomized(aiayn.build("gpt-tiny", vocab_size=61, max_len=32, d_model=32, n_heads=4, n_layers=2, d_ff=64))


# each class: a tiny model, the transformers auto class its folder opens with, and a call of ours and of theirs
# on the same input that should give the same tensor
CASES = {
    "GPT": (GPT, gpt, transformers.AutoModelForCausalLM,
            lambda ours, ids: ours(ids), lambda hf, ids: hf(ids).logits),
    "BERT": (BERT, lambda: randomized(aiayn.build("bert-tiny", vocab_size=61, max_len=32, d_model=32, n_heads=4,
                                                  n_layers=2, d_ff=64, head="none")), transformers.AutoModel,
             lambda ours, ids: ours(ids), lambda hf, ids: hf(input_ids=ids).last_hidden_state),
    "Transformer": (Transformer, lambda: randomized(aiayn.build(
        "bart-tiny", d_model=32, n_heads=4, n_encoder_layers=1, n_decoder_layers=1, d_ff=64, src_vocab_size=61,
        tgt_vocab_size=61, max_len=32, output_bias=True, pad_id=1)), transformers.AutoModelForSeq2SeqLM,
        lambda ours, ids: ours(ids, ids), lambda hf, ids: hf(input_ids=ids, decoder_input_ids=ids).logits),
    "ViT": (ViT, lambda: randomized(aiayn.build("vit-tiny", n_layers=2, num_classes=5)),
            transformers.AutoModelForImageClassification, lambda ours, x: ours(x), lambda hf, x: hf(x).logits),
    "Swin": (Swin, lambda: randomized(aiayn.build("swin-tiny", num_classes=5)),
             transformers.AutoModelForImageClassification, lambda ours, x: ours(x), lambda hf, x: hf(x).logits),
    "DETR": (DETR, lambda: randomized(aiayn.build("detr-tiny", n_encoder_layers=1, backbone_frozen_stages=2)),
             transformers.AutoModelForObjectDetection, lambda ours, x: ours(x)["boxes"],
             lambda hf, x: hf(pixel_values=x).pred_boxes),
}


def example(model):
    """An input ``model`` takes: token ids (ids 2.. so none is padding) or images of its size."""
    cfg = model.cfg
    if hasattr(cfg, "image_size"):
        return torch.randn(2, cfg.in_channels, cfg.image_size, cfg.image_size)
    if isinstance(model, DETR):
        return torch.randn(2, 3, 64, 96)
    vocab = getattr(cfg, "vocab_size", None) or cfg.src_vocab_size
    return torch.randint(2, vocab, (2, 9))


@pytest.mark.parametrize("name", CASES)
def test_save_pretrained_opens_in_transformers_with_the_same_outputs_and_comes_back(name, tmp_path):
    cls, make, auto, ours_of, theirs_of = CASES[name]
    ours = make()
    assert ours.save_pretrained(tmp_path / "hf") == tmp_path / "hf"
    theirs, info = auto.from_pretrained(tmp_path / "hf", output_loading_info=True)
    assert not any(info.values()), info
    x = example(ours)
    with torch.no_grad():
        torch.testing.assert_close(ours_of(ours, x), theirs_of(theirs.eval(), x), atol=1e-5, rtol=1e-5)
    back = cls.from_pretrained(tmp_path / "hf")
    assert type(back) is cls and back.cfg == ours.cfg and not back.training
    same_state(back, ours)


def test_a_run_folder_comes_back_with_its_state_dict(tmp_path):
    model = gpt()
    aiayn.save(model, tmp_path / "run")  # what the recipes write: model.safetensors holding the config
    back = GPT.from_pretrained(tmp_path / "run")
    assert back.cfg == model.cfg and not back.training
    same_state(back, model)
    same_state(GPT.from_pretrained(tmp_path / "run" / "model.safetensors"), model)  # the file itself, too


def test_format_aiayn_keeps_a_config_hugging_face_cannot_express(tmp_path):
    model = randomized(aiayn.build("transformer-tiny", norm_first=True))  # the paper's sinusoids, pre-norm
    with pytest.raises(ValueError, match=r"^norm_first=True cannot be exported to Hugging Face"):
        model.save_pretrained(tmp_path / "hf")
    assert not (tmp_path / "hf").exists()
    model.save_pretrained(tmp_path / "ours", format="aiayn")
    assert sorted(p.name for p in (tmp_path / "ours").iterdir()) == ["model.safetensors"]
    same_state(Transformer.from_pretrained(tmp_path / "ours"), model)
    with pytest.raises(ValueError, match=r"format='onnx': expected one of \('hf', 'aiayn'\)"):
        model.save_pretrained(tmp_path / "x", format="onnx")


def test_another_family_s_folder_is_refused_naming_folder_what_it_holds_and_what_was_asked(tmp_path):
    bert = randomized(aiayn.build("bert-tiny", vocab_size=61, max_len=32, d_model=32, n_heads=4, n_layers=1, d_ff=64))
    bert.save_pretrained(tmp_path / "bert-hf")
    bert.save_pretrained(tmp_path / "bert-run", format="aiayn")
    with pytest.raises(ValueError, match=r"bert-hf holds a Hugging Face 'bert' model, which converts to our BERT, "
                                         r"not a GPT"):
        GPT.from_pretrained(tmp_path / "bert-hf")
    with pytest.raises(ValueError, match=r"bert-run holds an aiayn BERT, not a GPT"):
        GPT.from_pretrained(tmp_path / "bert-run")
    with pytest.raises(FileNotFoundError, match=r"holds neither config.json .* nor model.safetensors"):
        GPT.from_pretrained(tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match=r"empty holds neither"):
        GPT.from_pretrained(tmp_path / "empty")


def test_a_model_id_is_read_from_the_hugging_face_cache(tmp_path, monkeypatch):
    hub_constants = pytest.importorskip("huggingface_hub.constants")
    model = gpt()
    model.save_pretrained(tmp_path / "hf")
    commit = "0123456789abcdef0123456789abcdef01234567"
    root = tmp_path / "hub" / "models--someone--tiny-gpt"  # the layout huggingface_hub keeps
    (root / "refs").mkdir(parents=True)
    (root / "refs" / "main").write_text(commit)
    shutil.copytree(tmp_path / "hf", root / "snapshots" / commit)
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.chdir(tmp_path)  # "someone/tiny-gpt" is no folder here
    same_state(GPT.from_pretrained("someone/tiny-gpt"), model)
    with pytest.raises(ValueError, match=r"holds a Hugging Face 'gpt2' model, which converts to our GPT, not a BERT"):
        BERT.from_pretrained("someone/tiny-gpt")
    with pytest.raises(FileNotFoundError, match=r"someone/absent is not in the Hugging Face cache"):
        GPT.from_pretrained("someone/absent")


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_the_tiny_configs_people_test_with_load_though_their_end_token_is_outside_the_vocabulary(kind, tmp_path):
    """``GPT2Config(vocab_size=1000)`` keeps GPT-2's eos 50256 (and a Llama config Llama 3's 128001): no token the
    model can make. transformers loads and runs such a model; so do we, with no end token, and the same logits."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    if kind == "gpt2":
        hf = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=1000, n_embd=32, n_layer=2, n_head=2,
                                                                  n_positions=64, pad_token_id=1000))
    else:
        hf = transformers.LlamaForCausalLM(transformers.LlamaConfig(
            vocab_size=1000, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=64, bos_token_id=128000, eos_token_id=[128001, 7]))
    hf.eval().save_pretrained(tmp_path)
    model = GPT.from_pretrained(tmp_path)
    assert model.cfg.eos_id == (None if kind == "gpt2" else 7) and model.cfg.stop_ids == ()
    assert model.cfg.pad_id is None
    ids = torch.randint(0, 1000, (2, 9))
    with torch.no_grad():
        torch.testing.assert_close(model(ids), hf(ids).logits, atol=1e-4, rtol=1e-4)
    assert model.generate(ids[:1], max_new_tokens=5, do_sample=False).shape == (1, 14)  # no end token: all 5


def test_auto_model_opens_any_family_s_run_or_hugging_face_folder(tmp_path):
    """aiayn.AutoModel picks the family from the folder as transformers' AutoModel does from config.json; the
    per-family classes still refuse another family's folder."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    gpt = aiayn.build("gpt-tiny", vocab_size=50)
    aiayn.save(gpt, tmp_path / "run" / "model.safetensors")
    loaded = aiayn.AutoModel.from_pretrained(tmp_path / "run")
    assert isinstance(loaded, GPT) and not loaded.training
    assert all(torch.equal(a, b) for a, b in zip(gpt.state_dict().values(), loaded.state_dict().values()))
    for name, hf in (("bert", transformers.BertModel(transformers.BertConfig(
                         vocab_size=60, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=24))),
                     ("xlnet", transformers.XLNetLMHeadModel(transformers.XLNetConfig(
                         vocab_size=60, d_model=16, n_layer=1, n_head=2, d_inner=24)))):
        hf.save_pretrained(tmp_path / name)
        model = aiayn.AutoModel.from_pretrained(tmp_path / name)
        assert type(model).__name__ == {"bert": "BERT", "xlnet": "XLNet"}[name]
    with pytest.raises(ValueError, match="not a GPT"):
        GPT.from_pretrained(tmp_path / "bert")
    with pytest.raises(FileNotFoundError, match=r"neither config\.json"):
        (tmp_path / "empty").mkdir()
        aiayn.AutoModel.from_pretrained(tmp_path / "empty")
    with pytest.raises(TypeError, match="from_pretrained"):
        aiayn.AutoModel()


def test_save_pretrained_of_a_model_loaded_from_a_run_writes_its_tokenizer(tmp_path):
    """A model loaded from a run keeps where it came from: save_pretrained writes the run's tokenizer beside the
    weights (as aiayn export --to hf does), so transformers' AutoTokenizer opens what it wrote."""
    transformers = pytest.importorskip("transformers")
    from aiayn.data import BPETokenizer, date_lines

    tok = BPETokenizer.train(date_lines(300, seed=0), vocab_size=300)
    run = tmp_path / "run"
    aiayn.save(aiayn.build("gpt-tiny", vocab_size=tok.vocab_size, eos_id=tok.eos_id), run / "model.safetensors")
    tok.save(run / "tokenizer.json")
    model = GPT.from_pretrained(run)
    model.save_pretrained(tmp_path / "out")
    theirs = transformers.AutoTokenizer.from_pretrained(tmp_path / "out")
    text = "monday, march 5th, 2019"
    assert theirs(text)["input_ids"] == tok.encode(text)
    assert len(theirs) == len(tok) == tok.vocab_size
    assert theirs.padding_side == "left"  # a language model's batch of prompts, as aiayn generate pads it
    built = aiayn.build("gpt-tiny", vocab_size=50)
    built.save_pretrained(tmp_path / "bare")  # a model built here has no run: weights and config only
    assert not (tmp_path / "bare" / "tokenizer.json").exists()
