"""The CTranslate2 cases at toy sizes: CTranslate2's models, converted in memory from the Hugging Face ones, make
ours' tokens at float32 (greedy, beam search, GPT-2 generation); in int8 every side takes every step and the
agreement with float32 is recorded; without CTranslate2 (or off the CPU) ``aiayn bench`` skips the cases and says
how to install it; the page reports no memory for a side PyTorch cannot see. No time is asserted."""

import sys

import pytest
import torch

from aiayn.benchmark import run_bench
from aiayn.benchmark.cases import CASES
from aiayn.benchmark.cases.common import small_transformer
from aiayn.benchmark.cases.ct2 import agreeing_prefix, agreement
from aiayn.benchmark.harness import Settings, Unavailable, machine, measure, write_result
from aiayn.benchmark.peers import ct2
from aiayn.benchmark.peers.hf import marian
from aiayn.benchmark.report import page

pytest.importorskip("transformers")
pytest.importorskip("ctranslate2")  # pip install "aiayn[bench]" (the test extra has it)

pytestmark = [pytest.mark.parity, pytest.mark.usefixtures("one_thread")]  # see conftest.py

CPU = torch.device("cpu")
FLOAT32 = ["gpt2-generate-ct2", "decode-greedy-ct2", "decode-beam-ct2"]
INT8 = [f"{name}-int8" for name in FLOAT32]


@pytest.mark.parametrize("name", FLOAT32)
def test_at_float32_ctranslate2_and_hugging_face_make_ours_tokens(name):
    case = CASES[name](True, CPU)
    assert case.sides[0].name == "aiayn" and len(case.sides) == 3
    ours = case.sides[0].run()
    assert ours.shape == (case.units // case.extra["new_tokens"], case.extra["new_tokens"])  # every step taken
    for side in case.sides[1:]:
        assert torch.equal(side.run(), ours), side.name
        assert case.checks[side.name]["ok"], case.checks[side.name]
    assert case.target is not None and case.target.ratio == 1.0


@pytest.mark.parametrize("name", INT8)
def test_in_int8_every_side_takes_every_step_and_the_agreement_with_float32_is_recorded(name):
    case = CASES[name](True, CPU)
    assert case.sides[0].name == "aiayn" and len(case.sides) == 2  # ours against CTranslate2 alone
    peer = case.sides[1].name
    assert peer.startswith("ctranslate2.") and case.checks[peer]["ok"]
    shares, prefix = case.extra["agreement_with_float32"], case.extra["agreeing_prefix_with_float32"]
    assert set(shares) == set(prefix) == {"aiayn", peer} and all(0 <= v <= 1 for v in shares.values())
    assert all(0 <= v <= case.extra["new_tokens"] for v in prefix.values())
    assert case.sides[0].run().shape == case.sides[1].run().shape
    assert case.flops is not None and case.flops > 0  # counted on ours at float32


def test_compiled_in_int8_ours_gives_the_eager_int8_tokens_beside_ctranslate2_int8():
    case = CASES["decode-greedy-ct2-int8-compiled"](True, CPU)  # the step compiled with the int8 products opaque
    assert [s.name for s in case.sides] == ["aiayn", "aiayn eager", "ctranslate2.Translator"]
    assert all(c["ok"] and "agreement_with_ours" in c for c in case.checks.values())  # int8: shares, not equality
    assert case.extra["precision"] == "int8" and case.extra["first_call_s"] >= 0
    assert set(case.extra["agreement_with_float32"]) == {s.name for s in case.sides}


def test_agreement_counts_equal_positions_and_the_prefix_counts_them_up_to_the_first_difference():
    got, expected = torch.tensor([[1, 2, 3, 4], [1, 9, 3, 4]]), torch.tensor([[1, 2, 3, 5], [1, 2, 3, 4]])
    assert agreement(got, expected) == 6 / 8 and agreeing_prefix(got, expected) == (3 + 1) / 2
    assert agreement(got, expected[:, :3]) == agreeing_prefix(got, expected[:, :3]) == 0.0  # not the same work


def test_the_page_reports_no_memory_for_ctranslate2_and_the_int8_agreement(tmp_path):
    r = measure(CASES["decode-greedy-ct2-int8"](True, CPU), Settings(peak_flops=1e10, rounds=1, warmup=0))
    assert r["sides"]["aiayn"]["torch_memory"] and not r["sides"]["ctranslate2.Translator"]["torch_memory"]
    r.update(quick=True, machine=machine(), matmul_peak_flops=1e10)  # as run_bench adds them
    write_result(r, tmp_path)
    text = page(tmp_path, tmp_path / "benchmarks.md")
    row = next(line for line in text.splitlines() if line.startswith("| `decode-greedy-ct2-int8`"))
    assert row.endswith(" MiB / n/a |")
    assert "Tokens equal to ours' at float32, position by position: aiayn" in text
    assert "before the first difference, per sequence of 6: aiayn" in text


def test_without_ctranslate2_or_off_the_cpu_the_cases_are_skipped_saying_why(tmp_path, monkeypatch):
    with pytest.raises(Unavailable, match="CPU only"):
        CASES["decode-greedy-ct2"](True, torch.device("cuda"))  # refused before anything touches the device
    monkeypatch.setitem(sys.modules, "ctranslate2", None)  # `import ctranslate2` now raises ImportError
    with pytest.raises(Unavailable, match=r'pip install "aiayn\[bench\]"'):
        CASES["gpt2-generate-ct2"](True, CPU)
    said = []
    out = run_bench(["decode-beam-ct2-int8"], out=tmp_path, rounds=1, quick=True, docs=None, apart=False,
                    echo=said.append)  # in this process: the patched import is seen
    assert out == {} and not list(tmp_path.glob("*.json"))
    assert said[-1].startswith("decode-beam-ct2-int8: skipped: needs CTranslate2")


def test_the_vocabulary_names_ids_both_ways_and_refuses_bad_specials():
    vocab = ct2.Vocabulary(6, {0: "<pad>", 1: "<s>", 2: "</s>"}, bos=1, eos=2)
    ids = torch.tensor([[3, 4, 2], [5, 0, 1]])
    assert vocab.tokens(ids) == [["3", "4", "</s>"], ["5", "<pad>", "<s>"]]
    assert torch.equal(vocab.ids(vocab.tokens(ids)), ids)
    assert (vocab.bos_token, vocab.eos_token, vocab.convert_ids_to_tokens(0)) == ("<s>", "</s>", "<pad>")
    assert vocab.get_vocab()["4"] == 4 and len(vocab.get_vocab()) == 6
    with pytest.raises(ValueError, match="outside the vocabulary"):
        ct2.Vocabulary(6, {6: "<pad>"}, bos=1, eos=2)
    with pytest.raises(ValueError, match="repeat a name"):
        ct2.Vocabulary(6, {0: "3"}, bos=1, eos=2)


def test_converting_a_marian_model_leaves_its_config_as_it_was():
    cfg = small_transformer(True)
    hf = marian(cfg)
    before = hf.config.to_dict()
    vocab = ct2.Vocabulary(cfg.tgt_vocab_size, {cfg.pad_id: "<pad>", cfg.bos_id: "<s>", cfg.eos_id: "</s>"},
                           bos=cfg.bos_id, eos=cfg.eos_id)
    ct2.translator(hf, vocab, "int8")
    assert hf.config.to_dict() == before and not hasattr(hf.config, "normalize_before")
    with pytest.raises(ValueError, match="precision must be one of"):
        ct2.translator(hf, vocab, "float16")
