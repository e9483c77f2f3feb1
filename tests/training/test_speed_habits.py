"""GPU speed habits, checked on the CPU: validation in training's precision, one all-reduce and one read
per update under several ranks, and peak memory, tokens/s and MFU in the records of a CUDA run."""

import importlib.util
import json
from pathlib import Path

import pytest
import torch

import aiayn
from aiayn import recipes
from aiayn.recipes.translation import Translation
from aiayn.training import distributed, fit
from aiayn.training import loop as loop_module
from aiayn.training.loop import gpu_stats, training_flops_per_token, vendor_peak

pytestmark = pytest.mark.usefixtures("one_thread")  # see conftest.py


def regression(n=20):
    g = torch.Generator().manual_seed(1)
    w = torch.randn(4, 1, generator=g)
    for _ in range(n):
        x = torch.randn(8, 4, generator=g)
        yield x, x @ w


def squared_error(model, batch):
    x, y = batch
    loss = (model(x).float() - y).pow(2).sum()
    return loss, loss.detach(), x.size(0)


def test_validation_runs_under_the_autocast_training_runs_under(tmp_path, monkeypatch):
    seen = []
    validate = Translation.validate

    def spied(self, model):
        hook = model.register_forward_pre_hook(
            lambda m, args: seen.append((torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu"))))
        try:
            return validate(self, model)
        finally:
            hook.remove()

    monkeypatch.setattr(Translation, "validate", spied)
    recipes.train("copy", steps=2, warmup=1, max_tokens=64, n_train=32, n_test=4, bf16=True, save_every=0,
                  out=str(tmp_path), progress=False, verbose=False,
                  model={"d_model": 16, "n_heads": 2, "d_ff": 32, "n_encoder_layers": 1, "n_decoder_layers": 1})
    assert seen and all(s == (True, torch.bfloat16) for s in seen)


def fake_ranks(monkeypatch) -> list[torch.Tensor]:
    """``torch.distributed`` active with one rank of gloo, its all-reduce recorded (a sum over one rank is the
    tensor itself)."""
    reduced = []
    for name, value in (("active", True), ("world_size", 1), ("rank", 0), ("is_main", True)):
        monkeypatch.setattr(distributed, name, lambda v=value: v)
    monkeypatch.setattr(distributed, "wrap", lambda model: model)
    monkeypatch.setattr(torch.distributed, "get_backend", lambda *a, **k: "gloo")
    monkeypatch.setattr(torch.distributed, "all_reduce", lambda t, *a, **k: reduced.append(t.clone()))
    return reduced


def count_reads(monkeypatch) -> list[str]:
    reads = []
    for name in ("item", "tolist", "__float__", "__int__", "__bool__"):
        method = getattr(torch.Tensor, name)

        def counted(self, *args, _method=method, _name=name, **kwargs):
            reads.append(_name)
            return _method(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counted)
    return reads


def test_under_several_ranks_an_update_all_reduces_once_and_reads_once(monkeypatch):
    """The losses, the token count and the stop flag go to the other ranks in one all-reduce, and come back
    to the host with the gradient norm in one read; the records are those of one process."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    alone = fit(model, regression(), 3, torch.optim.SGD(model.parameters(), lr=0.01), squared_error, accum=2,
                progress=False)
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    reduced = fake_ranks(monkeypatch)
    reads = count_reads(monkeypatch)
    history = fit(model, regression(), 3, torch.optim.SGD(model.parameters(), lr=0.01), squared_error, accum=2,
                  progress=False)
    reads = list(reads)
    monkeypatch.undo()
    assert len(reduced) == 3 and reads == ["tolist"] * 3
    assert reduced[0][2] == 16 and reduced[0][3] == 0  # the tokens of both batches; no signal
    assert [{**r, "seconds": 0} for r in history] == [{**r, "seconds": 0} for r in alone]


@pytest.mark.parametrize(("name", "peak"), [("NVIDIA H100 80GB HBM3", 989e12), ("NVIDIA H200", 989e12),
                                            ("NVIDIA A100-SXM4-80GB", 312e12), ("NVIDIA H100 PCIe", None),
                                            ("NVIDIA GeForce RTX 4090", None)])
def test_the_vendor_peak_is_looked_up_by_device_name(name, peak):
    assert vendor_peak(name) == peak


def test_gpu_stats_are_peak_memory_tokens_per_second_and_mfu_against_the_vendor_peak(monkeypatch):
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda *a, **k: 3 * 2**30)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a, **k: "NVIDIA H100 80GB HBM3")
    cuda = torch.device("cuda", 0)
    assert gpu_stats(cuda, 1000, 0.5, 6e9) == {"peak_gib": 3.0, "tokens_per_s": 2000.0,
                                               "mfu": round(6e9 * 2000 / 989e12, 4)}
    assert gpu_stats(cuda, 1000, 0.5, 6e9, ranks=2)["mfu"] == round(6e9 * 2000 / (2 * 989e12), 4)
    assert "mfu" not in gpu_stats(cuda, 1000, 0.5, None)
    assert gpu_stats(torch.device("cpu"), 1000, 0.5, 6e9) == {}


def test_training_flops_per_token_is_6n_plus_the_attention_scores():
    """nanoGPT's estimate_mfu: 6 N + 12 L T C per token (N the weights the tokens pass through, not the
    position table; its lm head is tied to the token table, whose matmul counts)."""
    model = aiayn.build("gpt-tiny", vocab_size=40, d_model=32, n_heads=2, n_layers=2, d_ff=64, max_len=16)
    c, layers, t = 32, 2, 16
    weights = layers * (4 * c * c + 2 * c * 64) + c * 40  # attention and feed-forward matrices, the lm head
    assert training_flops_per_token(model) == 6 * weights + 12 * layers * t * c
    classifier = aiayn.build("gpt-tiny", vocab_size=40, d_model=32, n_heads=2, n_layers=2, d_ff=64,
                             head="classification", num_labels=2)
    assert training_flops_per_token(classifier) is None and training_flops_per_token(torch.nn.Linear(2, 2)) is None


def test_on_cuda_the_records_and_history_csv_carry_peak_memory_tokens_per_second_and_mfu(monkeypatch, tmp_path):
    """The device check says CUDA (the batches stay where they are): every record gets gpu_stats."""
    monkeypatch.setattr(loop_module.device, "of", lambda model: torch.device("cuda", 0))
    monkeypatch.setattr(loop_module.device, "move", lambda batch, where: batch)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda *a, **k: 2**29)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a, **k: "NVIDIA H200")
    calls = []
    real = loop_module.gpu_stats
    monkeypatch.setattr(loop_module, "gpu_stats", lambda *a, **k: calls.append(a) or real(*a, **k))
    model = torch.nn.Linear(4, 1)
    history = fit(model, regression(), 3, torch.optim.SGD(model.parameters(), lr=0.01), squared_error,
                  progress=False, flops_per_token=1e9)
    assert len(calls) >= 3 and all(a[3] == 1e9 for a in calls)
    for r in history:
        assert r["peak_gib"] == 0.5 and r["tokens_per_s"] > 0 and r["mfu"] == round(1e9 * r["tokens_per_s"] / 989e12, 4)
    from aiayn.training.session import to_csv

    header = to_csv(history).splitlines()[0].split(",")
    assert {"peak_gib", "tokens_per_s", "mfu"} <= set(header) and header[-1] == "seconds"


def load_gpu_script():
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu.py"
    if not path.is_file():
        pytest.skip("benchmarks/ is not next to the tests")
    spec = importlib.util.spec_from_file_location("gpu_benchmark", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_gpu_benchmark_decodes_compiled_through_the_static_cache(monkeypatch, tmp_path):
    """``benchmarks/gpu.py decode``'s compiled side is ``compile=True`` (:mod:`aiayn.decoding.static`: the static
    cache and the step compiled, CUDA graphs on a GPU), not a compiled forward over the growing cache (compiling
    is spied on here, not run: it takes a minute on this CPU)."""
    gpu = load_gpu_script()
    asked, sample = [], gpu.sample
    monkeypatch.setattr(gpu, "sample",
                        lambda *a, **k: asked.append(k["compile"]) or sample(*a, **{**k, "compile": False}))
    assert gpu.main(["decode", "--device", "cpu", "--quick", "--sides", "eager,compiled", "--rounds", "1",
                     "--out", str(tmp_path)]) == 0
    assert False in asked and True in asked
    results = json.loads((tmp_path / "gpu.json").read_text())["results"]
    assert results["gpt2-decode-compiled"]["tokens_as_eager"] == 1.0  # (eager here too: the same tokens)
