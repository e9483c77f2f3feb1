"""Decoding over a static cache (a family's static session, :class:`aiayn.layers.session.StaticSession`): each
step's logits equal the growing cache's (a GPT's and an encoder-decoder's, rows reordered as beam search reorders
them), and ``generate(..., compile=True)`` gives the eager tokens (greedy, beams, seeded sampling), compiling the
step once for every generation of that shape."""

import pytest
import torch

import aiayn
from aiayn.decoding import beam
from aiayn.layers import session as session_module
from aiayn.models.gpt import session as gpt_sessions
from aiayn.models.transformer import session as seq2seq_sessions

pytestmark = pytest.mark.usefixtures("one_thread")

PROMPTS = torch.tensor([[5, 9, 12, 7, 3, 4], [0, 0, 0, 8, 4, 1], [0, 11, 2, 6, 6, 30]])
MASK = torch.tensor([[1] * 6, [0, 0, 0, 1, 1, 1], [0, 1, 1, 1, 1, 1]])  # padded on the left


def model(preset):
    torch.manual_seed(0)
    window = {"attention_window": 4} if preset == "mistral" else {}  # shorter than the prompts: the ring wraps
    return aiayn.build(aiayn.preset("llama-tiny" if preset == "mistral" else preset, vocab_size=64, max_len=64,
                                    eos_id=2, **window)).eval()


# BUCKET 4: the steps attend over 8, 12 and then all 13 columns of the buffers (the ring: always its 4); None: all
@pytest.fixture(params=[4, None], ids=["filled-columns", "whole-buffer"])
def bucket(request, monkeypatch):
    monkeypatch.setattr(session_module, "BUCKET", request.param)
    return request.param


@pytest.mark.usefixtures("bucket")
@pytest.mark.parametrize("preset", ["gpt-tiny", "llama-tiny", "mistral"])  # learned positions; RoPE with grouped
def test_each_step_over_the_static_cache_equals_the_growing_cache(preset):  # kv heads; a window of 4 as a ring
    gpt, new = model(preset), 7
    real = torch.cat([MASK.bool(), torch.ones(3, new, dtype=torch.bool)], dim=1)  # (B, P + new)
    static = gpt.session(static=True)
    cache = gpt.new_cache(real.size(1))
    ids = PROMPTS
    with torch.no_grad():
        want = gpt(ids, attention_mask=MASK, cache=cache)[:, -1]
        got = static.prefill(ids, MASK, new_tokens=new)
        for _ in range(new):
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
            token = want.argmax(-1)  # (B,)
            end = ids.size(1)
            ids = torch.cat([ids, token[:, None]], dim=1)
            want = gpt(token[:, None], attention_mask=real[:, : end + 1], cache=cache)[:, -1]
            got = static.step(token)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def seq2seq(preset):
    torch.manual_seed(0)
    return aiayn.build(aiayn.preset(preset)).eval()


def sources(model):
    torch.manual_seed(1)
    src = torch.randint(4, 60, (3, 7))
    src[1, 5:] = model.cfg.pad_id  # a padded source: cross-attention must not read its padding
    return src


# The paper's Transformer (sinusoidal positions, the output layer's bias) and BART (learned positions from row 2,
# a norm on the embeddings): the two ways an encoder-decoder here places its target tokens.
@pytest.mark.usefixtures("bucket")
@pytest.mark.parametrize("beams", [False, True], ids=["rows-copied", "rows-read-through-a-table"])
@pytest.mark.parametrize("preset", ["transformer-tiny", "bart-tiny"])
def test_encoder_decoder_steps_and_reordered_rows_equal_the_growing_cache(preset, beams):
    net = seq2seq(preset)
    src = sources(net).repeat_interleave(2, dim=0)  # (6, S): two beams a sentence
    length = 9
    with torch.no_grad():
        memory = net.encode(src)
        static, cache = net.session(static=True, beams=beams), net.new_cache(length)
        got = static.prefill(sources(net), new_tokens=length, repeat=2)  # encoded once, each row twice
        token = torch.full((6,), net.cfg.bos_id)
        for t in range(6):
            want = net.decode(token[:, None], memory, src, cache=cache)[:, -1]
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
            token = want.argmax(-1)
            if t == 2:  # beams swap within their sentence: the self-attention rows move, the sources stay
                rows = torch.tensor([1, 1, 2, 3, 5, 4])
                static.reorder(rows)
                cache.reorder(rows, cross=False)
                token = token[rows]
            if t == 4:  # sentence 1 finished: its beams leave, the others move to the front
                rows = torch.tensor([0, 1, 4, 5])
                static.keep(rows)
                cache.reorder(rows)
                memory, src, token = memory[rows], src[rows], token[rows]
            got = static.step(token)
    assert static.rows == 4
    if beams:  # the beams moved in the table (rows 1 1 2 3 5 4 at step 2, then 0 1 4 5), the buffers stayed
        assert static.read_from is not None
        assert static.read_from[:4, :5].tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [5, 5, 5, 4, 4],
                                                     [4, 4, 4, 5, 5]]


