"""The llama.cpp cases: the tokenizer written beside our exported Llama names every id as a Llama tokenizer does;
without llama-cpp-python or llama.cpp's converter ``aiayn bench`` skips the cases, saying how to get them; where
both are (``benchmarks/llamacpp.sh``), llama.cpp running the GGUF its own converter made from our folder gives
our greedy tokens in f32, and in q8_0 takes every step. No time is asserted."""

import importlib.util
import os
import sys

import pytest
import torch

from aiayn.benchmark import run_bench
from aiayn.benchmark.cases import CASES
from aiayn.benchmark.harness import Unavailable
from aiayn.benchmark.peers import llamacpp

pytestmark = pytest.mark.usefixtures("one_thread")

CPU = torch.device("cpu")


def test_the_tokenizer_names_every_id_as_a_llama_tokenizer_does(tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    llamacpp.write_tokenizer(tmp_path, 300)
    tok = tokenizers.Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    names = [tok.id_to_token(i) for i in range(300)]
    assert names[:3] == ["<unk>", "<s>", "</s>"] and names[3] == "<0x00>" and names[258] == "<0xFF>"
    assert names[259] == "\u2581t259" and len(set(names)) == 300 and tok.get_vocab_size() == 300
    llamacpp.write_tokenizer(tmp_path, 64)  # too few ids for the byte pieces: the specials and the rest
    assert tokenizers.Tokenizer.from_file(str(tmp_path / "tokenizer.json")).id_to_token(63) == "\u2581t63"
    with pytest.raises(ValueError, match="vocab_size=2"):
        llamacpp.write_tokenizer(tmp_path, 2)


def test_without_llama_cpp_or_its_converter_the_cases_are_skipped_saying_why(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # `import llama_cpp` now raises ImportError
    with pytest.raises(Unavailable, match=r"benchmarks/llamacpp\.sh"):
        CASES["llama-124m-generate-llamacpp"](True, CPU)
    said = []
    out = run_bench(["llama-124m-generate-llamacpp-int8"], out=tmp_path, rounds=1, quick=True, docs=None,
                    apart=False, echo=said.append)  # in this process: the patched import is seen
    assert out == {} and not list(tmp_path.glob("*.json"))
    assert said[-1].startswith("llama-124m-generate-llamacpp-int8: skipped: needs llama-cpp-python")
    monkeypatch.setenv("LLAMA_CPP_DIR", str(tmp_path))  # a folder without the converter
    with pytest.raises(Unavailable, match=r"holds no convert_hf_to_gguf\.py"):
        llamacpp.converter()


built = pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None or not os.environ.get("LLAMA_CPP_DIR"),
    reason="llama-cpp-python and LLAMA_CPP_DIR: bash benchmarks/llamacpp.sh")


@built
def test_llama_cpp_makes_our_greedy_tokens_in_f32_and_takes_every_step_in_q8_0():
    pytest.importorskip("transformers")
    case = CASES["llama-124m-generate-llamacpp"](True, CPU)
    ours, theirs = case.sides[0].run(), case.sides[1].run()
    assert case.sides[1].name == "llama.cpp f32" and torch.equal(theirs, ours) and case.checks["llama.cpp f32"]["ok"]
    assert case.target is not None and case.target.ratio == 0.8
    assert case.extra["ceiling_tokens_per_s"]["aiayn"] > 0
    q8 = CASES["llama-124m-generate-llamacpp-int8"](True, CPU)
    assert q8.sides[1].run().shape == ours.shape and q8.checks["llama.cpp q8_0"]["ok"]
    assert set(q8.extra["agreement_with_float32"]) == {"aiayn", "llama.cpp q8_0"}


def test_the_page_gives_each_side_the_ceiling_of_the_bytes_it_reads():
    from aiayn.benchmark.report import _ceiling

    r = {"sides": {"aiayn": {"throughput": 10.0}, "aiayn eager": {"throughput": 5.0},
                   "llama.cpp q8_0": {"throughput": 30.0}}}
    extra = {"ceiling_tokens_per_s": {"aiayn": 20.0, "llama.cpp q8_0": 40.0}, "memory_bandwidth_bytes_per_s": 2e10,
             "weight_bytes_per_token": {"aiayn": 2**21, "llama.cpp q8_0": 2**20}}
    text = _ceiling(r, extra)
    assert "aiayn 2.0 MiB = 20.0 tokens/s; llama.cpp q8_0 1.0 MiB = 40.0 tokens/s" in text
    assert text.endswith("reached: aiayn 50%, aiayn eager 25%, llama.cpp q8_0 75%.")  # eager: ours' bytes
