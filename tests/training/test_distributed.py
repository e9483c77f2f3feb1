"""Data-parallel training under ``torchrun`` (two ranks, gloo on the CPU) against one process.

Two ranks taking one batch each per update must make the same updates as one process accumulating two
batches, whether each rank holds the whole model (DDP) or a shard of it (FSDP), and a run must resume
from its checkpoint under either number of processes and either way of splitting. The comparisons are
of the final weights, to 1e-6.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from aiayn.cli import main
from aiayn.data.synthetic import make_pairs
from aiayn.training import distributed
from launching import launch

pytestmark = [
    pytest.mark.skipif(not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
                       reason="needs torch.distributed with gloo"),
    pytest.mark.usefixtures("one_thread"),  # the runs compared bit for bit sum in the same order (conftest.py)
]


def torchrun(args: list[str], nproc: int = 2) -> str:
    """``torchrun --standalone --nproc_per_node nproc -m aiayn ARGS``; its standard output."""
    return launch(["-m", "aiayn", *args], nproc)


def weights(run: Path) -> dict[str, torch.Tensor]:
    return load_file(run / "model.safetensors")


def assert_same_weights(a: Path, b: Path, tol: float = 1e-6) -> None:
    wa, wb = weights(a), weights(b)
    assert wa.keys() == wb.keys()
    worst = max((wa[k] - wb[k]).abs().max().item() for k in wa)
    assert worst < tol, f"weights of {a.name} and {b.name} differ by up to {worst:.2e}"


# Under FSDP the gradient norm (for clipping) is summed from the shards' parts, so it differs from one process's
# in its last bits. Most weights still agree to ~1e-7, but Adam divides each gradient by its own running size: a
# key bias, whose true gradient is zero (softmax ignores a constant added to every score), is moved by about the
# learning rate (1e-2 here) in a direction set by rounding noise alone, and the key projection follows it. After 4
# updates those entries differ by up to ~2e-5; a real fault (a shard not averaged, a step skipped) moves weights
# by ~1e-2, which the bound below still catches.
FSDP_TOL = 1e-4


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    file = tmp_path_factory.mktemp("corpus") / "dates.txt"
    file.write_text("".join(f"{s} = {t}\n" for s, t in make_pairs("dates", 600, 0, seed=3)[0]))
    return file


def lm_args(corpus: Path, out: Path, name: str, steps: int, accum: int) -> list[str]:
    return ["train", "--task", "lm", "--data", str(corpus), "--tokenizer", "char", "--batch-size", "4", "--block",
            "32", "--lr", "1e-2", "--warmup", "2", "--steps", str(steps), "--accum", str(accum), "--eval-every", "0",
            "--save-every", "2", "--no-progress", "--out", str(out), "--name", name]


@pytest.fixture(scope="module")
def single(corpus, tmp_path_factory) -> Path:
    """One process, 2 batches per update, 4 updates."""
    out, threads = tmp_path_factory.mktemp("single"), torch.get_num_threads()
    torch.set_num_threads(1)
    assert main(lm_args(corpus, out, "one", steps=4, accum=2)) == 0
    torch.set_num_threads(threads)
    return out / "one"


def test_two_ranks_equal_one_process_on_the_same_global_batch(corpus, single, tmp_path):
    stdout = torchrun(lm_args(corpus, tmp_path, "two", steps=4, accum=1))
    assert_same_weights(single, tmp_path / "two")
    assert os.listdir(tmp_path) == ["two"], "rank 1 made a run folder of its own"
    assert stdout.count("data lm-dates:") == 1, "a rank other than 0 printed"
    one = (single / "history.csv").read_text().splitlines()
    two = (tmp_path / "two" / "history.csv").read_text().splitlines()
    loss = [float(line.split(",")[1]) for line in one[1:]], [float(line.split(",")[1]) for line in two[1:]]
    assert loss[0] == pytest.approx(loss[1], abs=1e-5)  # every update's loss is over both ranks' batches
    assert loss[0][-1] < loss[0][0] - 0.5  # it trained: equal weights are not two untouched models


def test_a_two_rank_run_resumes_in_one_process_and_the_other_way(corpus, single, tmp_path):
    torchrun(lm_args(corpus, tmp_path, "from-two", steps=2, accum=1))
    assert main(["train", "--resume", str(tmp_path / "from-two"), "--steps", "4", "--no-progress"]) == 0
    assert_same_weights(single, tmp_path / "from-two")  # one process took 2 batches per update, as the 2 ranks did

    assert main(lm_args(corpus, tmp_path, "from-one", steps=2, accum=2)) == 0
    torchrun(["train", "--resume", str(tmp_path / "from-one"), "--steps", "4", "--no-progress"])
    assert_same_weights(single, tmp_path / "from-one")


def test_token_count_batches_are_shared_out_whole(tmp_path):
    """Translation batches hold a varying number of tokens; the update divides by all of them."""
    args = ["train", "--steps", "3", "--max-tokens", "256", "--n-test", "8", "--set", "dropout=0", "--eval-every", "0",
            "--no-progress", "--out", str(tmp_path)]
    assert main([*args, "--accum", "2", "--name", "one"]) == 0
    torchrun([*args, "--accum", "1", "--name", "two"])
    assert_same_weights(tmp_path / "one", tmp_path / "two")


@pytest.mark.slow
def test_fsdp_makes_the_same_updates_and_resumes_across_ways_of_splitting(corpus, single, tmp_path):
    # validation and the best checkpoint every 2 updates: under FSDP they take both ranks
    fsdp = [*lm_args(corpus, tmp_path, "fsdp", steps=4, accum=1), "--fsdp", "--eval-every", "2"]
    stdout = torchrun(fsdp)
    assert_same_weights(single, tmp_path / "fsdp", FSDP_TOL)
    assert (tmp_path / "fsdp" / "best.safetensors").is_file() and "validation loss" in stdout
    assert "sample (temperature 0.8" in stdout  # rank 0 sampled from the model gathered after training

    torchrun([*lm_args(corpus, tmp_path, "from-fsdp", steps=2, accum=1), "--fsdp"])
    assert main(["train", "--resume", str(tmp_path / "from-fsdp"), "--steps", "4", "--no-progress"]) == 0
    assert_same_weights(single, tmp_path / "from-fsdp", FSDP_TOL)  # the state file holds whole tensors

    assert main(lm_args(corpus, tmp_path, "to-fsdp", steps=2, accum=2)) == 0
    torchrun(["train", "--resume", str(tmp_path / "to-fsdp"), "--steps", "4", "--no-progress", "--fsdp"])
    # each rank took its shard of weights and Adam's moments
    assert_same_weights(single, tmp_path / "to-fsdp", FSDP_TOL)


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs (NCCL takes one GPU per rank)")
@pytest.mark.parametrize("way", ["ddp", "fsdp"])
def test_on_two_gpus_nccl_ranks_make_the_updates_of_one_gpu(way, corpus, tmp_path):
    """One rank per GPU over NCCL (DDP, or FSDP2's shards) against one process on one GPU: the same updates,
    and the checkpoint (whole tensors) resumes on the CPU. TF32 rounding bounds the agreement."""
    gpu = ["--device", "cuda"]
    assert main([*lm_args(corpus, tmp_path, "one", steps=4, accum=2), *gpu]) == 0
    torchrun([*lm_args(corpus, tmp_path, way, steps=4, accum=1), *gpu, *(["--fsdp"] if way == "fsdp" else [])])
    assert_same_weights(tmp_path / "one", tmp_path / way, 1e-3)
    assert main(["train", "--resume", str(tmp_path / way), "--steps", "5", "--device", "cpu", "--no-progress"]) == 0


def test_one_process_is_not_distributed():
    assert not distributed.active() and distributed.world_size() == 1 and distributed.is_main()
    assert list(distributed.shard(iter(range(5)))) == [0, 1, 2, 3, 4]
    assert distributed.broadcast({"a": 1}) == {"a": 1}
    assert distributed.all_sum([1.0, 2.0]) == [1.0, 2.0]
