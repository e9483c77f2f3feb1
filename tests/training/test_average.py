import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

import aiayn
from aiayn.training.average import average_checkpoints


def tiny(seed: int, **overrides):
    torch.manual_seed(seed)
    return aiayn.build("transformer-tiny", src_vocab_size=20, tgt_vocab_size=20, **overrides)


def test_average_of_two_checkpoints_is_the_mean_of_every_parameter(tmp_path):
    a, b = tiny(1), tiny(2)
    assert not torch.equal(a.generator.weight, b.generator.weight)
    aiayn.save(a, tmp_path / "a", metadata={"step": "100"})  # a run folder
    file_b = aiayn.save(b, tmp_path / "b.safetensors")  # a file
    out = average_checkpoints([tmp_path / "a", file_b], tmp_path / "avg")
    assert out == tmp_path / "avg" / "model.safetensors"

    avg = aiayn.load(tmp_path / "avg")
    assert avg.cfg == a.cfg
    pa, pb = dict(a.named_parameters()), dict(b.named_parameters())
    for name, p in avg.named_parameters():
        torch.testing.assert_close(p, (pa[name] + pb[name]) / 2, rtol=0, atol=1e-6, msg=name)
    assert avg.generator.weight is avg.tgt_embed.tokens.weight is avg.src_embed.tokens.weight
    with safe_open(str(out), framework="pt") as f:
        assert f.metadata()["step"] == "100"  # the first file's metadata is kept


def test_dtypes_are_kept_and_integer_tensors_come_from_the_first_file(tmp_path):
    meta = {"format": "pt", "aiayn_config": "{}"}
    first = {"w": torch.tensor([1.0, 2.0], dtype=torch.float16), "step": torch.tensor([7])}
    second = {"w": torch.tensor([2.0, 5.0], dtype=torch.float16), "step": torch.tensor([9])}
    save_file(first, tmp_path / "1.safetensors", metadata=meta)
    save_file(second, tmp_path / "2.safetensors", metadata=meta)
    out = load_file(average_checkpoints([tmp_path / "1.safetensors", tmp_path / "2.safetensors"],
                                        tmp_path / "avg.safetensors"))
    assert out["w"].dtype == torch.float16
    assert out["w"].tolist() == [1.5, 3.5]
    assert out["step"].tolist() == [7]


def test_different_configs_are_refused_naming_both_files(tmp_path):
    file_a = aiayn.save(tiny(1), tmp_path / "a.safetensors")
    file_b = aiayn.save(tiny(2, d_ff=256), tmp_path / "b.safetensors")
    with pytest.raises(ValueError, match=r"a\.safetensors.*b\.safetensors.*d_ff"):
        average_checkpoints([file_a, file_b], tmp_path / "avg.safetensors")
    assert not (tmp_path / "avg.safetensors").exists()


def test_different_tensors_are_refused(tmp_path):
    meta = {"format": "pt", "aiayn_config": "{}"}
    save_file({"w": torch.zeros(2)}, tmp_path / "1.safetensors", metadata=meta)
    save_file({"w": torch.zeros(3)}, tmp_path / "2.safetensors", metadata=meta)
    save_file({"v": torch.zeros(2)}, tmp_path / "3.safetensors", metadata=meta)
    with pytest.raises(ValueError, match=r"1\.safetensors.*2\.safetensors.*'w'"):
        average_checkpoints([tmp_path / "1.safetensors", tmp_path / "2.safetensors"], tmp_path / "out.safetensors")
    with pytest.raises(ValueError, match=r"lacks \['w'\] and adds \['v'\]"):
        average_checkpoints([tmp_path / "1.safetensors", tmp_path / "3.safetensors"], tmp_path / "out.safetensors")
    with pytest.raises(ValueError, match="at least one"):
        average_checkpoints([], tmp_path / "out.safetensors")