def test_compiled_generation_gives_the_eager_tokens_and_compiles_once_saying_so(monkeypatch, capfd):
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    monkeypatch.setattr(session_module, "_compiled", {})  # a process that has compiled nothing yet

    gpt = model("llama-tiny")
    eager = gpt.generate(PROMPTS, attention_mask=MASK, max_new_tokens=8, do_sample=False)
    capfd.readouterr()
    compiled = gpt.generate(PROMPTS, attention_mask=MASK, max_new_tokens=8, do_sample=False, compile=True)
    assert torch.equal(compiled, eager)
    said = capfd.readouterr().err.splitlines()
    # the wait said before it starts, then its length (no cache hit: dynamo was reset, inductor's cache may hold it)
    assert said[0].startswith("aiayn: compiling the decode step of gpt (torch.compile")
    assert said[1].startswith("aiayn: compiled the decode step of gpt for batch 3 in ") and len(said) == 2
    graphs = counters["stats"]["unique_graphs"]
    assert graphs >= 1 and not counters["graph_break"], dict(counters["graph_break"])  # one whole step
    draws = [gpt.generate(PROMPTS, attention_mask=MASK, max_new_tokens=8, do_sample=True, top_k=10,
                          generator=torch.Generator().manual_seed(7), compile=flag) for flag in (False, True)]
    assert torch.equal(draws[1], draws[0])
    assert counters["stats"]["unique_graphs"] == graphs  # the same shapes: nothing compiled again
    assert capfd.readouterr().err == ""  # and nothing said
    monkeypatch.setattr(session_module, "ANNOUNCE", False)
    gpt.generate(PROMPTS[:2], attention_mask=MASK[:2], max_new_tokens=3, compile=True)  # a new batch size: compiled
    assert counters["stats"]["unique_graphs"] > graphs and capfd.readouterr().err == ""  # silenced


def test_a_compiled_step_attends_over_the_filled_columns_and_compiles_once_for_every_width(monkeypatch):
    from torch._dynamo.utils import counters

    monkeypatch.setattr(session_module, "BUCKET", 4)
    monkeypatch.setattr(beam, "COMPILE_RANK", False)  # the steps' graphs only
    widths = []
    narrow = session_module.narrow
    for module in (gpt_sessions, seq2seq_sessions):  # where the families' sessions narrow their columns
        monkeypatch.setattr(module, "narrow", lambda t, width, dim=0: widths.append(width) or narrow(t, width, dim))
    torch._dynamo.reset()
    counters.clear()
    gpt = model("llama-tiny")
    eager = gpt.generate(PROMPTS, attention_mask=MASK, max_new_tokens=14, do_sample=False)
    compiled = gpt.generate(PROMPTS, attention_mask=MASK, max_new_tokens=14, do_sample=False, compile=True)
    assert torch.equal(compiled, eager)
    assert sorted(set(widths)) == [8, 12, 16, 20]  # prompt 6 + 14 new: the columns written, rounded up to 4
    assert counters["stats"]["unique_graphs"] == 1 and not counters["graph_break"]  # one graph for every width
    net, widths[:] = seq2seq("transformer-tiny"), []
    assert compiled_equals_eager(net, sources(net), None, num_beams=3)  # beams reordered in the narrowed buffers
    assert sorted(set(widths)) == [4, 8, 10] and counters["stats"]["unique_graphs"] == 2  # 10 target positions


def compiled_equals_eager(net, ids, mask, **options):
    """Whether ``net.generate`` gives the same ids with ``compile=True`` (sampling: from the same seed)."""
    runs = []
    for flag in (False, True):
        generator = torch.Generator().manual_seed(7) if options.get("do_sample") else None
        runs.append(net.generate(ids, attention_mask=mask, max_new_tokens=10, generator=generator, compile=flag,
                                 **options))
    return torch.equal(*runs)


