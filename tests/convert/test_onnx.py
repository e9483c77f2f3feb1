"""ONNX export (aiayn.convert.onnx) against our own models, run by onnxruntime: the encoder's memory and cross-attention
keys/values, every decoder step with its cache as tensors (against our cached decoding and against recomputing the
prefix), GPT with a past of 0 and more positions, ViT, and greedy tokens through onnxruntime equal to ours on padded
batches. Random weights, tiny sizes; each model is exported once per module."""

import json
import sys

import numpy as np
import pytest
import torch

import aiayn
from aiayn.convert.onnx import SPEC, OnnxGPT, OnnxSeq2Seq, read_spec, session, to_onnx
from aiayn.decoding import greedy

pytest.importorskip("onnxscript")
pytest.importorskip("onnxruntime")  # pip install "aiayn[export]" (the test extra has it)

pytestmark = pytest.mark.usefixtures("one_thread")  # see conftest.py

TOL = 1e-4


def seq2seq_model():
    """A narrowed bart-tiny (learned positions from row 2, LayerNorm on the embeddings, GELU, no output bias,
    decoding from ``</s>``; the Marian layout, sinusoidal, runs in tests/benchmark/test_ort.py) with an untied output
    whose ``</s>`` row is scaled up, so greedy decoding is not degenerate: tokens depend on the source and rows end
    at different steps (checked where it matters)."""
    torch.manual_seed(0)
    model = aiayn.build("bart-tiny", src_vocab_size=24, tgt_vocab_size=24, d_model=32, d_ff=64,
                        n_encoder_layers=1, dropout=0.0, tie_output=False).eval()
    with torch.no_grad():
        model.generator.weight.normal_(0, 1.0)
        model.generator.weight[model.cfg.eos_id] *= 2.5
    return model


def padded_src(cfg):
    src = torch.randint(3, cfg.src_vocab_size, (6, 9))
    src[1, 6:] = src[2, 3:] = cfg.pad_id
    return src


@pytest.fixture(scope="module")
def seq2seq(tmp_path_factory):
    model = seq2seq_model()
    src = padded_src(model.cfg)
    return model, src, to_onnx(model, tmp_path_factory.mktemp("seq2seq"))


@pytest.fixture(scope="module")
def gpt(tmp_path_factory):
    torch.manual_seed(0)
    model = aiayn.build("gpt-tiny", n_layers=2, vocab_size=40, d_model=32, d_ff=64).eval()
    return model, to_onnx(model, tmp_path_factory.mktemp("gpt"))


def run(sess, feed):
    return [torch.from_numpy(a) for a in sess.run(None, {k: np.ascontiguousarray(v) for k, v in feed.items()})]


def empty_past(n_layers, b, h, d):
    return [np.zeros((b, h, 0, d), np.float32)] * (2 * n_layers)


def test_the_encoder_graph_gives_our_memory_and_the_first_step_every_layers_cross_attention_keys_and_values(seq2seq):
    model, src, folder = seq2seq
    mask = (src != model.cfg.pad_id).long()
    [memory] = run(session(folder / "encoder_model.onnx", threads=1), {"input_ids": src.numpy(),
                                                                       "attention_mask": mask.numpy()})
    start = torch.full((src.size(0), 1), model.cfg.bos_id)
    _, *present = run(session(folder / "decoder_model.onnx", threads=1), {
        "input_ids": start.numpy(), "encoder_attention_mask": mask.numpy(), "encoder_hidden_states": memory.numpy()})
    with torch.no_grad():
        expected = model.encode(src)
        torch.testing.assert_close(memory, expected, atol=TOL, rtol=TOL)
        for i, layer in enumerate(model.decoder.layers):  # per layer: decoder key, value, encoder key, value
            k, v = layer.cross_attn.project_kv(expected)
            torch.testing.assert_close(present[4 * i + 2], k, atol=TOL, rtol=TOL)
            torch.testing.assert_close(present[4 * i + 3], v, atol=TOL, rtol=TOL)


