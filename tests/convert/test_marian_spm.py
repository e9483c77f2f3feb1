"""Marian's SentencePiece tokenizers against Hugging Face's ``MarianTokenizer``, and a converted Marian folder
translating through ``aiayn translate`` as ``MarianMTModel.generate`` + ``batch_decode`` does. Everything is made
here: two SentencePiece models trained on the sentences below, a vocabulary of their pieces, a tiny Marian taught
those pairs for a few seconds (so its outputs differ in length and text from one sentence to the next)."""

import json
import shutil
import sys
import warnings

import pytest
import torch

import aiayn
from aiayn.cli import main
from aiayn.convert.folder import convert
from aiayn.data import load_tokenizer, seq2seq_batch
from aiayn.data.sentencepiece import SentencePieceTokenizer, is_sentencepiece, marian_tokenizers
from aiayn.decoding import beam_search, greedy
from aiayn.pipelines.translation import load_run

transformers = pytest.importorskip("transformers")
spm = pytest.importorskip("sentencepiece")
pytestmark = [pytest.mark.parity, pytest.mark.usefixtures("one_thread")]  # see conftest.py

PAIRS = [
    ("the cat sits on the mat", "die katze sitzt auf der matte"),
    ("the dog sleeps in the garden", "der hund schläft im garten"),
    ("a small bird sings", "ein kleiner vogel singt"),
    ("we eat green apples", "wir essen grüne äpfel"),
    ("the children play outside", "die kinder spielen draußen"),
    ("my brother reads a book", "mein bruder liest ein buch"),
    ("it is raining again today", "es regnet heute wieder"),
    ("the train is late", "der zug ist spät"),
    ("she drinks hot tea", "sie trinkt heißen tee"),
    ("the quick fox jumps over the dog", "der schnelle fuchs springt über den hund"),
    ("where is the station?", "wo ist der bahnhof?"),
    ("i like the old house", "ich mag das alte haus"),
    ("the sun is warm", "die sonne ist warm"),
    ("he writes a long letter", "er schreibt einen langen brief"),
    ("the water is cold", "das wasser ist kalt"),
    ("we walk to the river", "wir gehen zum fluss"),
    ("the teacher asks a question", "der lehrer stellt eine frage"),
    ("a red car stops", "ein rotes auto hält"),
    ("the moon is bright tonight", "der mond ist heute nacht hell"),
    ("my sister sings a song", "meine schwester singt ein lied"),
    ("the baker sells fresh bread", "der bäcker verkauft frisches brot"),
    ("they open the window", "sie öffnen das fenster"),
    ("the city is quiet", "die stadt ist ruhig"),
    ("i quickly drink the milk", "ich trinke schnell die milch"),
    ("the door is open", "die tür ist offen"),
    ("we see many stars", "wir sehen viele sterne"),
    ("the old man laughs", "der alte mann lacht"),
    ("a cat and a dog", "eine katze und ein hund"),
    ("the flowers are yellow", "die blumen sind gelb"),
    ("hello, how are you?", "hallo, wie geht es dir?"),
]
# Unseen text: characters no SentencePiece model holds (漢字, é, ☃), the specials written out, a language code.
ODD = ["the cat 漢字 sleeps", "café naïve ☃", "a </s> b<unk>c", ">>deu<< the dog", "", "  the   sun  ",
       "tab\tthe mat", "Ünïcode ÄÖ", "the quick quiet queen"]
# <pad> written in a source is the padding id, which our models mask (MarianMTModel takes the tokenizer's mask):
# its ids are compared, not its translation.
PADDED = ["x<pad>y", "<pad>", " the <pad> cat </s>"]
DROPPED = "q"  # pieces with this letter are left out of vocab.json: SentencePiece knows them, the model does not


def train_spm(texts, path):
    """A unigram SentencePiece model as Marian's are (``<unk>`` 0, ``<s>`` 1, ``</s>`` 2), written at ``path``."""
    model = spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts), model_prefix=str(path.with_suffix("")), vocab_size=70, model_type="unigram",
        hard_vocab_limit=False, character_coverage=1.0, num_threads=1, minloglevel=2)
    assert model is None
    path.with_suffix(".model").rename(path)


