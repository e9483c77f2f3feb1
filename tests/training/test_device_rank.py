"""Under ``torchrun`` every rank of a machine takes its own GPU, ``cuda:LOCAL_RANK``: checked with a pretended
machine of two GPUs (``torch.cuda``'s answers patched), so it runs anywhere and touches no real device."""

import pytest
import torch
import torch.distributed as dist

from aiayn.training import device, distributed


@pytest.fixture
def two_gpus(monkeypatch):
    """A machine with two CUDA GPUs, as far as ``torch.cuda``'s questions go; ``current_device`` is 0 (the
    default every process starts with), and auto is left to choose."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setenv("AIAYN_DEVICE", "auto")
    monkeypatch.delenv("LOCAL_RANK", raising=False)


@pytest.mark.parametrize("spec", ["cuda", "auto", None, " CUDA "])
def test_cuda_and_auto_mean_the_ranks_own_gpu(two_gpus, monkeypatch, spec):
    assert device.resolve(spec) == torch.device("cuda:0")  # one process: the current GPU
    monkeypatch.setenv("LOCAL_RANK", "1")  # the second rank on this machine
    assert device.resolve(spec) == torch.device("cuda:1")
    monkeypatch.setenv("LOCAL_RANK", "0")
    assert device.resolve(spec) == torch.device("cuda:0")


def test_a_named_gpu_wins_over_local_rank_and_one_past_the_last_is_refused(two_gpus, monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert device.resolve("cuda:0") == torch.device("cuda:0")
    assert device.resolve("cpu") == torch.device("cpu")
    with pytest.raises(ValueError, match=r"device='cuda:2': this machine has 2 CUDA GPU"):
        device.resolve("cuda:2")
    monkeypatch.setenv("LOCAL_RANK", "2")  # a rank without a GPU of its own
    with pytest.raises(ValueError, match=r"device='cuda:2'"):
        device.resolve("cuda")


def test_joining_the_group_sets_the_ranks_gpu_for_nccl(two_gpus, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    calls = []
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    monkeypatch.setattr(dist, "init_process_group", lambda backend, *a, **k: calls.append(("init", backend)))
    monkeypatch.setattr(torch.cuda, "set_device", lambda index: calls.append(("set_device", index)))
    monkeypatch.setattr(distributed, "_FSDP", distributed._FSDP)  # init sets it; put it back after
    distributed.init()
    assert calls == [("set_device", 1), ("init", "nccl")]
    calls.clear()
    distributed.init(device="cpu")  # gloo: no GPU to set
    assert calls == [("init", "gloo")]