@torch.no_grad()
def test_decoder_steps_give_the_logits_of_our_cached_decoding_and_of_recomputing_the_prefix(seq2seq):
    """A first step of three tokens (decoder_model.onnx), then one token at a time (decoder_with_past_model.onnx)."""
    model, src, folder = seq2seq
    cfg = model.cfg
    ort = OnnxSeq2Seq(folder, threads=1)
    mask = (src != cfg.pad_id).numpy()
    tgt = torch.cat([torch.full((src.size(0), 1), cfg.bos_id), torch.randint(3, 24, (src.size(0), 6))], dim=1)
    memory = model.encode(src)
    cache = model.new_cache(tgt.size(1))
    logits, past, cross = ort.first(tgt[:, :3].numpy(), mask, ort.encode(src.numpy()))
    begin = 0
    for end in (3, 4, 5, 6, 7):
        if begin:
            logits, past = ort.step(tgt[:, begin:end].numpy(), mask, past, cross)
        cached = model.decode(tgt[:, begin:end], memory, src, cache=cache)  # (B, end - begin, V)
        torch.testing.assert_close(torch.from_numpy(logits), cached, atol=TOL, rtol=TOL)
        recomputed = model.decode(tgt[:, :end], memory, src)[:, begin:end]
        torch.testing.assert_close(torch.from_numpy(logits), recomputed, atol=TOL, rtol=TOL)
        assert all(p.shape == (src.size(0), cfg.n_heads, end, cfg.d_head) for p in past)
        begin = end


def test_greedy_decoding_through_onnxruntime_gives_our_tokens_on_a_padded_batch(seq2seq):
    model, src, folder = seq2seq
    ours = greedy(model, src, max_len=14)
    ends = [(row == model.cfg.eos_id).nonzero()[:1].flatten().tolist() for row in ours]
    assert len({tuple(e) for e in ends}) > 2 and [] in ends  # rows end at different steps, one never
    assert torch.equal(OnnxSeq2Seq(folder, threads=1).greedy(src, max_len=14), ours)
    generated = model.generate(src, max_new_tokens=14)[:, 1:]  # after the start token, padded after </s>
    assert torch.equal(OnnxSeq2Seq(folder, threads=1).greedy(src, max_len=14), generated)


def test_greedy_decoding_by_default_stops_at_the_positions_the_graphs_hold(tmp_path):
    # the default length, S + 50, is capped at max_len as greedy caps it (it was refused above 32 here)
    torch.manual_seed(0)
    model = aiayn.build("bart-tiny", src_vocab_size=24, tgt_vocab_size=24, d_model=32, d_ff=64, n_encoder_layers=1,
                        n_decoder_layers=1, dropout=0.0, max_len=32).eval()
    src = padded_src(model.cfg)
    assert model.cfg.max_len < src.size(1) + 50
    assert torch.equal(OnnxSeq2Seq(to_onnx(model, tmp_path), threads=1).greedy(src), greedy(model, src))


