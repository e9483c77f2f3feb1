import torch

from aiayn.data.masking import IGNORE, mask_tokens
from aiayn.data.wordpiece import WordPieceTokenizer

TEXTS = ["The quick brown fox jumps over the lazy dog.", "A man is eating food.", "The dog sleeps."] * 30


def test_wordpiece_pairs_get_cls_sep_and_segments():
    tok = WordPieceTokenizer.train(TEXTS, vocab_size=200)
    assert (tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id) == (0, 1, 2, 3, 4)
    ids, types = tok.encode("The dog", "sleeps.")
    assert ids[0] == tok.cls_id and ids.count(tok.sep_id) == 2 and ids[-1] == tok.sep_id
    first_sep = ids.index(tok.sep_id)
    assert types == [0] * (first_sep + 1) + [1] * (len(ids) - first_sep - 1)
    assert tok.decode(ids) == "the dog sleeps."


def test_wordpiece_from_a_vocab_txt(tmp_path):
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "dog", "sl", "##eeps", "."]
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tok = WordPieceTokenizer.from_vocab(tmp_path / "vocab.txt")
    assert tok.encode("The dog sleeps!")[0] == [2, 5, 6, 7, 8, 1, 3]  # "!" is not in the vocabulary
    ids, _types, mask = tok.batch(["the dog", "the dog sleeps . the dog"], max_len=6)
    assert ids.tolist() == [[2, 5, 6, 3, 0, 0], [2, 5, 6, 7, 8, 3]] and mask.sum(1).tolist() == [4, 6]


def test_a_cased_vocab_txt_keeps_case_and_odd_characters_keep_the_ids_after_them(tmp_path):
    from aiayn.data.wordpiece import bert_tokenizer

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "The", "dog", "Dog", "a\x85b", "."]
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    (tmp_path / "tokenizer_config.json").write_text('{"do_lower_case": false}')
    tok = bert_tokenizer(tmp_path)  # a cased BERT's folder: vocab.txt and do_lower_case false
    assert tok.vocab_size == len(vocab)  # "a\x85b" is one line, as transformers reads it
    assert tok.encode("The Dog .")[0] == [2, 6, 8, 10, 3]
    (tmp_path / "tokenizer_config.json").write_text('{"do_lower_case": true}')
    assert bert_tokenizer(tmp_path).encode("The Dog .")[0] == [2, 5, 7, 10, 3]


def test_bad_arguments_are_named():
    import pytest

    from aiayn.data.corpus import held_out_split

    tok = WordPieceTokenizer.train(TEXTS, vocab_size=200)
    with pytest.raises(ValueError, match="texts: give at least one"):
        tok.batch([])
    with pytest.raises(ValueError, match="max_len=1 must be at least 2"):
        tok.batch(["the dog"], max_len=1)
    with pytest.raises(ValueError, match="first_normal_id=5 must lie in"):
        mask_tokens(torch.tensor([[1, 2]]), 4, 5, [0], first_normal_id=5)
    with pytest.raises(ValueError, match="n_test=0 must be at least 1"):
        held_out_split([("a", "b")] * 5, 0, seed=0)


def test_masking_statistics_and_specials_never_chosen():
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 1000, (400, 128))
    ids[:, 0], ids[:, -1], ids[:, 100:] = 2, 3, 0  # [CLS], [SEP], padding
    inputs, labels = mask_tokens(ids, mask_id=4, vocab_size=1000, special_ids=(0, 2, 3), generator=gen,
                                 first_normal_id=5)
    chosen = labels != IGNORE
    normal = (ids != 0) & (ids != 2) & (ids != 3)
    assert not (chosen & ~normal).any()  # specials and padding never chosen
    assert abs(chosen.sum() / normal.sum() - 0.15) < 0.01
    assert torch.equal(labels[chosen], ids[chosen]) and torch.equal(inputs[~chosen], ids[~chosen])
    masked = (inputs == 4) & chosen
    unchanged = (inputs == ids) & chosen
    replaced = chosen & ~masked & ~unchanged
    n = chosen.sum()
    assert abs(masked.sum() / n - 0.8) < 0.01 and abs(unchanged.sum() / n - 0.1) < 0.01  # unchanged: 10% + rare hits
    assert abs(replaced.sum() / n - 0.1) < 0.01 and (inputs[replaced] >= 5).all()


def test_the_mlm_recipe_never_draws_a_special_of_a_released_bert_vocabulary_as_a_replacement(tmp_path):
    # bert-base-uncased's layout: [PAD] 0, [unused0..98] 1-99, [UNK] 100, [CLS] 101, [SEP] 102, [MASK] 103
    from aiayn.recipes.mlm import collate

    words = [f"w{i}" for i in range(40)]
    vocab = ["[PAD]", *(f"[unused{i}]" for i in range(99)), "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tok = WordPieceTokenizer.from_vocab(tmp_path / "vocab.txt")
    assert (tok.cls_id, tok.mask_id, tok.first_normal_id) == (101, 103, 104)
    assert WordPieceTokenizer.train(TEXTS, vocab_size=200).first_normal_id == 5  # its specials are 0-4
    ids = tok.encode(" ".join(words))[0]
    examples = [(ids, [0] * len(ids), 0)] * 200
    inputs, _segments, _mask, labels, _nsp = collate(examples, tok, len(vocab), torch.Generator().manual_seed(0))
    chosen = labels != IGNORE
    replaced = chosen & (inputs != tok.mask_id) & (inputs != labels)
    assert replaced.sum() > 100 and (inputs[replaced] >= 104).all()  # never [UNK], [CLS], [SEP], [MASK], [unused]