DECODINGS = [{"do_sample": False}, {"num_beams": 3, "num_return_sequences": 2}, {"do_sample": True, "top_k": 10}]


def test_a_compiled_translation_gives_the_eager_tokens_greedy_beams_and_sampling():
    from torch._dynamo.utils import counters

    net = seq2seq("transformer-tiny")
    src = sources(net)
    counters.clear()
    assert all(compiled_equals_eager(net, src, None, **options) for options in DECODINGS)
    assert not counters["graph_break"], dict(counters["graph_break"])
    graphs = counters["stats"]["unique_graphs"]
    assert compiled_equals_eager(net, src.flip(0), None, **DECODINGS[1])  # other sources, the same shapes
    assert counters["stats"]["unique_graphs"] == graphs


@pytest.mark.slow  # a compile of each family's step for each batch shape: about a minute
@pytest.mark.parametrize("preset", ["bart-tiny", "gpt-tiny", "llama-tiny", "mistral"])
def test_compiled_decoding_gives_the_eager_tokens_for_each_family(preset):
    net = seq2seq(preset) if preset == "bart-tiny" else model(preset)
    ids, mask = (sources(net), None) if preset == "bart-tiny" else (PROMPTS, MASK)
    for options in DECODINGS:
        assert compiled_equals_eager(net, ids, mask, **options), options


def test_compile_is_refused_where_it_does_not_decode():
    gpt = model("gpt-tiny")
    with pytest.raises(ValueError, match="use_cache"):
        gpt.generate(PROMPTS, attention_mask=MASK, max_new_tokens=2, use_cache=False, compile=True)
    transformer = seq2seq("transformer-tiny")
    with pytest.raises(ValueError, match="use_cache"):
        transformer.generate(PROMPTS + 3, max_new_tokens=2, num_beams=2, use_cache=False, compile=True)


def test_compiled_int8_decoding_gives_the_eager_int8_tokens_in_one_graph_a_shape(monkeypatch):
    """fbgemm's int8 products are one opaque operation each in the compiled step (``aiayn::int8_rows``): no graph
    break, the eager int8 model's tokens; GPT-tiny's output is tied to its int8 token table."""
    from torch._dynamo.utils import counters

    monkeypatch.setattr(beam, "COMPILE_RANK", False)  # the steps' graphs only

    from aiayn.layers.int8 import quantize

    torch._dynamo.reset()
    counters.clear()
    gpt = quantize(model("gpt-tiny"))
    assert compiled_equals_eager(gpt, PROMPTS, MASK, do_sample=False)
    transformer = quantize(seq2seq("transformer-tiny"))
    assert compiled_equals_eager(transformer, sources(transformer), None, num_beams=3)
    assert counters["stats"]["unique_graphs"] == 2 and not counters["graph_break"], dict(counters["graph_break"])
    torch.manual_seed(5)  # another int8 model of the same shapes: the same compiled step, its own products
    other = quantize(aiayn.build(gpt.cfg).eval())
    assert compiled_equals_eager(other, PROMPTS, MASK, do_sample=False)
    assert counters["stats"]["unique_graphs"] == 2  # nothing compiled again (the layers' keys are inputs)


def test_compiled_int8_slots_step_as_the_eager_int8_slots():
    """A server's static slots (:class:`aiayn.models.gpt.session.SlotSession`) over an int8 model: the compiled
    step's tokens are the eager step's (in int8 a row's product depends on the rows beside it, its outlier channels
    taken apart for all of them, so slots are compared with slots, not with a row decoding alone)."""
    from torch._dynamo.utils import counters

    from aiayn.layers.int8 import quantize

    gpt = quantize(model("gpt-tiny"))
    runs = []
    counters.clear()
    with torch.no_grad():
        for flag in (False, True):
            slots = gpt.slots(4, 24, static=True, compile=flag)
            taken, logits = slots.join([[5, 9, 12], [7, 3, 4, 4, 8]], [9, 9])  # two rows
            token = logits.argmax(-1)
            got = []
            for _ in range(8):
                token = slots.step(taken, token.tolist()).argmax(-1)
                got.append(token)
            runs.append(torch.stack(got))
    assert torch.equal(*runs) and not counters["graph_break"], dict(counters["graph_break"])


