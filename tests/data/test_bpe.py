import ast
import json
from pathlib import Path

import pytest

from aiayn.data.batching import seq2seq_batch
from aiayn.data.bpe import BPETokenizer, load_tokenizer, train_tokenizers
from aiayn.data.synthetic import make_pairs
from aiayn.data.tokenizer import SPECIALS, CharTokenizer
from shared import DATA

CMN = DATA / "tatoeba-cmn-eng" / "cmn.txt"

SENTENCES = [
    "Ein Mann fährt Fahrrad.",
    "Zwei junge Männer spielen Fußball auf einer Straße.",
    "A man in an orange hat starring at something.",
    "我们明天去公园吧。",
    "他說：「你好！」",
    "  leading, trailing and  double spaces  ",
    "tab\there, newline\nthere, CRLF\r\n",
    "emoji 😀 and math 𝔘 and zero-width\u200bspace",
    "text that contains <s>, </s>, <pad> and <unk> literally",
    "",
]


@pytest.fixture(scope="module")
def pairs():
    """Up to 2,000 English-Chinese pairs spread over cmn.txt (it is sorted short to long), read with plain Python."""
    if not CMN.is_file():
        pytest.skip(f"{CMN} is absent")
    lines = CMN.read_text(encoding="utf-8").split("\n")[:-1]
    return [tuple(line.split("\t")[:2]) for line in lines[:: max(1, len(lines) // 2000)]]


@pytest.fixture(scope="module")
def made_up():
    """2,000 pairs the tests make themselves: dates written in English beside made-up Chinese sentences of
    the characters below (no shared data needed; no "ä" anywhere, which one test relies on)."""
    han = "我们你他她是的不在有人这中大为上个国和地到以说时要就出会可也对生能而子那得于着下自之年过发后作里"
    dates, _ = make_pairs("dates", 2000, 1, seed=0)
    return [(en, "".join(han[(7 * i + 3 * j) % len(han)] for j in range(4 + i % 9)) + "。")
            for i, (en, _) in enumerate(dates)]


@pytest.fixture(scope="module")
def tok(made_up):
    return BPETokenizer.train([s for p in made_up for s in p], vocab_size=1000)


@pytest.fixture(scope="module")
def cmn_tok(pairs):
    return BPETokenizer.train([s for p in pairs for s in p], vocab_size=1000)


@pytest.mark.parametrize("text", SENTENCES)
def test_round_trip_exact(tok, text):
    ids = tok.encode(text)
    assert all(isinstance(i, int) and 0 <= i < tok.vocab_size for i in ids)
    assert tok.decode(ids) == text


def test_round_trip_of_languages_never_seen_in_training():
    tok = BPETokenizer.train(["aaa bbb aaa bbb"] * 10, vocab_size=300)
    for text in SENTENCES:
        assert tok.decode(tok.encode(text)) == text
    assert tok.unk_id not in tok.encode("".join(SENTENCES))


def test_chinese_characters_seen_in_training_are_never_unk(cmn_tok, pairs):
    tok = cmn_tok
    chars = sorted({c for _, zh in pairs for c in zh})
    assert len(chars) > 500  # the sample really holds many distinct characters
    for c in chars:
        ids = tok.encode(c)
        assert tok.unk_id not in ids and tok.decode(ids) == c
    # each Chinese sentence of the training set, and a character it never saw (U+9F98)
    for _, zh in pairs:
        assert tok.unk_id not in tok.encode(zh)
    assert tok.decode(tok.encode("龘")) == "龘"


def test_merges_compress_training_text(cmn_tok, pairs):
    """BPE starts from bytes and only merges: never more tokens than UTF-8 bytes, and far fewer overall."""
    tok = cmn_tok
    n_bytes = n_tokens = 0
    for en, zh in pairs[:300]:
        for s in (en, zh):
            ids = tok.encode(s)
            assert len(ids) <= len(s.encode("utf-8"))
            n_bytes += len(s.encode("utf-8"))
            n_tokens += len(ids)
    assert n_tokens < 0.6 * n_bytes


def test_specials_and_decode_conventions(tok):
    for i, s in enumerate(SPECIALS):
        assert tok.tokenizer.id_to_token(i) == s
    assert (tok.pad_id, tok.bos_id, tok.eos_id, tok.unk_id) == (0, 1, 2, 3)
    ids = tok.encode("Hi.")
    assert not {0, 1, 2, 3} & set(ids)  # encode adds no specials, even for literal "<s>" in the text
    assert not {0, 1, 2, 3} & set(tok.encode("<s> </s> <pad> <unk>"))
    # the same conventions as CharTokenizer: skip <pad>/<s>, stop at </s>, out-of-range ids read <unk>
    assert tok.decode([1, *ids, 2, *tok.encode("junk"), 0]) == "Hi."
    assert tok.decode([0, 0, *ids, 0]) == "Hi."
    assert tok.decode([*ids, tok.vocab_size + 5]) == "Hi.<unk>"
    char = CharTokenizer.train(["Hi."])
    assert char.decode([1, *char.encode("Hi."), 2, 5]) == tok.decode([1, *ids, 2, 5])


def test_tokens_label_the_text_they_cover(tok):
    text = "A man in an orange hat, staring at something."
    pieces = tok.tokens(text)
    assert len(pieces) == len(tok.encode(text))
    assert "".join(pieces) == text  # one byte per character: each token covers whole characters
    # a character split over byte tokens (ä never occurs in the training text) labels each piece with it whole
    pieces = tok.tokens("fährt")
    assert len(pieces) == len(tok.encode("fährt")) and pieces.count("ä") == len(tok.encode("ä")) == 2
    assert "".join(p for p in dict.fromkeys(pieces)) == "fährt"


def test_vocab_size_is_respected(pairs):
    texts = [s for p in pairs for s in p]
    for size in (300, 700):
        tok = BPETokenizer.train(texts, vocab_size=size)
        assert tok.vocab_size == len(tok) == size  # enough text to fill it
        assert max(i for s in texts[:200] for i in tok.encode(s)) < size
    # not enough distinct pairs to fill a big vocabulary: it stops short, never over
    small = BPETokenizer.train(["abc abc abc"], vocab_size=5000, min_frequency=1)
    assert 260 < small.vocab_size < 5000
    with pytest.raises(ValueError, match="vocab_size=100"):
        BPETokenizer.train(texts, vocab_size=100)


def test_save_load_gives_identical_ids(tok, made_up, tmp_path):
    path = tmp_path / "run" / "tokenizer.json"
    tok.save(path)
    tok.save(path)  # overwriting is fine and leaves no temporary files
    assert [p.name for p in path.parent.iterdir()] == ["tokenizer.json"]
    assert json.loads(path.read_text(encoding="utf-8"))["model"]["type"] == "BPE"
    loaded = BPETokenizer.load(path)
    assert loaded.vocab_size == tok.vocab_size
    assert loaded.tokenizer.get_vocab() == tok.tokenizer.get_vocab()
    for text in [s for p in made_up[::7] for s in p] + SENTENCES:
        assert loaded.encode(text) == tok.encode(text)
    assert loaded.encode("<s>") == tok.encode("<s>")  # literal specials stay text after loading too


def test_load_tokenizer_dispatches_on_the_file(tok, tmp_path):
    char = CharTokenizer.train(["Ein Mann", "我们"])
    char.save(tmp_path / "char.json")
    tok.save(tmp_path / "bpe.json")
    got_char, got_bpe = load_tokenizer(tmp_path / "char.json"), load_tokenizer(tmp_path / "bpe.json")
    assert isinstance(got_char, CharTokenizer) and got_char.itos == char.itos
    assert isinstance(got_bpe, BPETokenizer) and got_bpe.encode("我们去") == tok.encode("我们去")
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "other.json").write_text('{"model": {"type": "WordPiece"}}')
    (tmp_path / "broken.json").write_text("{not json")
    for name in ("list.json", "other.json", "broken.json"):
        with pytest.raises(ValueError, match=name):
            load_tokenizer(tmp_path / name)


def test_train_tokenizers_joint_and_separate(pairs):
    sample = pairs[:: max(1, len(pairs) // 500)]
    src, tgt = train_tokenizers(sample, kind="bpe", vocab_size=600, joint=True)
    assert src is tgt and src.vocab_size <= 600
    zh = sample[-1][1]
    assert len(src.encode(zh)) < len(zh.encode("utf-8"))
    # separately: the English-side vocabulary learned no Chinese merges, so it spells Chinese byte by byte
    src, tgt = train_tokenizers(sample, kind="bpe", vocab_size=600, joint=False)
    assert src is not tgt
    assert len(src.encode(zh)) == len(zh.encode("utf-8"))
    assert len(tgt.encode(zh)) < len(zh.encode("utf-8"))
    assert src.decode(src.encode(zh)) == zh
    src, tgt = train_tokenizers(sample, kind="char", joint=False)
    assert isinstance(src, CharTokenizer) and src is not tgt
    assert set(src.itos[4:]) == {c for en, _ in sample for c in en}
    assert set(tgt.itos[4:]) == {c for _, z in sample for c in z}
    src, tgt = train_tokenizers(sample, kind="char", joint=True)
    assert src is tgt and set(src.itos[4:]) == {c for p in sample for s in p for c in s}
    with pytest.raises(ValueError, match="kind='word'"):
        train_tokenizers(sample, kind="word")


def test_bpe_tokenizer_feeds_the_batching_code(tok, made_up):
    pairs = made_up
    src, tgt_in, tgt_out = seq2seq_batch(pairs[:4], tok, tok)
    assert src.shape[0] == tgt_in.shape[0] == 4 and tgt_in.shape == tgt_out.shape
    assert (tgt_in[:, 0] == tok.bos_id).all()
    for row, (_en, zh) in zip(tgt_out.tolist(), pairs[:4]):
        assert tok.decode(row) == zh
    for row, (en, _zh) in zip(src.tolist(), pairs[:4]):
        assert tok.decode(row) == en


def test_data_modules_import_no_model_code():
    """Checked on the source: importing any aiayn module runs aiayn/__init__.py, which imports the models."""
    src = Path(__file__).resolve().parents[2] / "src" / "aiayn" / "data"
    for name in ("bpe.py", "corpus.py"):
        tree = ast.parse((src / name).read_text(encoding="utf-8"))
        modules = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        modules += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        forbidden = (["aiayn", "models"], ["aiayn", "layers"], ["aiayn", "training"])
        bad = [m for m in modules if m.split(".")[:2] in forbidden]
        assert not bad, f"{name} imports {bad}"
