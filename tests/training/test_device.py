"""Naming a device and moving batches there (aiayn.training.device), on a machine with or without a GPU."""

from collections import namedtuple

import pytest
import torch

from aiayn.training import device

Pair = namedtuple("Pair", ["src", "tgt"])
NO_GPU = not torch.cuda.is_available()


def test_move_reaches_every_tensor_in_nested_tuples_lists_dicts_and_namedtuples():
    a, b, c = torch.arange(3), torch.ones(2, 2), torch.zeros(1)
    batch = ({"ids": a, "meta": [b, "name", 7], "pair": Pair(src=c, tgt=None)}, (a,), 3.5)
    moved = device.move(batch, torch.device("meta"))  # a device every machine has: every tensor must go
    assert isinstance(moved, tuple) and isinstance(moved[1], tuple) and moved[2] == 3.5
    ids, meta, pair = moved[0]["ids"], moved[0]["meta"], moved[0]["pair"]
    assert isinstance(pair, Pair) and pair.tgt is None and pair.src.device.type == "meta"
    assert ids.device.type == meta[0].device.type == moved[1][0].device.type == "meta"
    assert meta[1:] == ["name", 7] and ids.shape == a.shape and meta[0].shape == b.shape


def test_move_to_the_cpu_hands_back_the_same_tensors_without_copying():
    a, b = torch.arange(3), torch.ones(2)
    moved = device.move(Pair(src=a, tgt={"x": [b]}), "cpu")
    assert isinstance(moved, Pair) and moved.src is a and moved.tgt["x"][0] is b


def test_of_is_where_the_model_lives():
    assert device.of(torch.nn.Linear(2, 2).to(torch.device("cpu"))) == torch.device("cpu")
    assert device.of(torch.nn.Linear(2, 2, device="meta")).type == "meta"
    assert device.of(torch.nn.BatchNorm1d(2, affine=False)) == torch.device("cpu")  # buffers only
    assert device.of(torch.nn.ReLU()) == torch.device("cpu")  # nothing at all


@pytest.mark.parametrize("spec", ["gpu", "cuda:x", "cuda:", "tpu", "cuda:-1"])
def test_resolve_refuses_a_name_it_does_not_know_naming_the_argument(spec):
    with pytest.raises(ValueError, match=rf"device={spec!r} must be one of auto, cpu, cuda"):
        device.resolve(spec)


@pytest.mark.skipif(not NO_GPU, reason="this machine has a CUDA GPU")
@pytest.mark.parametrize("spec", ["cuda", "cuda:0", "CUDA:1"])
def test_without_cuda_resolve_refuses_cuda_and_says_so(spec):
    with pytest.raises(ValueError, match=r"device='cuda(:\d)?': this machine has no CUDA GPU"):
        device.resolve(spec)


@pytest.mark.skipif(not NO_GPU or torch.backends.mps.is_available(), reason="this machine has a GPU")
def test_without_a_gpu_auto_is_the_cpu():
    assert device.resolve("auto") == device.resolve(None) == device.resolve(" Auto ") == torch.device("cpu")
    assert device.resolve(torch.device("cpu")) == torch.device("cpu")


def test_aiayn_device_says_what_auto_means_and_an_explicit_device_wins(monkeypatch):
    monkeypatch.setenv("AIAYN_DEVICE", "cpu")
    assert device.resolve("auto") == device.resolve(None) == torch.device("cpu")
    monkeypatch.setenv("AIAYN_DEVICE", "auto")
    assert device.resolve("auto").type in ("cpu", "cuda", "mps")
    monkeypatch.setenv("AIAYN_DEVICE", "gpu")
    with pytest.raises(ValueError, match="AIAYN_DEVICE='gpu' must be one of"):
        device.resolve("auto")
    assert device.resolve("cpu") == torch.device("cpu")  # named: the variable is not read