def drive_slots(slots, prompts):
    """Rows join and leave ``slots`` as a server's would: the logits of every join and step, and the rows each
    step computed (its tokens' batch)."""
    rows: list[int] = []
    run = slots.run
    slots.run = lambda *a: rows.append(a[2].size(0)) or run(*a)
    got, tokens = [], {}

    def join(*which):
        taken, logits = slots.join([prompts[w] for w in which], [12] * len(which))
        assert taken == list(which)  # the lowest free slots
        got.append(logits)
        tokens.update((s, 40 + s) for s in taken)  # fixed tokens, not argmax: a near tie cannot fork the runs

    def step():
        live = sorted(tokens)
        got.append(slots.step(live, [tokens[s] for s in live]))
        tokens.update((s, (tokens[s] * 7 + 3) % 60) for s in live)

    def leave(slot):
        slots.leave(slot)
        del tokens[slot]

    join(0)
    step()  # one client: one row
    join(1, 2)
    step()
    leave(1)
    step()  # slot 1 free: still up to slot 2
    leave(2)
    step()  # one row again
    join(1)
    step()
    return rows, got


def test_a_compiled_servers_slots_compute_the_slots_up_to_the_highest_taken_in_two_graphs():
    """A server's compiled slots (``aiayn serve --compile``) compute the slots up to the highest one taken, a row
    joining the lowest free slot: one client costs one row, not every slot. The logits are the eager static
    slots'; after the warm-up (one slot, and every other number) nothing is compiled again."""
    from torch._dynamo.utils import counters

    gpt = model("llama-tiny")
    prompts = {0: [5, 9, 12], 1: [7, 3, 4, 4, 8], 2: [30, 31]}
    runs = {}
    torch._dynamo.reset()
    counters.clear()
    with torch.no_grad():
        for flag in (False, True):
            slots = gpt.slots(4, 24, static=True, compile=flag)
            slots.warm()
            graphs = counters["stats"]["unique_graphs"]
            rows, runs[flag] = drive_slots(slots, prompts)
            assert rows == [1, 3, 3, 1, 2], rows
            assert counters["stats"]["unique_graphs"] == graphs  # nothing compiled after the warm-up
    assert counters["stats"]["unique_graphs"] == 2 and not counters["graph_break"], dict(counters["graph_break"])
    for eager, compiled in zip(runs[False], runs[True], strict=True):
        torch.testing.assert_close(compiled, eager, atol=1e-4, rtol=1e-4)


def test_beam_searchs_ranking_compiled_gives_the_same_hypotheses_as_sentences_leave(monkeypatch):
    """``beam.COMPILE_RANK``: the ranking after the model through ``torch.compile`` (one graph of tensors of fixed
    shapes), the eager hypotheses (their scores to the compiled step's rounding); when sentences finish at
    different steps and leave the search, it is compiled at most twice more (dynamic in the sentences left, and
    one sentence), never once per step."""
    from torch._dynamo.utils import counters

    net = seq2seq("transformer-tiny")
    net.generator.bias.data[net.cfg.eos_id] += 6.0  # sentences end early, at different steps
    torch.manual_seed(3)
    src = torch.randint(4, 60, (6, 7))
    eager = beam.beam_search(net, src, beam=3, max_len=12, return_scores=True, num_return_sequences=2)
    torch._dynamo.reset()
    counters.clear()
    monkeypatch.setattr(beam, "COMPILE_RANK", True)
    beam._compiled_rank.cache_clear()  # compiled anew after the reset
    left = []
    move = session_module.StaticSession._move

    def spy(self, index, fewer):
        if fewer:
            left.append(index.numel())
        move(self, index, fewer)

    monkeypatch.setattr(session_module.StaticSession, "_move", spy)
    ranked = beam.beam_search(net, src, beam=3, max_len=12, return_scores=True, num_return_sequences=2,
                              compile=True)
    assert torch.equal(ranked[0], eager[0])  # the same hypotheses; their scores as the compiled step rounds them
    torch.testing.assert_close(ranked[1], eager[1], rtol=1e-5, atol=1e-5)
    assert len(left) >= 2 and left == sorted(left, reverse=True)  # the rows of sentences left, fewer each time
    assert not counters["graph_break"], dict(counters["graph_break"])
    assert 2 <= counters["stats"]["unique_graphs"] <= 3, dict(counters["stats"])  # the step, the ranking (one sentence)
