"""Under ``torchrun`` a rank may not be sent to another rank's GPU, and NCCL's group is bound to the rank's own:
checked with a pretended machine of two GPUs (``torch.cuda``'s answers patched), so it runs anywhere and touches
no real device."""

import pytest
import torch
import torch.distributed as dist

from aiayn.training import device, distributed


@pytest.fixture
def second_rank_of_two(monkeypatch):
    """Rank 1 of 2 on a machine with two CUDA GPUs, as far as ``torch.cuda``'s questions go."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setenv("AIAYN_DEVICE", "auto")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")


def test_a_gpu_named_under_torchrun_must_be_the_ranks_own(second_rank_of_two):
    # `--device cuda:0` would put both ranks on GPU 0
    with pytest.raises(ValueError, match=r"device='cuda:0' under torchrun: .*this rank's is cuda:1.*'cuda'"):
        device.resolve("cuda:0")
    assert device.resolve("cuda:1") == device.resolve("cuda") == torch.device("cuda:1")


def test_nccl_is_bound_to_the_ranks_gpu_and_a_wrong_one_is_refused_before_joining(second_rank_of_two, monkeypatch):
    calls = []
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    monkeypatch.setattr(dist, "init_process_group", lambda backend, **k: calls.append((backend, k)))
    monkeypatch.setattr(torch.cuda, "set_device", lambda index: calls.append(("set_device", index)))
    monkeypatch.setattr(distributed, "_FSDP", distributed._FSDP)  # init sets it; put it back after
    distributed.init(device="cuda")
    assert calls == [("set_device", 1), ("nccl", {"device_id": torch.device("cuda:1")})]
    calls.clear()
    with pytest.raises(ValueError, match="under torchrun"):
        distributed.init(device="cuda:0")
    assert calls == []
