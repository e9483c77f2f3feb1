"""XLNet's SentencePiece tokenizer (aiayn.data.xlnet_tokenizer) against transformers' XLNetTokenizer reading the same
spiece.model (a small one trained here), and an XLNet folder embedding texts as transformers' model does."""

import io

import pytest
import torch

import aiayn
from aiayn.data import date_lines
from aiayn.data.xlnet_tokenizer import XLNetTokenizer

spm = pytest.importorskip("sentencepiece")
transformers = pytest.importorskip("transformers")

TEXTS = ["monday, march 5th, 2019", "Café naïve résumé, 1,000 apples cost $3,50!", "``quoted'' text  with   spaces",
         "x <mask> y", "ＦＵＬＬ width", "tuesday"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    out = tmp_path_factory.mktemp("xlnet")
    text = date_lines(2000, seed=0) + ["Café naïve résumé, 1,000 apples cost $3,50!", "``quoted'' text"] * 20
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(  # XLNet's order of specials: <unk> <s> </s> <cls> <sep> <pad> <mask> ...
        sentence_iterator=iter(text), model_writer=model, vocab_size=300, model_type="unigram", bos_id=1, eos_id=2,
        unk_id=0, pad_id=-1, control_symbols=["<cls>", "<sep>", "<pad>", "<mask>", "<eod>", "<eop>"],
        minloglevel=2)
    (out / "spiece.model").write_bytes(model.getvalue())
    (out / "tokenizer_config.json").write_text('{"tokenizer_class": "XLNetTokenizer"}')
    return out


def test_the_ids_and_segments_are_transformers_for_texts_and_pairs(folder):
    theirs = transformers.AutoTokenizer.from_pretrained(folder)
    ours = XLNetTokenizer(folder / "spiece.model")
    assert (ours.cls_id, ours.sep_id, ours.pad_id, ours.mask_id) == (theirs.cls_token_id, theirs.sep_token_id,
                                                                    theirs.pad_token_id, theirs.mask_token_id)
    for text in TEXTS:
        want = theirs(text, return_token_type_ids=True)
        assert ours.encode(text) == (want["input_ids"], want["token_type_ids"]), text
        assert ours.decode(want["input_ids"]) == theirs.decode(want["input_ids"], skip_special_tokens=True)
    want = theirs("one day", "two days", return_token_type_ids=True)
    assert ours.encode("one day", "two days") == (want["input_ids"], want["token_type_ids"])
    assert ours.encode("one day")[0][-2:] == [ours.sep_id, ours.cls_id]  # <cls> last: XLNet summarises it


def test_an_xlnet_folder_embeds_as_its_transformers_model_reads(folder):
    torch.manual_seed(0)
    hf = transformers.XLNetModel(transformers.XLNetConfig(vocab_size=300, d_model=32, n_layer=2, n_head=4,
                                                          d_inner=48, dropout=0.0)).eval()
    hf.save_pretrained(folder)
    texts = TEXTS[:3]
    got = aiayn.pipeline(folder).embed(texts)
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    batch = tok(texts, return_tensors="pt", padding=True, return_token_type_ids=True)  # padded on the left
    with torch.no_grad():
        hidden = hf(**batch).last_hidden_state
    mask = batch["attention_mask"][..., None].float()
    want = torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
