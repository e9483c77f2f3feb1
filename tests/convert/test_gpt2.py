"""Our GPT against Hugging Face's GPT2LMHeadModel (random weights from a config, no download)."""

import pytest
import torch

import aiayn
from aiayn.decoding import sample

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.parity


def gpt2(**overrides):
    cfg = {"vocab_size": 97, "n_positions": 64, "n_embd": 48, "n_layer": 3, "n_head": 4, "resid_pdrop": 0.1,
           "embd_pdrop": 0.1, "attn_pdrop": 0.1, "eos_token_id": 96, "bos_token_id": 96, "initializer_range": 0.2}
    cfg.update(overrides)
    torch.manual_seed(0)
    hf = transformers.GPT2LMHeadModel(transformers.GPT2Config(**cfg)).eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if ".ln_" in name or "ln_f" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.2)
    return hf


SIZES = [{}, {"n_embd": 60, "n_head": 5, "n_layer": 2}, {"n_embd": 42, "n_head": 7, "n_layer": 1, "n_inner": 100},
         {"activation_function": "relu", "tie_word_embeddings": False}]


@pytest.mark.parametrize("overrides", SIZES, ids=["small", "five-heads", "seven-heads-n-inner", "relu-untied"])
def test_logits_equal_gpt2(overrides):
    hf = gpt2(**overrides)
    ours = aiayn.from_hf(hf)
    ids = torch.randint(0, 97, (3, 17))
    with torch.no_grad():
        torch.testing.assert_close(ours(ids), hf(ids).logits, atol=1e-4, rtol=1e-4)


def test_left_padded_prompts_give_the_logits_of_each_prompt_alone():
    hf = gpt2()
    ours = aiayn.from_hf(hf)
    prompts = [[5, 6, 7, 8, 9, 10], [11, 12], [13, 14, 15, 16]]
    ids = torch.tensor([[0] * (6 - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (6 - len(p)) + [1] * len(p) for p in prompts])
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        got = ours(ids, attention_mask=mask)
        expected = hf(ids, attention_mask=mask, position_ids=positions).logits
        for i, p in enumerate(prompts):
            alone = hf(torch.tensor([p])).logits[0]
            torch.testing.assert_close(got[i, 6 - len(p):], alone, atol=1e-4, rtol=1e-4)
            torch.testing.assert_close(got[i, 6 - len(p):], expected[i, 6 - len(p):], atol=1e-4, rtol=1e-4)


def test_greedy_generation_equals_generate_for_prompts_of_different_lengths():
    hf = gpt2()
    ours = aiayn.from_hf(hf)
    prompts = [[5, 6, 7, 8, 9, 10], [11, 12], [13, 14, 15, 16]]
    got = sample(ours, prompts, max_new_tokens=20, temperature=0)
    ids = torch.tensor([[96] * (6 - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (6 - len(p)) + [1] * len(p) for p in prompts])
    expected = hf.generate(ids, attention_mask=mask, max_new_tokens=20, do_sample=False, pad_token_id=96,
                           eos_token_id=None)
    for i, p in enumerate(prompts):
        assert got[i] == expected[i, 6 - len(p):].tolist()
    assert len({tuple(g[len(p):]) for g, p in zip(got, prompts)}) == 3  # the rows really differ


def test_batch_one_greedy_generation_through_onednn_products_equals_generate():
    # a product by a matrix of at least ONEDNN_MIN weights takes oneDNN's inner product (aiayn.layers.linear)
    from aiayn.layers.linear import ONEDNN_MIN

    hf = gpt2(vocab_size=2048, n_embd=512, n_inner=2048, n_layer=1, n_head=8, eos_token_id=0, bos_token_id=0)
    assert ONEDNN_MIN <= 512 * 2048
    ours = aiayn.from_hf(hf)
    prompt = torch.randint(0, 2048, (1, 5))
    expected = hf.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=20, do_sample=False,
                           pad_token_id=0, eos_token_id=None)
    assert sample(ours, prompt, max_new_tokens=20, temperature=0).tolist() == expected.tolist()


def test_a_saved_folder_converts_and_bad_keys_are_named(tmp_path):
    hf = gpt2()
    hf.save_pretrained(tmp_path)
    ours = aiayn.from_hf(tmp_path)
    ids = torch.randint(0, 97, (2, 9))
    with torch.no_grad():
        torch.testing.assert_close(ours(ids), hf(ids).logits, atol=1e-4, rtol=1e-4)
    from aiayn.models.gpt import gpt2 as conv

    config, tensors = hf.config.to_dict(), dict(hf.state_dict())
    bad = {**tensors, "transformer.h.0.mlp.c_fc.weight": tensors["transformer.h.0.mlp.c_fc.weight"][:, :5]}
    with pytest.raises(ValueError, match=r"misshapen.*decoder\.layers\.0\.ff\.fc1\.weight"):
        conv.convert(config, bad)
    with pytest.raises(ValueError, match=r"unexpected keys.*transformer\.h\.9"):
        conv.convert(config, {**tensors, "transformer.h.9.ln_1.weight": torch.ones(48)})
    with pytest.raises(ValueError, match="scale_attn_by_inverse_layer_idx"):
        conv.convert({**config, "scale_attn_by_inverse_layer_idx": True}, tensors)
    with pytest.raises(ValueError, match=r"embd_pdrop=0\.3 and resid_pdrop=0\.1 must agree"):  # one dropout here
        conv.convert({**config, "embd_pdrop": 0.3, "resid_pdrop": 0.1}, tensors)
