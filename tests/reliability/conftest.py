"""Runs the reliability suite damages: a tiny run of each kind it needs (a GPT language model, a translation
Transformer, an image classifier) and a Hugging Face GPT-2 folder exported from the first, each made once per
session (per pytest-xdist worker) when a test first asks for it.

A case never touches these: it copies what it needs into its own ``tmp_path`` before damaging it.
"""

import sys
from pathlib import Path
from unittest import mock

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))  # reliability_kit.py: the runner, snapshots and setups

TINY = {"progress": False, "verbose": False, "steps": 3, "warmup": 1, "eval_every": 0, "model": {"d_model": 32}}


class Runs:
    """``runs["lm"]``, ``["copy"]``, ``["image"]``, ``["mlm"]``, ``["detect"]``: tiny runs (three updates each:
    what matters is what the folders hold, not what the models learnt); ``["hf"]``: the lm run exported as a Hugging
    Face GPT-2 folder.
    Each is made on first use, so a test file that needs only one does not wait for the others."""

    def __init__(self, out: Path) -> None:
        self.out, self.made = out, {}

    def __getitem__(self, kind: str) -> Path:
        if kind not in self.made:
            self.made[kind] = Path(self._make(kind))
        return self.made[kind]

    def _make(self, kind: str):
        import aiayn.viz
        from aiayn import recipes
        from aiayn.convert.folder import export

        out = str(self.out)
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            if kind == "lm":
                return recipes.train("lm", n_train=200, n_test=5, block=16, batch_size=4, out=out, **TINY)["run"]
            if kind == "copy":  # without drawing attention.png (seconds of matplotlib), which no case reads
                with mock.patch.object(aiayn.viz, "plot_attention_grid", lambda *a, **k: Path(a[3])):
                    return recipes.train("copy", n_train=300, n_test=10, max_tokens=128, out=out, **TINY)["run"]
            if kind == "image":
                return recipes.train("image", n_train=64, n_test=16, batch_size=8, out=out, **TINY)["run"]
            if kind == "mlm":  # a BERT: what embed and the embeddings endpoint read
                return recipes.train("mlm", n_train=50, n_test=5, batch_size=4, out=out, **TINY)["run"]
            if kind == "detect":
                return recipes.train("detect", image_size=48, max_objects=1, n_test=2, batch_size=2, out=out,
                                     **TINY)["run"]
            if kind == "hf":
                return export(self["lm"], self.out / "hf-gpt2", "hf")
        finally:
            torch.set_num_threads(threads)
        raise KeyError(kind)


@pytest.fixture(scope="session")
def runs(tmp_path_factory) -> Runs:
    return Runs(tmp_path_factory.mktemp("reliability-runs"))
