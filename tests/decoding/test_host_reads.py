"""Decoding reads nothing back from the device per step: without an end token nothing at all, with one
whether it may stop, every ``CHECK_EVERY`` steps; and its results are those of checking every step.

The CPU checks every step (a read is free there), so these tests set the CPU's interval to the
accelerators' and count the reads the decoding code makes (``item``, ``tolist``, ``bool``, ``int``,
``float``, ``nonzero``: each one waits for the device on CUDA).
"""

import importlib
import sys

import pytest
import torch
from torch.overrides import TorchFunctionMode

import aiayn
from aiayn.decoding import beam_search, greedy, sample
from aiayn.decoding.beam import beam_search_lm
from aiayn.decoding.sampling import sample_seq2seq

pytestmark = pytest.mark.usefixtures("one_thread")  # see conftest.py

steps_module = importlib.import_module("aiayn.decoding.loops")
K = steps_module.CHECK_EVERY
READS = {"item", "tolist", "__bool__", "__int__", "__float__", "__index__", "nonzero"}


class HostReads(TorchFunctionMode):
    """Counts the reads back to the host made by code in ``aiayn/decoding`` (not by the model's forward)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", None) in READS:
            frame = sys._getframe(1)
            while frame is not None and "/torch/" in frame.f_code.co_filename:
                frame = frame.f_back
            if frame is not None and "aiayn/decoding/" in frame.f_code.co_filename.replace("\\", "/"):
                self.count += 1
        return func(*args, **(kwargs or {}))


def reads_and_result(monkeypatch, every: int, decode):
    monkeypatch.setattr(steps_module, "ON_CPU", every)
    with HostReads() as mode:
        out = decode()
    return mode.count, out


def bias_end(model, head: str, eos: int, bias: float):
    """Add ``bias`` to the end token's logit, so a random model ends its rows at different steps."""
    def hook(module, inputs, logits):
        return logits + bias * (torch.arange(logits.size(-1)) == eos)

    getattr(model, head).register_forward_hook(hook)
    return model


def translator(bias: float):
    model = aiayn.build("transformer-tiny", src_vocab_size=30, tgt_vocab_size=30, d_model=32, n_heads=4).eval()
    return bias_end(model, "generator", model.cfg.eos_id, bias)


def lm(bias: float = 0.0):
    model = aiayn.build("gpt-tiny", vocab_size=40, d_model=32, n_heads=2, n_layers=2, d_ff=64, eos_id=3).eval()
    return bias_end(model, "lm_head", 3, bias)


SRC = torch.randint(3, 30, (5, 6), generator=torch.Generator().manual_seed(0))
MAX = 40
# a check every K steps reads "any ended?" and, when some have, where (nonzero); plus the entry checks
# and the final trim
BOUND = 2 * (MAX // K) + 4


def row_ends(ids: torch.Tensor, eos: int) -> list[int]:
    """The step each row ends at (its length when it does not)."""
    is_eos = ids == eos
    return [int(r.nonzero()[0]) + 1 if r.any() else r.numel() for r in is_eos]


@pytest.mark.parametrize("decode", ["greedy", "beam"])
def test_translation_reads_every_k_steps_and_decodes_as_checking_every_step(monkeypatch, decode):
    model = translator(bias=2.0 if decode == "greedy" else 0.9)
    run = (lambda: greedy(model, SRC, MAX)) if decode == "greedy" else (lambda: beam_search(model, SRC, 3, 0.6, MAX))
    reads, out = reads_and_result(monkeypatch, K, run)
    reads_each_step, expected = reads_and_result(monkeypatch, 1, run)
    ends = row_ends(expected, model.cfg.eos_id)
    assert len(set(ends)) > 1 and max(ends) > K  # rows end at different steps, some after a check
    assert torch.equal(out, expected)
    assert reads <= BOUND < reads_each_step


def test_sampled_translation_reads_every_k_steps(monkeypatch):
    model = translator(bias=2.0)
    gen = torch.Generator().manual_seed(0)
    reads, out = reads_and_result(monkeypatch, K, lambda: sample_seq2seq(model, SRC, MAX, generator=gen))
    assert reads <= BOUND
    assert (out[:, -1] != model.cfg.pad_id).any()  # trimmed to the last row's end


@pytest.mark.parametrize("eos", [None, 3, [3, 7]])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_language_model_reads_nothing_per_step_and_samples_as_checking_every_step(monkeypatch, eos, temperature):
    model = lm(bias=1.0)
    prompts = torch.randint(4, 40, (4, 3), generator=torch.Generator().manual_seed(1))

    def run():
        gen = torch.Generator().manual_seed(2)
        return sample(model, prompts, MAX, temperature, top_k=5, generator=gen, eos_id=eos)

    reads, out = reads_and_result(monkeypatch, K, run)
    _, expected = reads_and_result(monkeypatch, 1, run)
    assert torch.equal(out, expected)
    if eos is not None and temperature:
        assert max(row_ends(expected[:, 3:], 3)) > K  # the last row ends after a check
    # the prompt's checks and the one read of the tokens at the end; with an end token a check every K steps
    assert reads <= (3 if eos is None else MAX // K + 3)


@pytest.mark.parametrize("eos", [None, 3])
def test_language_model_beams_read_every_k_steps_and_search_as_checking_every_step(monkeypatch, eos):
    model = lm(bias=0.5)
    prompts = torch.randint(4, 40, (4, 3), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(4, 3, dtype=torch.long)
    mask[1, 0] = 0  # one prompt padded on the left
    run = lambda: beam_search_lm(model, prompts, MAX, 3, eos_id=eos, attention_mask=mask, return_scores=True)  # noqa: E731
    reads, (ids, scores) = reads_and_result(monkeypatch, K, run)
    _, (expected_ids, expected_scores) = reads_and_result(monkeypatch, 1, run)
    assert torch.equal(ids, expected_ids) and torch.equal(scores, expected_scores)
    if eos is not None:
        assert len(set(row_ends(expected_ids, eos))) > 1
    assert reads <= BOUND + 3  # the prompt's checks
