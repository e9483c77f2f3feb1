"""Every training task resumes after Ctrl-C to exactly the weights and log of a run never stopped."""

import importlib
import os
import signal

import pytest
import torch

import aiayn
from aiayn.cli.train import resume_training

TINY = {"d_model": 32, "n_heads": 2, "d_ff": 64}
TASKS = {  # module, function, its batch stream, tokenizer class (None: no tokenizer), sizes
    "mlm": ("aiayn.cli.mlm", "train_mlm", "batches", "WordPieceTokenizer",
            dict(n_train=300, n_test=20, batch_size=4, n_layers=2, **TINY)),
    "denoise": ("aiayn.cli.denoise", "train_denoise", "batches", "BPETokenizer",
                dict(n_train=300, n_test=10, batch_size=4, n_encoder_layers=1, n_decoder_layers=1, vocab_size=300,
                     **TINY)),
    "image": ("aiayn.cli.image", "train_image", "batches", None,
              dict(n_train=200, n_test=40, batch_size=16, n_layers=2, show=0, **TINY)),
    # 64 px shapes, 1 + 1 layers; dropout 0.1 (detr-tiny has none) so the restored generator matters
    "detect": ("aiayn.cli.detect", "train_detr", "shape_batches", None,
               dict(n_test=8, batch_size=4, image_size=64, n_encoder_layers=1, n_decoder_layers=1, warmup=4,
                    **TINY)),
}


@pytest.mark.parametrize("task", sorted(TASKS))
def test_a_run_stopped_by_ctrl_c_resumes_to_the_weights_of_one_never_stopped(task, tmp_path, monkeypatch, one_thread):
    module_name, fn_name, stream, tokenizer, extra = TASKS[task]
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
    common = dict(steps=12, eval_every=6, save_every=100, progress=False, verbose=False, dropout=0.1, **extra)
    straight = getattr(module, fn_name)(out=tmp_path / "a", **common)
    real = getattr(module, stream)

    def interrupted(*args, **kwargs):  # Ctrl-C while the 8th batch is in use
        for i, batch in enumerate(real(*args, **kwargs)):
            if i == 7:
                os.kill(os.getpid(), signal.SIGINT)
            yield batch

    monkeypatch.setattr(module, stream, interrupted)
    with pytest.raises(KeyboardInterrupt, match="after step 8.*aiayn train --resume"):
        getattr(module, fn_name)(out=tmp_path / "b", **common)
    monkeypatch.undo()
    (run,) = (tmp_path / "b").iterdir()
    resumed = resume_training(run, progress=False, verbose=False, show=0)
    a, b = aiayn.load(straight["run"]).state_dict(), aiayn.load(resumed["run"]).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert [r["loss"] for r in resumed["history"]] == [r["loss"] for r in straight["history"]]
    assert resumed["validation"] == straight["validation"]
