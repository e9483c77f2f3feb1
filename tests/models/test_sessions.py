"""Every family's decode session (``model.session()``, :mod:`aiayn.layers.session`) against the model's own forward
over the whole sequence, recomputed: a GPT's (growing cache, none, static; RoPE with grouped heads, a sliding
window's ring) and an encoder-decoder's (the paper's, BART's); rows reordered as beams reorder them and rows
leaving as finished ones leave."""

import pytest
import torch

import aiayn
from aiayn.layers.session import Session

pytestmark = pytest.mark.usefixtures("one_thread")

PROMPTS = torch.tensor([[5, 9, 12, 7, 3, 4], [0, 0, 0, 8, 4, 1], [0, 11, 2, 6, 6, 30]])
MASK = torch.tensor([[1] * 6, [0, 0, 0, 1, 1, 1], [0, 1, 1, 1, 1, 1]])  # padded on the left
KINDS = {"growing": {}, "no-cache": {"use_cache": False}, "static": {"static": True}}


def gpt(preset):
    torch.manual_seed(0)
    window = {"attention_window": 4} if preset == "mistral" else {}
    name = "llama-tiny" if preset == "mistral" else preset
    return aiayn.build(aiayn.preset(name, vocab_size=64, max_len=64, eos_id=2, **window)).eval()


def recomputed(model, ids, mask):
    """The last position's logits ``(B, V)`` of the whole sequence, no cache: what a session must give."""
    return model(ids, attention_mask=mask)[:, -1]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("preset", ["gpt-tiny", "llama-tiny", "mistral"])
def test_a_gpt_session_steps_as_its_forward_recomputed(preset, kind):
    model = gpt(preset)
    session = model.session(**KINDS[kind])
    assert isinstance(session, Session)
    ids, mask = PROMPTS.repeat_interleave(2, dim=0), MASK.repeat_interleave(2, dim=0)  # two rows an input
    with torch.no_grad():
        got = session.prefill(PROMPTS, MASK, new_tokens=8, repeat=2)
        assert torch.equal(session.prefix, ids) and session.prefix_mask is not None
        for step in range(7):
            torch.testing.assert_close(got, recomputed(model, ids, mask), atol=1e-5, rtol=1e-5)
            token = got.argmax(-1) if step % 2 else torch.arange(ids.size(0)) + 20  # rows apart: reorders show
            ids, mask = torch.cat([ids, token[:, None]], 1), torch.cat([mask, torch.ones_like(mask[:, :1])], 1)
            if step == 2:
                rows = torch.tensor([1, 0, 2, 2, 5, 4])  # beams moving within each input
                session.reorder(rows)
                ids, mask, token = ids[rows], mask[rows], token[rows]
            if step == 4:
                rows = torch.tensor([0, 1, 4, 5])  # input 1's rows leave
                session.keep(rows)
                ids, mask, token = ids[rows], mask[rows], token[rows]
            got = session.step(token)
        assert got.shape == (4, 64) and session.rows == 4


def seq2seq(preset):
    torch.manual_seed(0)
    return aiayn.build(aiayn.preset(preset)).eval()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("preset", ["transformer-tiny", "bart-tiny"])
def test_an_encoder_decoder_session_steps_as_its_forward_recomputed(preset, kind):
    model = seq2seq(preset)
    torch.manual_seed(1)
    src = torch.randint(4, 60, (3, 7))
    src[1, 5:] = model.cfg.pad_id
    session = model.session(**KINDS[kind])
    rows_src = src.repeat_interleave(2, dim=0)
    with torch.no_grad():
        got = session.prefill(src, new_tokens=8, repeat=2)
        tgt = session.prefix  # (6, 1) the start token
        assert tgt[:, 0].eq(model.cfg.bos_id).all() and session.never == (model.cfg.pad_id,)
        for step in range(6):
            torch.testing.assert_close(got, model(rows_src, tgt)[:, -1], atol=1e-5, rtol=1e-5)
            token = torch.arange(tgt.size(0)) + 10 + step
            tgt = torch.cat([tgt, token[:, None]], 1)
            if step == 2:
                rows = torch.tensor([1, 0, 2, 2, 5, 4])
                session.reorder(rows)
                tgt, token = tgt[rows], token[rows]
            if step == 3:
                rows = torch.tensor([0, 1, 4, 5])
                session.keep(rows)
                tgt, token, rows_src = tgt[rows], token[rows], rows_src[rows]
            got = session.step(token)
        torch.testing.assert_close(got, model(rows_src, tgt)[:, -1], atol=1e-5, rtol=1e-5)


