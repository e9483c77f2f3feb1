"""Continuous batching, without HTTP: rows that join and leave a running batch at step boundaries decode what each
decodes alone (``aiayn.decoding.sample``, greedy), packed or in the compiled step's slots; the queue and the
micro-batcher keep their contracts."""

import threading
import time

import pytest
import torch

import aiayn
from aiayn.decoding import GenerationConfig, sample
from aiayn.pipelines.lm import Text
from aiayn.serve.batching import Job, MicroBatcher, Waiting
from aiayn.serve.generation import Batch, Row
from aiayn.serve.metrics import Metrics

pytestmark = pytest.mark.usefixtures("one_thread")


class Chars:
    """A tokenizer of one character per id, for :class:`Text`."""

    eos_id = None

    def decode(self, ids):
        return "".join(chr(i) for i in ids)


def row(prompt, budget, stop=(), tok=None, events=None):
    return Row(prompt=list(prompt), config=GenerationConfig(max_new_tokens=budget), generator=None,
               text=Text(tok or Chars(), list(stop)), send=(events if events is not None else []).append)


def test_text_holds_back_what_may_start_a_stop_string_and_cuts_at_it():
    text = Text(Chars(), ["cd"])
    assert [text.add(ord(c)) for c in "acxc"] == ["a", "", "cx", ""]
    assert text.add(ord("d")) == "" and text.stopped and text.shown == "acx"
    free = Text(Chars(), ["cd"])
    assert "".join(free.add(ord(c)) for c in "abc") + free.rest() == "abc"  # no stop came: the held "c" comes out


def test_text_ending_in_half_a_character_ends_as_the_tokenizer_decodes_it():
    from tokenizers import Tokenizer, decoders, models

    tok = Tokenizer(models.BPE(vocab={"a": 0, "Ã": 1, "©": 2, "Â": 3, "Ġ": 4}, merges=[]))
    tok.decoder = decoders.ByteLevel()  # ids 1 and 2 are the bytes 0xC3 and 0xA9: together "é", alone U+FFFD
    ids = [0, 1, 2, 1, 1]  # "a", "é", then two lone lead bytes
    want = tok.decode(ids)
    assert want == "aé\ufffd\ufffd"
    text = Text(tok)
    shown = "".join(text.add(i) for i in ids)
    assert shown == "aé" and shown + text.rest() == want  # held while it may complete, all of it at the end


@pytest.mark.parametrize("compiled", [False, True], ids=["packed", "compiled-slots"])
def test_rows_joining_and_leaving_at_step_boundaries_decode_as_each_alone(runs, compiled):
    p = aiayn.pipeline(runs["lm"], device="cpu")
    model, tok = p.model, p.parts["tok"]
    texts = ["1 May", "the 3rd of June 1999 =", "x", "2001-02-03", "12 December", "May", "7"]
    budgets = [30, 7, 19, 3, 12, 25, 1]
    prompts = [tok.encode(t) for t in texts]
    alone = [sample(model, [pr], n, temperature=0.0, eos_id=tok.eos_id)[0][len(pr):] for pr, n in zip(prompts, budgets)]
    rows = [row(pr, n, tok=tok) for pr, n in zip(prompts, budgets)]
    cancelled = row(tok.encode("abandoned"), 40, tok=tok)
    joins = {0: [0, 1], 2: [2], 5: [3, 4, 6], 6: [5]}  # 6 joins with a budget of 1: done at its prefill
    ends = {tok.eos_id}
    batch = Batch(model, ends, Metrics(), slots=8, compile=compiled)
    sizes = []
    with torch.inference_mode():
        for step in range(80):
            if step == 1:
                batch.update([cancelled])
            if step == 4:
                cancelled.cancelled = True  # its client went away: it leaves at the next boundary
            batch.update([rows[i] for i in joins.get(step, [])])
            sizes.append(len(batch.rows))
            if batch.rows:
                batch.step()
                if not compiled:  # the packed cache: a row each, no column unused by every row
                    packed = batch.session
                    assert packed.real.shape[0] == len(batch.rows) == packed.cache[0].self_attn.k.size(0)
                    assert packed.real[:, 0].any() and packed.cache.length == packed.real.size(1)
    assert not batch.rows and max(sizes) >= 4
    for r, want in zip(rows, alone):
        assert r.text.ids == [t for t in want if t != tok.eos_id]
        assert r.finish == ("stop" if tok.eos_id in want else "length")
    assert cancelled.finish is None and cancelled.steps < 10
    assert sorted(batch.session.free) == list(range(8)) and not batch.slot  # every slot free again, each once