def marian_tokenizer(folder, **kwargs):
    with warnings.catch_warnings():  # "Recommended: pip install sacremoses", which MarianTokenizer never calls
        warnings.simplefilter("ignore")
        return transformers.MarianTokenizer(str(folder / "source.spm"), str(folder / "target.spm"),
                                            str(folder / "vocab.json"), **kwargs)


def write_vocab(folder):
    """Marian's layout: ``</s>`` 0, ``<unk>`` 1, the pieces of both models, ``<pad>`` last."""
    vocab = {"</s>": 0, "<unk>": 1}
    for name in ("source.spm", "target.spm"):
        sp = spm.SentencePieceProcessor(model_file=str(folder / name))
        for i in range(sp.get_piece_size()):
            piece = sp.id_to_piece(i)
            if not (sp.is_control(i) or sp.is_unknown(i) or DROPPED in piece):
                vocab.setdefault(piece, len(vocab))
    vocab["<pad>"] = len(vocab)
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    return vocab


def taught_marian(tok, vocab):
    """A tiny random Marian, taught the pairs for a few seconds: what it writes depends on the source."""
    pad, eos = vocab["<pad>"], vocab["</s>"]
    cfg = transformers.MarianConfig(
        vocab_size=len(vocab), d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=128,
        pad_token_id=pad, decoder_start_token_id=pad, eos_token_id=eos, forced_eos_token_id=None, dropout=0.0,
        init_std=0.1)
    torch.manual_seed(0)
    hf = transformers.MarianMTModel(cfg)
    batch = tok([s for s, _ in PAIRS], text_target=[t for _, t in PAIRS], padding=True, return_tensors="pt")
    labels = batch["labels"].masked_fill(batch["labels"] == pad, -100)
    opt = torch.optim.Adam(hf.parameters(), lr=1e-2)
    hf.train()
    for _ in range(60):  # half taught: real words and odd pieces, of many lengths
        loss = hf(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    return hf.eval()


@pytest.fixture(scope="module")
def marian(tmp_path_factory):
    """``(folder, hf_model, hf_tokenizer)``: a Hugging Face Marian folder, as ``save_pretrained`` writes it."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a module fixture runs before the one_thread fixture; see conftest.py
    try:
        files = tmp_path_factory.mktemp("spm")
        train_spm([s for s, _ in PAIRS], files / "source.spm")
        train_spm([t for _, t in PAIRS], files / "target.spm")
        vocab = write_vocab(files)
        tok = marian_tokenizer(files)
        hf = taught_marian(tok, vocab)
        folder = tmp_path_factory.mktemp("hf")
        hf.save_pretrained(folder)
        tok.save_pretrained(folder)
        return folder, hf, tok
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def run(marian, tmp_path_factory):
    """The folder converted by ``aiayn convert hf-marian``."""
    out = tmp_path_factory.mktemp("run") / "marian"
    assert main(["convert", "hf-marian", str(marian[0]), str(out)]) == 0
    return out


def pad_to(ids, width, pad):
    """``(B, L)`` ids padded with ``pad`` on the right to ``(B, width)``."""
    return torch.nn.functional.pad(ids, (0, width - ids.size(1)), value=pad)


def translated(capsys, run, texts, *flags):
    """What ``aiayn translate --run RUN FLAGS TEXTS`` prints, one translation per text."""
    capsys.readouterr()
    assert main(["translate", "--run", str(run), *flags, *texts]) == 0
    lines = capsys.readouterr().out.split("\n")[: len(texts)]
    assert all(line.startswith(f"{s} -> ") for s, line in zip(texts, lines))
    return [line[len(f"{s} -> "):] for s, line in zip(texts, lines)]


def test_ids_and_text_equal_marian_tokenizer(marian):
    folder, _, tok = marian
    src, tgt = marian_tokenizers(folder)
    assert (src.vocab_size, src.eos_id, src.unk_id, src.pad_id) == (tok.vocab_size, tok.eos_token_id,
                                                                    tok.unk_token_id, tok.pad_token_id)
    texts = [s for s, _ in PAIRS] + [t for _, t in PAIRS] + ODD + PADDED
    for text in texts:
        assert src.encode(text) + [src.eos_id] == tok(text).input_ids, text
        assert tgt.encode(text) + [tgt.eos_id] == tok(text_target=text).input_ids, text
        assert len(src.tokens(text)) == len(src.encode(text))
    assert src.unk_id in src.encode("the quick 漢字") and src.unk_id in src.encode("quiet"), "unknowns are tested"
    # decoding: a sentence's own ids, and random ids (specials, unknowns and pieces of either model among them)
    rows = [tok(text_target=t).input_ids for t in texts]
    gen = torch.Generator().manual_seed(0)
    rows += torch.randint(0, tok.vocab_size, (300, 10), generator=gen).tolist()
    for row in rows:
        cut = row[: row.index(tok.eos_token_id)] if tok.eos_token_id in row else row  # ours stops at </s>
        assert tgt.decode(row) == tok.decode(cut, skip_special_tokens=True), row
    assert tgt.decode(tok(text_target="die katze sitzt").input_ids + [7, 8]) == "die katze sitzt"


def test_clean_up_spaces_and_separate_vocabularies_as_marian_tokenizer(marian, tmp_path):
    folder, _, _ = marian
    for name in ("source.spm", "target.spm", "vocab.json"):
        shutil.copyfile(folder / name, tmp_path / name)
    vocab = json.loads((folder / "vocab.json").read_text())
    pieces = [p for p in vocab if p not in ("</s>", "<unk>", "<pad>")][::-1]  # the specials keep their ids
    target = {"</s>": 0, "<unk>": 1, **{p: i + 2 for i, p in enumerate(pieces)}, "<pad>": vocab["<pad>"]}
    (tmp_path / "target_vocab.json").write_text(json.dumps(target, ensure_ascii=False))
    tok = marian_tokenizer(tmp_path, separate_vocabs=True, target_vocab_file=str(tmp_path / "target_vocab.json"),
                           clean_up_tokenization_spaces=True)
    tok.save_pretrained(tmp_path)
    src, tgt = marian_tokenizers(tmp_path)
    assert tgt.vocab_file.name == "target_vocab.json" and tgt.clean_up_spaces
    for _, text in PAIRS:
        assert src.encode(text) + [src.eos_id] == tok(text).input_ids, text
        ids = tok(text_target=text).input_ids
        assert tgt.encode(text) + [tgt.eos_id] == ids, text
        assert tgt.decode(ids) == tok.decode(ids, skip_special_tokens=True, use_source_tokenizer=False), text
    assert tgt.decode(tgt.encode("hallo , wie ?")) == "hallo, wie?"


def test_convert_keeps_the_tokenizers_in_the_run(marian, run):
    folder = marian[0]
    for name in ("source.spm", "target.spm", "vocab.json"):
        assert (run / name).read_bytes() == (folder / name).read_bytes(), name
    assert json.loads((run / "src_tokenizer.json").read_text()) == {
        "type": "sentencepiece", "model": "source.spm", "vocab": "vocab.json", "eos": "</s>", "unk": "<unk>",
        "pad": "<pad>", "clean_up_spaces": False}
    assert is_sentencepiece(run / "src_tokenizer.json") and is_sentencepiece(run / "tgt_tokenizer.json")
    src, tgt = load_tokenizer(run / "src_tokenizer.json"), load_tokenizer(run / "tgt_tokenizer.json")
    assert isinstance(src, SentencePieceTokenizer) and src.model_file.name == "source.spm"
    assert isinstance(tgt, SentencePieceTokenizer) and tgt.model_file.name == "target.spm"
    assert aiayn.pipeline(run).task == "translation"
    out = run.parent / "plain-hf"  # `aiayn convert hf` (the folder's own model type) does the same
    assert main(["convert", str(folder), str(out)]) == 0
    assert json.loads((out / "tgt_tokenizer.json").read_text()) == json.loads((run / "tgt_tokenizer.json").read_text())


def test_translate_equals_generate_and_batch_decode(marian, run, capsys):
    _, hf, tok = marian
    texts = [s for s, _ in PAIRS[:12]] + ["the cat sleeps in the garden", "my dog reads a letter"] + ODD
    batch = tok(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        ids = hf.generate(**batch, num_beams=1, do_sample=False, max_new_tokens=40, bad_words_ids=[[tok.pad_token_id]])
    assert (ids == tok.eos_token_id).any(dim=1).all(), "every output ends before aiayn translate's cap (S + 50)"
    expected = tok.batch_decode(ids, skip_special_tokens=True)
    assert len(set(expected)) >= len(texts) // 2 and len({len(e.split()) for e in expected}) >= 4, expected
    assert translated(capsys, run, texts) == expected
    model, src_tok, tgt_tok = load_run(run)  # the ids too, with the source padded as aiayn translate pads it
    got = greedy(model, seq2seq_batch([(t, "") for t in texts], src_tok, tgt_tok)[0])
    width = max(got.size(1), ids.size(1) - 1)
    assert pad_to(got, width, tok.pad_token_id).tolist() == pad_to(ids[:, 1:], width, tok.pad_token_id).tolist()


def test_beam_search_equals_generate_with_hugging_face_defaults(marian, run, capsys):
    # `aiayn translate --beam 4` divides by GNMT's ((5 + len) / 6) ** 0.6 (section 6.1), which generate() cannot:
    # its length_penalty divides by len ** alpha. With generate's own defaults (alpha 1, early_stopping=False) the
    # search is compared here through the run's loaded model and tokenizers.
    _, hf, tok = marian
    texts = [s for s, _ in PAIRS[12:]] + ODD
    batch = tok(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        ids = hf.generate(**batch, num_beams=4, do_sample=False, max_new_tokens=30, bad_words_ids=[[tok.pad_token_id]])
    expected = tok.batch_decode(ids, skip_special_tokens=True)
    model, src_tok, tgt_tok = load_run(run)
    src, _, _ = seq2seq_batch([(t, "") for t in texts], src_tok, tgt_tok)  # as aiayn translate batches them
    got = beam_search(model, src, beam=4, length_penalty=1.0, normalize="length", early_stopping=False, max_len=30)
    assert [tgt_tok.decode(row) for row in got.tolist()] == expected
    assert translated(capsys, run, texts, "--beam", "4") == aiayn.pipeline(run).translate(texts, beam=4)


def test_without_sentencepiece_the_error_names_the_extra(marian, monkeypatch):
    monkeypatch.setitem(sys.modules, "sentencepiece", None)
    with pytest.raises(ImportError, match=r"aiayn\[hf\]"):
        marian_tokenizers(marian[0])


def test_convert_refuses_a_vocabulary_that_does_not_fit_the_model(marian, tmp_path):
    folder = tmp_path / "hf"
    shutil.copytree(marian[0], folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "pad_token_id": 3, "decoder_start_token_id": 3}))
    with pytest.raises(ValueError, match=r"vocab\.json gives </s> and <pad> the ids 0 and \d+; the model's config"):
        convert(folder, tmp_path / "out", "hf-marian")
    assert not (tmp_path / "out").exists(), "nothing is written"


def test_evaluate_scores_a_converted_marian_with_sacrebleu(marian, run, capsys, tmp_path):
    sacrebleu = pytest.importorskip("sacrebleu")
    pairs = PAIRS[:10]
    (tmp_path / "pairs.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in pairs))
    assert main(["evaluate", "--run", str(run), "--data", str(tmp_path / "pairs.tsv"), "--beam", "1"]) == 0
    printed = capsys.readouterr().out
    hypotheses = translated(capsys, run, [s for s, _ in pairs])
    expected = sacrebleu.corpus_bleu(hypotheses, [[t for _, t in pairs]]).score
    [line] = [x for x in printed.splitlines() if x.startswith("bleu ")]
    assert float(line.split()[1]) == pytest.approx(expected, abs=1e-4)


def test_a_pipeline_on_the_hugging_face_folder_translates_as_the_converted_run(marian, run, capsys):
    texts = [s for s, _ in PAIRS[:6]]
    p = aiayn.pipeline(marian[0])
    assert p.task == "translation" and p.translate(texts) == translated(capsys, run, texts)