@torch.no_grad()
def test_gpt_steps_give_the_logits_of_our_cached_forward_and_of_recomputing_from_left_padded_prompts(gpt):
    """A first step of five positions on an empty past, then one at a time; the real positions' logits are
    compared (a padded position's position id is 1 in the graph, as transformers and Optimum give it, 0 in ours:
    its logits are no one's)."""
    model, folder = gpt
    cfg = model.cfg
    ids = torch.randint(0, cfg.vocab_size, (3, 8))
    real = torch.ones(3, 8, dtype=torch.bool)
    real[1, :3] = real[2, :5] = False  # prompts of 5 and 3 tokens padded on the left, to 5 in the first step
    ort = OnnxGPT(folder, threads=1)
    cache = model.new_cache(8)
    past = empty_past(cfg.n_layers, 3, cfg.n_heads, cfg.d_model // cfg.n_heads)
    begin = 0
    for end in (5, 6, 7, 8):
        logits, past = ort.step(ids[:, begin:end].numpy(), real[:, :end].numpy(), past)
        cached = model(ids[:, begin:end], attention_mask=real[:, :end], cache=cache)
        recomputed = model(ids[:, :end], attention_mask=real[:, :end])[:, begin:end]
        keep = real[:, begin:end]
        torch.testing.assert_close(torch.from_numpy(logits)[keep], cached[keep], atol=TOL, rtol=TOL)
        torch.testing.assert_close(torch.from_numpy(logits)[keep], recomputed[keep], atol=TOL, rtol=TOL)
        begin = end


def test_greedy_generation_through_onnxruntime_gives_our_tokens_on_a_left_padded_batch(gpt):
    model, folder = gpt
    prompt = torch.randint(0, model.cfg.vocab_size, (3, 6))
    mask = torch.ones(3, 6, dtype=torch.long)
    mask[1, :2] = mask[2, :4] = 0
    ort = OnnxGPT(folder, threads=1)
    ours = model.generate(prompt, attention_mask=mask, max_new_tokens=10)  # rows end at the config's eos_id
    assert torch.equal(ort.generate(prompt, mask, max_new_tokens=10, eos_id=model.cfg.eos_id), ours)
    eos = int(ours[0, 8])  # a token row 0 makes on its third step: it now ends there
    ended = model.generate(prompt, attention_mask=mask, max_new_tokens=10, eos_token_id=eos)
    assert torch.equal(ort.generate(prompt, mask, max_new_tokens=10, eos_id=eos), ended)
    assert (ended[0, 9:] == eos).all()


def test_the_vit_graph_gives_our_logits_for_any_batch(tmp_path):
    model = aiayn.build("vit-tiny", n_layers=1).eval()
    folder = to_onnx(model, tmp_path)
    images = torch.randn(3, 1, 28, 28)
    (logits,) = run(session(folder / "model.onnx", threads=1), {"pixel_values": images.numpy()})
    with torch.no_grad():
        torch.testing.assert_close(logits, model(images), atol=TOL, rtol=TOL)


def test_the_json_names_every_input_and_output_with_its_type_and_shape(seq2seq, gpt):
    model, _, folder = seq2seq
    spec = json.loads((folder / SPEC).read_text())
    assert spec["family"] == "transformer" and spec["config"]["d_model"] == model.cfg.d_model
    assert "dynamo=True" in spec["exporter"]
    decoder = spec["graphs"]["decoder_with_past"]  # Optimum's names, per layer: decoder key, value, encoder key, value
    n = model.cfg.n_decoder_layers
    assert list(decoder["inputs"]) == ["input_ids", "encoder_attention_mask",
                                       *(f"past_key_values.{i}.{side}.{p}" for i in range(n)
                                         for side in ("decoder", "encoder") for p in ("key", "value"))]
    assert decoder["inputs"]["encoder_attention_mask"] == {"dtype": "int64", "shape": ["batch", "src_len"]}
    assert decoder["outputs"]["present.1.decoder.key"] == {"dtype": "float32", "shape": ["batch", 4, "past + new", 8]}
    assert spec["graphs"]["decoder"]["outputs"]["present.1.encoder.value"]["shape"] == ["batch", 4, "src_len", 8]
    sess = session(folder / decoder["file"], threads=1)
    assert [i.name for i in sess.get_inputs()] == list(decoder["inputs"])
    assert [(o.name, o.shape) for o in sess.get_outputs()] == [(k, v["shape"]) for k, v in decoder["outputs"].items()]
    _, gpt_folder = gpt
    assert read_spec(gpt_folder, "gpt")["graphs"]["model"]["inputs"]["attention_mask"]["shape"] == ["batch",
                                                                                                     "past + new"]


def test_refusals_say_what_was_wrong(tmp_path, gpt, seq2seq, monkeypatch):
    with pytest.raises(ValueError, match="takes a Transformer"):
        to_onnx(aiayn.build("bert-tiny"), tmp_path)
    from aiayn.layers.int8 import quantize

    with pytest.raises(ValueError, match="not a quantized one"):
        to_onnx(quantize(gpt[0]), tmp_path)
    with pytest.raises(ValueError, match="expected 'gpt'"):
        OnnxGPT(seq2seq[2])
    with pytest.raises(FileNotFoundError, match=r"holds no onnx\.json"):
        OnnxSeq2Seq(tmp_path)
    with pytest.raises(ValueError, match="exceed"):
        OnnxGPT(gpt[1]).generate(torch.zeros(1, 250, dtype=torch.long), max_new_tokens=10)
    with pytest.raises(ValueError, match="padded on the left"):
        OnnxGPT(gpt[1]).generate(torch.zeros(1, 3, dtype=torch.long), torch.tensor([[1, 1, 0]]))
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # `import onnxruntime` now raises ImportError
    with pytest.raises(ImportError, match=r'pip install "aiayn\[export\]"'):
        OnnxGPT(gpt[1])


@pytest.mark.parametrize("window", [None, 4], ids=["llama", "mistral-window"])
def test_a_llama_with_grouped_heads_exports_and_generates_our_tokens(window, tmp_path):
    # the cache holds 2 kv heads for 4 query heads; rotary positions, RMSNorm, SwiGLU, no biases
    torch.manual_seed(0)
    model = aiayn.build("llama-tiny", n_layers=2, vocab_size=40, d_model=32, n_heads=4, n_kv_heads=2, d_ff=64,
                        max_len=64, attention_window=window).eval()
    ort = OnnxGPT(to_onnx(model, tmp_path), threads=1)
    prompt = torch.randint(0, 40, (3, 6))
    mask = torch.ones(3, 6, dtype=torch.long)
    mask[1, :2] = mask[2, :4] = 0
    ours = model.generate(prompt, attention_mask=mask, max_new_tokens=10)
    assert torch.equal(ort.generate(prompt, mask, max_new_tokens=10, eos_id=model.cfg.eos_id), ours)
    with pytest.raises(ValueError, match="head='classification' GPT is not exported"):
        to_onnx(aiayn.build("gpt-tiny", head="classification", num_labels=3), tmp_path / "classifier")