def test_a_session_refuses_more_positions_than_the_model_has():
    model = gpt("gpt-tiny")
    for kind in KINDS.values():
        with pytest.raises(ValueError, match="max_len"):
            model.session(**kind).prefill(PROMPTS, MASK, new_tokens=60)
    with pytest.raises(ValueError, match="use_cache"):
        model.session(use_cache=False, compile=True)


@pytest.mark.parametrize("static", [False, True], ids=["packed", "static-slots"])
def test_slots_step_each_row_as_it_decodes_alone(static):
    """Rows joining and leaving a slots session (a server's) get the logits of each row decoded on its own."""
    model = gpt("llama-tiny")
    prompts = [[5, 9, 12], [7, 3, 4, 4, 8], [30, 31]]
    slots = model.slots(3, 32, static=static)
    alone = []
    with torch.no_grad():
        for p in prompts:
            session = model.session()
            logits = [session.prefill(torch.tensor([p]), new_tokens=6)]
            for step in range(5):
                logits.append(session.step(torch.tensor([40 + step])))
            alone.append(torch.cat(logits))
        (a, b), got = slots.join(prompts[:2], [6, 6])
        seen = {a: [got[0]], b: [got[1]]}
        c = None
        for step in range(5):
            if step == 1:  # the third row joins while the others decode
                (c,), got = slots.join(prompts[2:], [4])
                seen[c] = [got[0]]
            live = [s for s in seen if len(seen[s]) < (4 if s == c else 6)]
            for s, row in zip(live, slots.step(live, [40 + len(seen[s]) - 1 for s in live])):
                seen[s].append(row)
            if c in live and len(seen[c]) == 4:
                slots.leave(c)  # its budget made: its slot is free
    assert c is not None and c in slots.free
    for slot, want in ((a, alone[0]), (b, alone[1]), (c, alone[2][:4])):
        torch.testing.assert_close(torch.stack(seen[slot]), want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("static", [False, True])
def test_a_servers_slots_measure_every_row_bucket_before_the_first_request(tmp_path, monkeypatch, static):
    # measuring a shape's kernel takes up to seconds: met mid-serving, it stalls every row decoding then
    from aiayn.layers import kernels

    monkeypatch.setenv("AIAYN_CACHE_DIR", str(tmp_path))
    timed = []
    monkeypatch.setattr(kernels, "measure", lambda rows, weight, bias: timed.append(kernels.bucket(rows)) or "linear")
    torch.manual_seed(0)
    model = aiayn.build(aiayn.preset("gpt-tiny", vocab_size=512, d_model=128, n_layers=1, max_len=40)).eval()
    try:
        kernels.use("rules")
        model.slots(2, 40, static=static).warm()
        assert timed == []  # the fixed rules: nothing to measure
        kernels.use("measure")
        kernels.forget()
        slots = model.slots(2, 40, static=static)
        slots.warm()
        assert set(timed) == {"1", "2-3", "4-7", "8-15", "16-31", "32-63"}  # 1, 2, 4, ... 32 positions: length 40
        timed.clear()
        slots.join([[1, 2, 3], [4, 5]], [4, 4])
        slots.step([0, 1], [7, 8])
        assert timed == []  # the requests met no new shape
    finally:
        kernels.use(None)
        kernels.forget()
