"""A text longer than ``max_len`` is cut keeping its last token: the end-of-text token a GPT classifier reads
(Radford et al. 2018, section 3.3: the transformer's output at the final ``extract`` token), and BERT's
``[CLS] ... [SEP]`` frame; checked against the ids written out by hand and the model's own output on them."""

import pytest
import torch

import aiayn
from aiayn.data import CharTokenizer
from aiayn.data.wordpiece import WordPieceTokenizer
from aiayn.pipelines.textclass import classify_texts, encode
from aiayn.recipes.textclass import date_halves

LONG = "the twenty-third of september in the year two thousand and eleven, a friday"


@pytest.fixture(scope="module")
def wordpiece():
    return WordPieceTokenizer.train(date_halves(300, seed=1)[0] + [LONG], vocab_size=200)


def test_a_bert_text_cut_to_max_len_keeps_cls_first_and_sep_last(wordpiece):
    tok = wordpiece
    full, _ = tok.encode(LONG)
    assert full[0] == tok.cls_id and full[-1] == tok.sep_id and len(full) > 12
    [cut] = encode(tok, [LONG], 8)
    assert cut == [tok.cls_id, *full[1:7], tok.sep_id]  # [CLS], the first six word pieces, [SEP]
    [short] = encode(tok, ["march 3"], 8)
    assert short == tok.encode("march 3")[0] and len(short) <= 8  # nothing to cut: as the tokenizer gives it
    # as the tokenizer's own batch cuts it
    ids, _, mask = tok.batch([LONG], max_len=8)
    assert ids[0].tolist() == cut and mask.all()


@pytest.mark.parametrize("max_len", [5, 12, 40])
def test_a_gpt_text_cut_to_max_len_still_ends_with_its_end_of_text_token(max_len):
    tok = CharTokenizer.train([LONG])
    [cut] = encode(tok, [LONG], max_len)
    text = tok.encode(LONG)
    assert len(text) > 40
    assert cut == [*text[: max_len - 1], tok.eos_id]  # the first max_len - 1 characters, then the end token
    assert encode(tok, ["day"], max_len)[0] == [*tok.encode("day"), tok.eos_id]  # short enough: whole


def test_a_gpt_classifier_of_a_cut_text_answers_what_the_model_says_at_the_end_token(wordpiece):
    # a textclass GPT trained from scratch ends texts with [SEP] (its eos_id) and classifies the state there
    tok = wordpiece
    torch.manual_seed(0)
    model = aiayn.build("gpt-tiny", vocab_size=tok.vocab_size, eos_id=tok.sep_id, pad_id=tok.pad_id,
                        head="classification", num_labels=2, d_model=32, n_layers=2, n_heads=2, d_ff=64).eval()
    full = tok.encode(LONG)[0]
    by_hand = torch.tensor([[*full[:9], tok.sep_id]])  # cut to 10 tokens, the last one [SEP]
    with torch.no_grad():
        want = model.classify(model.features(by_hand)).softmax(-1)[0]
        without_end = model.classify(model.features(torch.tensor([full[:10]]))).softmax(-1)[0]
    assert (want - without_end).abs().max() > 1e-4  # the token read makes a difference here
    [got] = classify_texts(model, tok, ["a", "b"], [LONG], top=2, max_len=10)
    assert [c["class"] for c in got["top"]] == [["a", "b"][i] for i in want.argsort(descending=True).tolist()]
    assert [c["probability"] for c in got["top"]] == pytest.approx(sorted(want.tolist(), reverse=True), abs=1e-6)
