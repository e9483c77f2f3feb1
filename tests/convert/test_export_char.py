"""A character-level language model exported to a Hugging Face folder (``aiayn.convert.folder.export``) works from
``transformers`` alone: ``AutoTokenizer`` gives :class:`~aiayn.data.CharTokenizer`'s ids for any text, and
``AutoModelForCausalLM.generate`` continues a prompt (alone, or in a left-padded batch) as aiayn does. A BPE
run's tokenizer goes over as it was. Tiny models trained here for a few seconds."""

import json

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import aiayn
from aiayn.convert.folder import export
from aiayn.data import BPETokenizer, CharTokenizer, date_lines
from aiayn.data.chat import DEFAULT_CHAT_TEMPLATE
from aiayn.data.tokenizer import SPECIALS, is_char_tokenizers_json

transformers = pytest.importorskip("transformers")
pytestmark = [pytest.mark.parity, pytest.mark.usefixtures("one_thread")]  # see tests/conftest.py

LINES = date_lines(200, seed=3)
# unseen characters (<unk>), spaces, newlines, tabs, text spelling a special token, combining accents and
# emoji of several code points (one id per code point, as list(text) splits them), nothing at all
TEXTS = ["march 3, 1999", "  the 3rd \n\n of may\t", "ÄÖÜ? ¿qué? 日本", "<s>1</s> <unk><pad>", "e\u0301 👍🏽 🇫🇷",
         "\r\n", ""]


def run_folder(folder, tok):
    """A language model's run folder as the lm recipe writes it (model.safetensors with its config, and
    tokenizer.json), trained for a few seconds on date lines: enough for greedy decoding to say varied things
    (a model with random weights repeats one token, which any wrong id would repeat as well)."""
    torch.manual_seed(0)
    model = aiayn.build("gpt-tiny", vocab_size=tok.vocab_size, max_len=48, d_model=32, n_heads=4, n_layers=2,
                        d_ff=64, eos_id=tok.eos_id, dropout=0.0)
    ids = torch.tensor(tok.encode("\n".join(LINES)))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(100):
        x = torch.stack([ids[s:s + 33] for s in torch.randint(0, len(ids) - 33, (16,)).tolist()])  # (B, T + 1)
        loss = torch.nn.functional.cross_entropy(model(x[:, :-1]).flatten(0, 1), x[:, 1:].flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    aiayn.save(model, folder)
    tok.save(folder / "tokenizer.json")
    return folder


@pytest.fixture(scope="module")
def char_export(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("char")
    tok = CharTokenizer.train(LINES)
    run = run_folder(tmp / "run", tok)
    return run, export(run, tmp / "hf"), tok


def test_the_folder_holds_tokenizers_files_that_pad_on_the_left(char_export):
    _, out, _ = char_export
    assert not (out / "aiayn_tokenizer.json").exists()
    config = json.loads((out / "tokenizer_config.json").read_text())
    assert config["padding_side"] == "left" and config["split_special_tokens"] is True
    assert [config[f"{r}_token"] for r in ("pad", "bos", "eos", "unk")] == list(SPECIALS)
    data = json.loads((out / "tokenizer.json").read_text())
    assert is_char_tokenizers_json(data)
    assert [t["content"] for t in data["added_tokens"] if t["special"]] == list(SPECIALS)
    assert "tokenizer.json" in (out / "README.md").read_text()


def test_auto_tokenizer_gives_char_tokenizer_s_ids_and_text(char_export):
    _, out, tok = char_export
    hf = transformers.AutoTokenizer.from_pretrained(out)
    assert (hf.pad_token_id, hf.bos_token_id, hf.eos_token_id, hf.unk_token_id) == (0, 1, 2, 3)
    assert len(hf) == tok.vocab_size
    for text in TEXTS + LINES[:5]:
        ids = tok.encode(text)
        assert hf(text)["input_ids"] == ids, text  # no <s> or </s> added, as aiayn adds none
        assert hf.decode(ids) == tok.decode(ids)
    assert 3 in tok.encode(TEXTS[2])  # (the unseen characters are there, and are <unk>)


@settings(max_examples=60, deadline=None)
@given(text=st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=30)
       | st.text(alphabet="ab \n\t<>/s", max_size=30))
def test_tokenizers_gives_encode_s_ids_for_any_text(text):
    tok = CharTokenizer("abc \n<>/s\u0301")
    tokenizer = tok.to_tokenizers()
    assert tokenizer.encode(text, add_special_tokens=False).ids == tok.encode(text)
    assert tokenizer.decode(tok.encode(text), skip_special_tokens=False) == tok.decode(tok.encode(text))
    back = CharTokenizer.from_tokenizers(json.loads(tokenizer.to_str()))
    assert back.itos == tok.itos


def test_from_tokenizers_refuses_another_tokenizer():
    bpe = BPETokenizer.train(LINES, vocab_size=300)
    with pytest.raises(ValueError, match=r"bpe.json is not a character tokenizer in tokenizers' format"):
        CharTokenizer.from_tokenizers(bpe.to_json(), "bpe.json")


def test_transformers_generates_what_aiayn_generates_alone_and_left_padded(char_export):
    run, out, tok = char_export
    ours = aiayn.load(run).eval()
    hf_tok = transformers.AutoTokenizer.from_pretrained(out)
    theirs = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    prompts = ["the 3rd of", "12/0", "Ä ?"]  # of different lengths; the last with unseen characters

    def aiayn_greedy(prompt: str) -> str:
        ids = torch.tensor([tok.encode(prompt)])
        new = ours.generate(ids, max_new_tokens=16, do_sample=False)[0, ids.shape[1]:]
        return tok.decode(new)

    def hf_greedy(texts: list[str]) -> list[str]:
        batch = hf_tok(texts, return_tensors="pt", padding=True)
        got = theirs.generate(**batch, max_new_tokens=16, do_sample=False, pad_token_id=hf_tok.pad_token_id)
        return hf_tok.batch_decode(got[:, batch["input_ids"].shape[1]:], skip_special_tokens=True)

    expected = [aiayn_greedy(p) for p in prompts]
    assert len(set(expected)) == len(expected) and len(set("".join(expected))) > 3  # (varied text)
    assert [hf_greedy([p])[0] for p in prompts] == expected
    assert hf_tok(prompts[:2], padding=True)["attention_mask"][1][0] == 0  # the shorter prompt padded on the left
    assert hf_greedy(prompts[:2]) == expected[:2]


def test_a_bpe_run_s_tokenizer_goes_over_as_it_was(tmp_path):
    tok = BPETokenizer.train(LINES, vocab_size=300)
    run = run_folder(tmp_path / "run", tok)
    out = export(run, tmp_path / "hf")
    assert (out / "tokenizer.json").read_bytes() == (run / "tokenizer.json").read_bytes()
    assert json.loads((out / "tokenizer_config.json").read_text()) == {
        "tokenizer_class": "PreTrainedTokenizerFast", "pad_token": "<pad>", "unk_token": "<unk>", "bos_token": "<s>",
        "eos_token": "</s>", "padding_side": "left", "chat_template": DEFAULT_CHAT_TEMPLATE}  # aiayn serve's
    hf = transformers.AutoTokenizer.from_pretrained(out)
    assert all(hf(t)["input_ids"] == tok.encode(t) for t in LINES[:5])