def test_a_row_joins_only_when_the_packed_cache_fits_the_positions(runs):
    p = aiayn.pipeline(runs["lm"], device="cpu")
    model, n = p.model, p.model.cfg.max_len
    long = row([5] * 10, n - 10)
    wide = row([6] * 100, n - 100)
    batch = Batch(model, set(), Metrics(), slots=4)  # no end token: the rows run their whole budgets
    with torch.inference_mode():
        batch.update([long])
        assert not batch.admits([], wide)  # 100 columns + the long row's ~245 steps left > max_len
        while not batch.admits([], wide):
            batch.step()
        assert long.left <= n - 100
        batch.update([wide])
        batch.step()
    assert [r.steps for r in batch.rows] == [long.steps, 2]


def test_waiting_is_bounded_and_takes_what_came_within_the_wait():
    q = Waiting(3)
    assert q.offer([("a", 1), ("b", 1)]) and not q.offer([("c", 1), ("d", 1)]) and len(q) == 2  # all or none
    assert q.take(5, block=True, gather=0.0) == ["a", "b"]
    assert q.take(5, block=False, gather=0.0) == []
    later = threading.Timer(0.05, lambda: q.offer([("e", 1)]))
    assert q.offer([("d", 2)])
    later.start()
    start = time.monotonic()
    assert q.take(5, block=True, gather=0.5) == ["d", "e"]  # "e" came within the wait after "d"
    assert 0.4 < time.monotonic() - start < 2.0
    later.join()
    q.close()
    assert q.take(5, block=True, gather=0.0) in ([], None) and q.take(5, block=True, gather=0.0) is None
    assert not q.offer([("f", 1)])


def test_micro_batcher_groups_by_key_and_fails_only_the_bad_request():
    calls = []

    def call(key, inputs):
        calls.append((key, list(inputs)))
        if "bad" in inputs:
            raise ValueError("bad input")
        return [f"{key}:{x}" for x in inputs]

    batcher = MicroBatcher(call, max_batch=8, max_wait=0.2, max_queue=16, metrics=Metrics())
    answers, done = {}, threading.Event()

    def reply(name):
        def settle(result):
            answers[name] = result
            if len(answers) == 4:
                done.set()
        return settle

    for name, inputs, key in [("one", ["a", "b"], 1), ("two", ["c"], 2), ("three", ["bad"], 1), ("four", ["d"], 1)]:
        assert batcher.submit(Job(inputs, key, reply(name)))
    batcher.start()
    assert done.wait(10)
    batcher.stop(10)
    assert answers["one"] == ["1:a", "1:b"] and answers["two"] == ["2:c"] and answers["four"] == ["1:d"]
    assert isinstance(answers["three"], ValueError)
    assert (1, ["a", "b", "bad", "d"]) in calls  # one call for key 1, then each job alone


def test_the_thread_that_compiles_the_step_is_the_thread_that_steps_it(monkeypatch):
    """``serve --compile``: CUDA graph trees keep their state per thread, so the step is warmed (compiled, and
    recorded on a GPU) on the worker thread that then steps it, before the worker takes a request."""
    from aiayn.models.gpt import session as gpt_sessions
    from aiayn.serve.generation import ContinuousBatcher

    threads = []
    compiled_step = gpt_sessions.compiled_step

    def recorded(device, step):
        run = compiled_step(device, step)
        return lambda *args: threads.append(threading.get_ident()) or run(*args)

    monkeypatch.setattr(gpt_sessions, "compiled_step", recorded)
    torch.manual_seed(0)
    model = aiayn.build(aiayn.preset("gpt-tiny", vocab_size=64, max_len=32)).eval()
    worker = ContinuousBatcher(model, set(), max_batch=2, max_wait=0.0, max_queue=4, metrics=Metrics(),
                               compile=True, length=16)
    assert not threads  # nothing stepped while the worker was made, on this thread
    worker.start()
    assert threads and threading.get_ident() not in threads  # warmed by start(), not here
    done = threading.Event()
    events = []
    r = row([5, 9, 12], 4, events=events)
    r.send = lambda e: events.append(e) or (e[0] in ("done", "error") and done.set())
    assert worker.submit([r])
    assert done.wait(120), events
    worker.stop(timeout=60)
    assert r.finish == "length" and len(r.text.ids) == 4
    assert len(threads) >= 4 and set(threads) == {worker._thread.ident}  # warm-up and every step: one thread


def test_a_worker_that_fails_to_prepare_says_so_at_start():
    from aiayn.serve.batching import Worker

    class Broken(Worker):
        def prepare(self):
            raise RuntimeError("no compiler here")

        def loop(self):
            raise AssertionError("a worker that failed to prepare takes no work")

    with pytest.raises(RuntimeError, match="no compiler here"):
        Broken(1, 0.0, 1, Metrics()).start()
