"""Properties that hold for any input (hypothesis draws the inputs): tokenizers round-trip text, masks
never let a position see the future or padding, decoding stays in bounds, and rows with nothing to
attend to give zeros, not NaN, in both attention paths."""

import pytest
import torch

from aiayn.data import BPETokenizer, CharTokenizer
from aiayn.layers import causal_mask, combine, padding_mask
from aiayn.layers.attention import scaled_dot_product_attention

# hypothesis is optional: the module is skipped without it, so its names come from the module importorskip returns
hypothesis = pytest.importorskip("hypothesis")
st = pytest.importorskip("hypothesis.strategies")
given, settings = hypothesis.given, hypothesis.settings

FEW = settings(max_examples=40, deadline=None)


@pytest.fixture(scope="module")
def bpe():
    return BPETokenizer.train(["the cat sat on the mat", "der Hund schläft", "猫坐在垫子上", "ça va? 🙂"] * 5,
                              vocab_size=300)


@FEW
@given(text=st.text(max_size=60))
def test_byte_level_bpe_round_trips_any_unicode_text(bpe, text):
    assert bpe.decode(bpe.encode(text)) == text  # bytes, so nothing is unknown: Chinese, emoji, "<s>" alike


@FEW
@given(text=st.text(alphabet="abc xyz.,!", max_size=60))
def test_a_character_tokenizer_round_trips_text_of_the_characters_it_saw(text):
    tok = CharTokenizer.train(["abc xyz.,!"])
    assert tok.decode(tok.encode(text)) == text


@FEW
@given(lengths=st.lists(st.integers(1, 9), min_size=1, max_size=4), width=st.integers(9, 12))
def test_combined_masks_never_show_a_future_or_padded_position(lengths, width):
    ids = torch.tensor([[5] * n + [0] * (width - n) for n in lengths])
    mask = combine(padding_mask(ids, 0), causal_mask(width)).expand(len(lengths), 1, width, width)[:, 0]
    q, k = torch.meshgrid(torch.arange(width), torch.arange(width), indexing="ij")
    for b, n in enumerate(lengths):
        allowed = mask[b]
        assert not allowed[k > q].any()  # never a later position
        assert not allowed[:, n:].any()  # never padding
        assert allowed[:n, :n][k[:n, :n] <= q[:n, :n]].all()  # everything else among real tokens


@FEW
@given(rows=st.lists(st.lists(st.booleans(), min_size=5, max_size=5), min_size=1, max_size=4),
       seed=st.integers(0, 1000))
def test_rows_with_nothing_to_attend_give_zeros_on_both_paths(rows, seed):
    g = torch.Generator().manual_seed(seed)
    t = len(rows)
    q, k, v = (torch.randn(1, 2, n, 4, generator=g) for n in (t, 5, 5))
    mask = torch.tensor(rows)[None, None]  # (1, 1, T, 5), some rows all False
    fused, _ = scaled_dot_product_attention(q, k, v, mask)
    explicit, weights = scaled_dot_product_attention(q, k, v, mask, need_weights=True)
    assert torch.isfinite(fused).all() and torch.isfinite(explicit).all()
    torch.testing.assert_close(fused, explicit, atol=1e-6, rtol=1e-5)
    empty = ~mask.any(-1)[0, 0]
    assert (fused[0, :, empty] == 0).all() and (weights[0, :, empty] == 0).all()


@pytest.fixture(scope="module")
def tiny_model():
    import aiayn

    torch.manual_seed(0)
    return aiayn.build("transformer-tiny", src_vocab_size=13, tgt_vocab_size=11, d_model=32, d_ff=64,
                       share_embeddings=False, tie_output=False).eval()


@FEW
@given(lengths=st.lists(st.integers(1, 7), min_size=1, max_size=3), max_len=st.integers(1, 6),
       seed=st.integers(0, 1000), beam=st.sampled_from([1, 3]))
def test_decoding_never_exceeds_its_maximum_length_and_returns_valid_ids(tiny_model, lengths, max_len, seed, beam):
    from aiayn.decoding import beam_search, greedy

    g = torch.Generator().manual_seed(seed)
    src = torch.zeros(len(lengths), max(lengths), dtype=torch.long)  # pad_id 0
    for i, n in enumerate(lengths):
        src[i, :n - 1] = torch.randint(4, 13, (n - 1,), generator=g)
        src[i, n - 1] = 2  # </s>
    out = greedy(tiny_model, src, max_len=max_len) if beam == 1 else beam_search(tiny_model, src, beam, max_len=max_len)
    assert out.shape[0] == len(lengths) and out.shape[1] <= max_len
    assert ((out >= 0) & (out < 11)).all()
