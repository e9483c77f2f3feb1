"""Our GPT with Llama's switches against Hugging Face's LlamaForCausalLM and MistralForCausalLM (random weights
from small configs, no download): grouped heads, tied and untied outputs, Llama 3.1's rope scaling, biases, and
Mistral's sliding window shorter than the sequence."""

import pytest
import torch

import aiayn

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.parity

BASE = {"vocab_size": 97, "hidden_size": 48, "intermediate_size": 80, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64, "rms_norm_eps": 1e-6,
        "initializer_range": 0.2, "bos_token_id": 1, "eos_token_id": 96, "pad_token_id": 0}
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 16}


def hf_model(kind="llama", **overrides):
    cfg = {**BASE, **{k: dict(v) if isinstance(v, dict) else v for k, v in overrides.items()}}  # HF edits dicts
    torch.manual_seed(0)
    if kind == "mistral":
        model = transformers.MistralForCausalLM(transformers.MistralConfig(**cfg))
    else:
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**cfg))
    with torch.no_grad():  # norms away from 1 and biases away from 0, so a swapped key would show
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.2)
    return model.eval()


CASES = {
    "grouped-untied": ("llama", {}),
    "tied-llama3-rope": ("llama", {"tie_word_embeddings": True, "rope_theta": 500000.0, "rope_scaling": LLAMA3}),
    "multi-query-bias": ("llama", {"num_key_value_heads": 1, "attention_bias": True, "mlp_bias": True}),
    "mistral-window": ("mistral", {"sliding_window": 5}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_logits_equal_hugging_face(case):
    kind, overrides = CASES[case]
    hf = hf_model(kind, **overrides)
    ours = aiayn.from_hf(hf)
    assert ours.cfg.n_kv_heads == hf.config.num_key_value_heads
    ids = torch.randint(0, 97, (3, 17))
    with torch.no_grad():
        torch.testing.assert_close(ours(ids), hf(ids).logits, atol=1e-4, rtol=1e-4)


def test_converted_config_carries_every_switch():
    cfg = aiayn.from_hf(hf_model(**CASES["tied-llama3-rope"][1])).cfg
    assert (cfg.positional, cfg.norm, cfg.activation, cfg.bias, cfg.tie_output) == ("rope", "rmsnorm", "swiglu",
                                                                                   False, True)
    assert cfg.rope_theta == 500000.0 and cfg.rope_scaling == LLAMA3 and cfg.layer_norm_eps == 1e-6
    assert aiayn.from_hf(hf_model("mistral", sliding_window=5)).cfg.attention_window == 5


PROMPTS = [[5, 6, 7, 8, 9, 10, 11, 12], [13, 14], [15, 16, 17, 18, 19]]


def padded(prompts, pad=0):
    n = max(map(len, prompts))
    ids = torch.tensor([[pad] * (n - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (n - len(p)) + [1] * len(p) for p in prompts])
    return ids, mask


@pytest.mark.parametrize("case", ["grouped-untied", "mistral-window"])
def test_left_padded_batch_gives_the_logits_of_each_prompt_alone(case):
    kind, overrides = CASES[case]
    hf = hf_model(kind, **overrides)
    ours = aiayn.from_hf(hf)
    ids, mask = padded(PROMPTS)
    n = ids.size(1)
    with torch.no_grad():
        got = ours(ids, attention_mask=mask)
        for i, p in enumerate(PROMPTS):
            alone = hf(torch.tensor([p])).logits[0]
            torch.testing.assert_close(got[i, n - len(p):], alone, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("case", ["grouped-untied", "tied-llama3-rope", "mistral-window"])
def test_greedy_generate_equals_hugging_face_for_a_left_padded_batch(case):
    kind, overrides = CASES[case]
    hf = hf_model(kind, **overrides)
    ours = aiayn.from_hf(hf)
    ids, mask = padded(PROMPTS)
    kwargs = {"max_new_tokens": 12, "do_sample": False, "pad_token_id": 0, "eos_token_id": 96}
    expected = hf.generate(ids, attention_mask=mask, **kwargs)
    got = ours.generate(ids, attention_mask=mask, **kwargs)
    assert got.tolist() == expected.tolist()
    assert len({tuple(row[ids.size(1):]) for row in got.tolist()}) == 3  # the rows really differ


@pytest.mark.parametrize("beams", [1, 3])
def test_a_config_without_an_end_token_generates_to_its_length_as_hugging_face_does(beams, tmp_path):
    hf = hf_model(eos_token_id=None)
    with torch.no_grad():  # make the last id likely: it was taken for the end token before
        hf.lm_head.weight[96] = hf.lm_head.weight[10] * 1.5
    ours = aiayn.from_hf(hf)
    assert ours.cfg.eos_id is None and ours.cfg.stop_ids == ()
    ids = torch.tensor([[5, 6, 7, 8], [9, 10, 11, 12]])
    expected = hf.generate(ids, max_new_tokens=10, do_sample=False, num_beams=beams, pad_token_id=0)
    got = ours.generate(ids, max_new_tokens=10, num_beams=beams, pad_token_id=0)
    assert got.tolist() == expected.tolist() and got.size(1) == 14 and 96 in got[:, 4:]
    aiayn.to_hf(ours, tmp_path)  # and the exported config says none either
    assert transformers.AutoConfig.from_pretrained(tmp_path).eos_token_id is None


@pytest.mark.parametrize("beams", [1, 3])
def test_several_end_tokens_end_rows_where_hugging_face_ends_them(beams):
    # Llama 3.1's chat models list three ends; generation stops at any of them. The two extra ends are tokens the
    # model produces part-way through rows 0 and 2 when only 96 ends, so both rows must stop earlier.
    ids, mask = padded(PROMPTS)
    kwargs = {"max_new_tokens": 12, "do_sample": False, "num_beams": beams, "pad_token_id": 0}
    free = hf_model().generate(ids, attention_mask=mask, eos_token_id=96, **kwargs)[:, ids.size(1):]
    ends = [96, int(free[0, 4]), int(free[2, 6])]
    hf = hf_model(eos_token_id=ends)
    ours = aiayn.from_hf(hf)
    assert ours.cfg.eos_id == 96 and ours.cfg.stop_ids == tuple(ends[1:])
    expected = hf.generate(ids, attention_mask=mask, **kwargs)  # its generation config holds the three
    got = ours.generate(ids, attention_mask=mask, **kwargs)
    assert got.tolist() == expected.tolist()
    new = got[:, ids.size(1):]
    assert new.tolist() != free[:, : new.size(1)].tolist() or new.size(1) < free.size(1)  # the ends changed it
    assert ours.generate(ids, attention_mask=mask, eos_token_id=ends, **kwargs).tolist() == expected.tolist()


def test_unsupported_configs_and_bad_keys_are_named():
    from aiayn.models.gpt import llama as conv

    hf = hf_model()
    config, tensors = hf.config.to_dict(), dict(hf.state_dict())
    with pytest.raises(ValueError, match="hidden_act='gelu'"):
        conv.convert({**config, "hidden_act": "gelu"}, tensors)
    with pytest.raises(ValueError, match="rope type 'dynamic'"):
        conv.convert({**config, "rope_parameters": {"rope_type": "dynamic", "factor": 2.0}}, tensors)
    with pytest.raises(ValueError, match="attention_bias=True and mlp_bias=False"):
        conv.convert({**config, "attention_bias": True}, tensors)
    # a hub config.json's llama3 scaling without original_max_position_embeddings: transformers takes
    # max_position_embeddings, and so do we; a missing factor is named
    scaling = {k: v for k, v in LLAMA3.items() if k != "original_max_position_embeddings"}
    old_style = {k: v for k, v in config.items() if k != "rope_parameters"}
    assert conv.config({**old_style, "rope_scaling": scaling}).rope_scaling == {**scaling,
                                                                               "original_max_position_embeddings": 64}
    with pytest.raises(ValueError, match=r"type 'llama3' needs \['factor'\]"):
        conv.config({**old_style, "rope_scaling": {k: v for k, v in scaling.items() if k != "factor"}})
    with pytest.raises(ValueError, match=r"unexpected keys.*model\.layers\.7"):
        conv.convert(config, {**tensors, "model.layers.7.input_layernorm.weight": torch.ones(48)})
    bad = {**tensors, "model.layers.0.self_attn.k_proj.weight": torch.zeros(48, 48)}  # 4 kv heads, not 2
    with pytest.raises(ValueError, match=r"misshapen.*decoder\.layers\.0\.self_attn\.in_proj\.weight"):
        conv.convert(config, bad)


# Export: our GPT with Llama's switches -> a Hugging Face folder that transformers and aiayn.from_hf both load.
OURS = {"vocab_size": 97, "max_len": 64, "d_model": 48, "n_heads": 4, "n_kv_heads": 2, "n_layers": 2, "d_ff": 80,
        "dropout": 0.0, "attention_dropout": 0.0, "activation": "swiglu", "layer_norm_eps": 1e-6, "tie_output": False,
        "eos_id": 96, "positional": "rope", "norm": "rmsnorm", "bias": False}
EXPORTS = {
    "grouped-untied": {},
    "tied-llama3-rope": {"tie_output": True, "rope_theta": 500000.0, "rope_scaling": LLAMA3},
    "multi-query-bias": {"n_kv_heads": 1, "bias": True},
    "mistral-window": {"attention_window": 5},
    "not-grouped": {"n_kv_heads": None},
    "chat-ends": {"stop_ids": (7, 9)},  # eos_token_id [96, 7, 9]  # exported as 4 kv heads, read back as not grouped
    # the old "type" key: transformers reads "rope_type" first, so it must be written so or run unscaled
    "llama3-old-key": {"rope_theta": 500000.0, "rope_scaling": {"type" if k == "rope_type" else k: v
                                                                for k, v in LLAMA3.items()}},
}


def our_model(**overrides):
    from aiayn.models.gpt import GPT, GPTConfig

    torch.manual_seed(0)
    model = GPT(GPTConfig(**{**OURS, **overrides}))
    with torch.no_grad():  # norms away from 1 and biases away from 0, so a swapped key would show
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(torch.randn_like(p) * 0.2)
    return model.eval()


@pytest.mark.parametrize("case", list(EXPORTS))
def test_exported_folder_loads_in_transformers_and_back_unchanged(case, tmp_path):
    from aiayn.convert.to_hf import to_hf

    model = our_model(**EXPORTS[case])
    to_hf(model, tmp_path)
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    mistral = "attention_window" in EXPORTS[case]
    assert type(hf).__name__ == ("MistralForCausalLM" if mistral else "LlamaForCausalLM")
    ids = torch.randint(0, 97, (2, 17))  # longer than the window
    with torch.no_grad():
        torch.testing.assert_close(hf(ids).logits, model(ids), atol=1e-4, rtol=1e-4)
    back = aiayn.from_hf(tmp_path)
    assert back.cfg == model.cfg
    theirs, ours = back.state_dict(), model.state_dict()
    assert theirs.keys() == ours.keys() and all(torch.equal(theirs[k], ours[k]) for k in ours)


def test_export_refuses_what_llama_cannot_express_and_leaves_gpt2_to_gpt2(tmp_path):
    import json

    from aiayn.convert.to_hf import to_hf
    from aiayn.models.gpt import GPT, GPTConfig

    for overrides, field in [({"positional": "learned"}, "positional='learned'"),
                             ({"norm": "layernorm"}, "norm='layernorm'"), ({"activation": "gelu"}, "activation='gelu'"),
                             ({"dropout": 0.1}, "dropout=0.1"), ({"attention_window": 5, "bias": True}, "bias=True")]:
        with pytest.raises(ValueError, match=field):
            to_hf(GPT(GPTConfig(**{**OURS, **overrides})), tmp_path)
    gpt2 = GPTConfig(vocab_size=97, max_len=64, d_model=48, n_heads=4, n_layers=2, d_ff=80, eos_id=96)
    for kv in (None, 4):  # as many kv heads as heads is not grouped: still a GPT-2
        to_hf(GPT(GPTConfig(**{**gpt2.__dict__, "n_kv_heads": kv})), tmp_path)
        assert json.loads((tmp_path / "config.json").read_text())["model_type"] == "gpt2"
