"""Every training task resumes after Ctrl-C to exactly the weights and log of a run never stopped."""

import contextlib
import importlib
import os
import signal

import pytest
import torch

import aiayn
from aiayn import recipes

# dropout 0.1 everywhere (detr-tiny has none) so the restored random generator matters
TINY = {"d_model": 32, "n_heads": 2, "d_ff": 64, "dropout": 0.1}
TASKS = {  # recipe module, its batch stream, tokenizer class (None: no tokenizer), settings, model fields
    "mlm": ("aiayn.recipes.mlm", "batches", "WordPieceTokenizer", {"n_train": 300, "n_test": 20, "batch_size": 4},
            dict(n_layers=2, **TINY)),
    "denoise": ("aiayn.recipes.denoise", "batches", "BPETokenizer",
                {"n_train": 300, "n_test": 10, "batch_size": 4, "vocab_size": 300},
                dict(n_encoder_layers=1, n_decoder_layers=1, **TINY)),
    "image": ("aiayn.recipes.image", "batches", None, {"n_train": 200, "n_test": 40, "batch_size": 16},
              dict(n_layers=2, **TINY)),
    # 64 px shapes, 1 + 1 layers
    "detect": ("aiayn.recipes.detect", "shape_batches", None,
               {"n_test": 8, "batch_size": 4, "image_size": 64, "warmup": 4},
               dict(n_encoder_layers=1, n_decoder_layers=1, **TINY)),
}


ON_GPU = pytest.param("mlm", "cuda", id="mlm-cuda", marks=[
    pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")])


@pytest.mark.parametrize("task, where", [(task, "cpu") for task in sorted(TASKS)] + [ON_GPU])
def test_a_run_stopped_by_ctrl_c_resumes_to_the_weights_of_one_never_stopped(task, where, tmp_path, monkeypatch,
                                                                              one_thread, request):
    # on a GPU dropout draws from the device's own generator, which the state must keep as well as the CPU's
    module_name, stream, tokenizer, settings, model = TASKS[task]
    module = importlib.import_module(module_name)
    # Hugging Face's trainers break ties between equally frequent merges in hash-map order, so two
    # trainings on the same text may differ by a few pieces; both runs here share one tokenizer (a
    # resumed run reads its own from the run folder).
    if tokenizer is not None:
        tokenizer_class = getattr(module, tokenizer)
        trained = {}

        def train_once(*args, **kwargs):
            if "tok" not in trained:
                trained["tok"] = real_train(*args, **kwargs)
            return trained["tok"]

        real_train = tokenizer_class.train
        monkeypatch.setattr(tokenizer_class, "train", train_once)
    common = dict(steps=12, eval_every=6, save_every=100, progress=False, verbose=False, model=model, device=where,
                  **settings)
    if where == "cuda":  # bit for bit needs kernels that sum in a fixed order: SDPA's memory-efficient and flash
        # backward passes accumulate with atomics, the math path does not; and deterministic cuBLAS where it can
        from torch.nn.attention import SDPBackend, sdpa_kernel

        monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        deterministic = contextlib.ExitStack()
        deterministic.enter_context(sdpa_kernel(SDPBackend.MATH))
        torch.use_deterministic_algorithms(True, warn_only=True)
        deterministic.callback(torch.use_deterministic_algorithms, False)
        request.addfinalizer(deterministic.close)
    straight = recipes.train(task, out=str(tmp_path / "a"), **common)
    real = getattr(module, stream)

    def interrupted(*args, **kwargs):  # Ctrl-C while the 8th batch is in use
        for i, batch in enumerate(real(*args, **kwargs)):
            if i == 7:
                os.kill(os.getpid(), signal.SIGINT)
            yield batch

    monkeypatch.setattr(module, stream, interrupted)
    with pytest.raises(KeyboardInterrupt, match=r"after step 8.*aiayn train --resume"):
        recipes.train(task, out=str(tmp_path / "b"), **common)
    monkeypatch.undo()
    (run,) = (tmp_path / "b").iterdir()
    resumed = recipes.resume(run, progress=False, verbose=False)
    a, b = aiayn.load(straight["run"]).state_dict(), aiayn.load(resumed["run"]).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert [r["loss"] for r in resumed["history"]] == [r["loss"] for r in straight["history"]]
    assert resumed["validation"] == straight["validation"]


def test_a_refused_resume_leaves_the_runs_settings_as_they_were(tmp_path, one_thread):
    # args.json is what the next resume reads: a resume that is refused (too few steps, a folder another process
    # trains in) must not rewrite it, or the run could not be resumed as it was any more
    import json
    import subprocess
    import sys

    run = recipes.train("copy", steps=4, n_train=100, n_test=5, max_tokens=64, warmup=2, out=str(tmp_path),
                        model={"d_model": 16, "n_heads": 2, "d_ff": 32}, progress=False, verbose=False)["run"]
    before = (run / "args.json").read_text()
    with pytest.raises(ValueError, match=r"steps=2 is fewer than the 4 updates .* give --steps 4 or more"):
        recipes.resume(run, steps=2, progress=False, verbose=False)
    assert (run / "args.json").read_text() == before
    code = "import sys, time; from pathlib import Path; from aiayn.training.session import lock\n" \
           "lock(Path(sys.argv[1])); print('locked', flush=True); time.sleep(60)"
    other = subprocess.Popen([sys.executable, "-c", code, str(run)], stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout.readline().strip() == "locked"
        with pytest.raises(RuntimeError, match="another process"):
            recipes.resume(run, steps=9, progress=False, verbose=False)
    finally:
        other.kill()
        other.wait()
    assert (run / "args.json").read_text() == before
    assert len(recipes.resume(run, steps=6, progress=False, verbose=False)["history"]) == 6  # and it resumes
    assert json.loads((run / "args.json").read_text())["steps"] == 6
    (run / "train_state.safetensors").unlink()  # as a run killed before its first save leaves its folder
    with pytest.raises(FileNotFoundError, match=r"nothing to resume .*killed before its first save.*start it again"):
        recipes.resume(run, progress=False, verbose=False)
