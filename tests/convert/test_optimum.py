"""``aiayn export --to onnx`` in the shape Hugging Face's Optimum gives a decoder: ``optimum.onnxruntime``'s
``ORTModelForCausalLM`` loads the folder and its ``generate`` gives our greedy tokens on a left-padded batch (GPT-2
and Llama shapes), the graph's inputs named and typed as Optimum's own exports name and type them; and
``ORTModelForSeq2SeqLM`` gives our greedy translations of a padded batch from an encoder-decoder's three graphs (the
paper's Transformer with interleaved sinusoids, a Marian, a BART).

Optimum (the ``optimum-onnx`` package, ``pip install "optimum-onnx[onnxruntime]"``) needs ``transformers`` < 4.58,
so it lives beside the test extra rather than in it: these tests are skipped where it is absent."""

import json

import pytest
import torch

import aiayn
from aiayn.cli import main

ort_models = pytest.importorskip("optimum.onnxruntime", reason="needs optimum-onnx (transformers < 4.58)")
pytest.importorskip("onnxscript")
pytestmark = [pytest.mark.parity, pytest.mark.usefixtures("one_thread")]

V = 48
SHAPES = {
    "gpt2": {"preset": "gpt-tiny"},
    "llama": {"preset": "llama-tiny", "n_kv_heads": 2},
}


def randomized(model):
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():  # larger than at the start, so that greedy decoding goes somewhere
        for name, p in model.named_parameters():
            if p.dim() > 1:
                p.normal_(0, 0.5, generator=gen)
            elif name.endswith("bias"):
                p.normal_(0, 0.2, generator=gen)
    return model.eval()


@pytest.mark.parametrize("shape", SHAPES)
def test_ort_model_for_causal_lm_generates_our_tokens(shape, tmp_path):
    spec = dict(SHAPES[shape])
    model = randomized(aiayn.build(spec.pop("preset"), vocab_size=V, d_model=32, n_heads=4, n_layers=2, d_ff=64,
                                   max_len=64, eos_id=V - 1, **spec))
    run = tmp_path / "run"
    aiayn.save(model, run)
    assert main(["export", str(run), "--to", "onnx", str(tmp_path / "onnx")]) == 0
    ort = ort_models.ORTModelForCausalLM.from_pretrained(tmp_path / "onnx")
    assert json.loads((tmp_path / "onnx" / "config.json").read_text())["model_type"] == shape
    inputs = {i.name: i.type for i in ort.session.get_inputs()}
    assert {k: inputs[k] for k in ("input_ids", "attention_mask", "position_ids")} == dict.fromkeys(
        ("input_ids", "attention_mask", "position_ids"), "tensor(int64)")
    assert "past_key_values.1.value" in inputs and "present.1.key" in [o.name for o in ort.session.get_outputs()]
    prompt = torch.randint(0, V - 1, (3, 6), generator=torch.Generator().manual_seed(4))
    mask = torch.ones(3, 6, dtype=torch.long)
    mask[1, :2] = mask[2, :4] = 0  # left padding
    ours = model.generate(prompt, attention_mask=mask, max_new_tokens=12, pad_token_id=0)
    theirs = ort.generate(input_ids=prompt, attention_mask=mask, max_new_tokens=12, do_sample=False, pad_token_id=0)
    assert theirs.tolist() == ours.tolist()
    assert len({t for row in ours[:, 6:].tolist() for t in row}) > 3  # not one token over and over


SEQ2SEQ = {
    "paper-interleaved (marian)": ("transformer-tiny", {"positional": "sinusoidal", "pad_id": 0, "bos_id": 0}),
    "marian": ("transformer-tiny", {"positional": "sinusoidal-concat", "activation": "silu", "pad_id": V - 1,
                                    "bos_id": V - 1, "eos_id": 0}),
    "bart": ("bart-tiny", {"output_bias": True}),
}


@pytest.mark.parametrize("name", SEQ2SEQ)
def test_ort_model_for_seq2seq_lm_generates_our_tokens(name, tmp_path):
    preset, options = SEQ2SEQ[name]
    model = randomized(aiayn.build(preset, src_vocab_size=V, tgt_vocab_size=V, d_model=32, n_heads=4, d_ff=64,
                                   n_encoder_layers=2, n_decoder_layers=2, max_len=64, dropout=0.0, **options))
    run = tmp_path / "run"
    aiayn.save(model, run)
    assert main(["export", str(run), "--to", "onnx", str(tmp_path / "onnx")]) == 0
    ort = ort_models.ORTModelForSeq2SeqLM.from_pretrained(tmp_path / "onnx")
    assert sorted(p.name for p in (tmp_path / "onnx").glob("*.onnx")) == [
        "decoder_model.onnx", "decoder_with_past_model.onnx", "encoder_model.onnx"]
    cfg = model.cfg
    gen = torch.Generator().manual_seed(4)
    src = torch.randint(3, V - 2, (3, 7), generator=gen)
    src[:, -1] = cfg.eos_id
    src[1, 4:], src[2, 2:] = cfg.pad_id, cfg.pad_id  # padded on the right, as a tokenizer pads sources
    ours = model.generate(src, max_new_tokens=10)
    theirs = ort.generate(input_ids=src, attention_mask=(src != cfg.pad_id).long(), max_new_tokens=10,
                          do_sample=False, num_beams=1, bad_words_ids=[[cfg.pad_id]])
    assert theirs.tolist() == ours.tolist()
    assert len({tuple(r) for r in ours.tolist()}) > 1  # rows differ: the comparison means something
