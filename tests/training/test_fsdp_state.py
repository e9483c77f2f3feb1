"""The training state of a model sharded by FSDP (two ranks, gloo on the CPU): each rank saves its own shards
through ``torch.distributed.checkpoint``, and the state resumes under any number of ranks.

A run of 4 updates on two ranks keeps its state after update 2. Resumed on two ranks it makes updates 3 and 4
bit for bit (the same shards, the same reduction order); loaded in one process (no process group) every weight
and Adam moment is the gathered one, bit for bit, and updates 3 and 4 (two batches per update) agree with the
two ranks' to rounding: the ranks sum the gradient norm from their shards' parts and the halves of each
gradient in another order, so the last bits differ (as in ``test_distributed.py``'s ``FSDP_TOL``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

pytestmark = [
    pytest.mark.skipif(not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
                       reason="needs torch.distributed with gloo"),
    pytest.mark.usefixtures("one_thread"),  # the runs compared bit for bit sum in the same order (conftest.py)
]

# A tiny GPT trained on a fixed stream of random tokens: batch k is the same whoever reads it.
TRAIN = """
import json
import shutil
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

import aiayn
from aiayn.training import adamw_cosine, distributed
from aiayn.models.checkpoint import unique_tensors
from aiayn.training.session import Session


def stream(start):
    k = start
    while True:
        g = torch.Generator().manual_seed(k)
        yield torch.randint(0, 64, (2, 17), generator=g)
        k += 1


def loss_fn(model, batch):
    logits = model(batch[:, :-1])  # (B, T, V)
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten(), reduction="sum")
    return loss, loss.detach(), batch[:, 1:].numel()


def gathered(session):
    \"\"\"Whole weights and Adam moments (rank 0; every rank takes part).\"\"\"
    out = {f"model/{k}": v for k, v in unique_tensors(session.model).items()}
    for name, p in session.model.named_parameters():
        for key, value in session.optimizer.state[p].items():
            value = distributed.full(value)
            if distributed.is_main():
                out[f"optim/{name}/{key}"] = value.clone()
    return out


mode, run, accum = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
distributed.init(fsdp=True)
torch.manual_seed(0)
model = aiayn.build("gpt-tiny", vocab_size=64, max_len=32, d_model=32, n_heads=2, n_layers=2, d_ff=64)
optimizer, scheduler = adamw_cosine(model, 1e-2, 4, 1)
session = Session(run, model, optimizer, scheduler, accum=accum)
if mode == "resume":
    session.restore()
    if not distributed.active():
        save_file(gathered(session), str(run / "loaded.safetensors"))
batches = distributed.shard(stream(session.position))  # this rank's share, taken once (as recipes do)
for steps in (2, 4) if mode == "train" else (4,):
    history = session.fit(batches, steps, loss_fn, unlock=steps == 4, progress=False)
    tensors = gathered(session)
    if distributed.is_main() and steps == 2:  # the state after update 2, and what it holds, kept aside
        shutil.copytree(run / "train_state", run.parent / "at2" / "train_state")
        save_file(tensors, str(run.parent / "at2.safetensors"))
    distributed.barrier()
if distributed.is_main():
    save_file(tensors, str(run / "final.safetensors"))
    (run / "losses.json").write_text(json.dumps([r["loss"] for r in history]))
print("done", distributed.rank(), distributed.world_size())
"""


def launch(script: Path, args: list[str], nproc: int) -> str:
    """``script ARGS`` under ``torchrun --standalone --nproc_per_node NPROC`` (1: a plain process)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    run = ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"] if nproc > 1 else []
    done = subprocess.run([sys.executable, *run, str(script), *args], env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.fixture(scope="module")
def straight(tmp_path_factory) -> Path:
    """Two ranks, 4 updates of one batch each; the state after update 2 copied to ``at2/``."""
    root = tmp_path_factory.mktemp("fsdp")
    (root / "train.py").write_text(TRAIN)
    assert launch(root / "train.py", ["train", str(root / "straight"), "1"], 2).count("done") == 2
    return root


def copy_of_state_at_2(root: Path, name: str) -> Path:
    shutil.copytree(root / "at2", root / name)
    return root / name


def test_each_rank_writes_its_own_shards_and_no_rank_the_whole_model(straight):
    state = straight / "straight" / "train_state"
    meta = json.loads((state / "meta.json").read_text())
    assert meta["step"] == 4 and meta["world_size"] == 2
    files = sorted(p.name for p in state.glob("*.safetensors"))
    assert len(files) == 2 and sorted(meta["files"]) == files  # one per rank, each with its SHA-256
    whole = load_file(straight / "straight" / "final.safetensors")
    name = "model/decoder.layers.0.ff.fc1.weight"  # (64, 32): each rank keeps 32 rows
    parts = [load_file(state / f) for f in files]
    assert [tuple(p[name].shape) for p in parts] == [(32, 32), (32, 32)]
    assert torch.equal(torch.cat([p[name] for p in parts]), whole[name])
    assert not (straight / "straight" / "train_state.safetensors").exists()
    assert not list(straight.glob("straight/.train_state.*"))  # the temporary and the replaced folders are gone


def test_two_ranks_resume_bit_for_bit(straight):
    run = copy_of_state_at_2(straight, "resume2")
    launch(straight / "train.py", ["resume", str(run), "1"], 2)
    assert json.loads((run / "losses.json").read_text()) == json.loads(
        (straight / "straight" / "losses.json").read_text())
    mine, theirs = load_file(run / "final.safetensors"), load_file(straight / "straight" / "final.safetensors")
    assert mine.keys() == theirs.keys() and all(torch.equal(mine[k], theirs[k]) for k in mine)


def test_one_process_loads_the_shards_whole_and_goes_on(straight):
    run = copy_of_state_at_2(straight, "resume1")
    launch(straight / "train.py", ["resume", str(run), "2"], 1)  # two batches per update, as the two ranks took
    loaded, saved = load_file(run / "loaded.safetensors"), load_file(straight / "at2.safetensors")
    assert loaded.keys() == saved.keys() and all(torch.equal(loaded[k], saved[k]) for k in saved)
    one = json.loads((run / "losses.json").read_text())
    two = json.loads((straight / "straight" / "losses.json").read_text())
    assert one[:2] == two[:2]  # the history came with the state
    assert one[2:] == pytest.approx(two[2:], rel=1e-5)
    mine, theirs = load_file(run / "final.safetensors"), load_file(straight / "straight" / "final.safetensors")
    worst = max((mine[k] - theirs[k]).abs().max().item() for k in theirs if k.startswith("model/"))
    assert worst < 1e-4
    # the first save without FSDP replaced the sharded state with the single file
    assert (run / "train_state.safetensors").is_file() and not (run / "train_state").exists()


def test_a_corrupted_or_incomplete_sharded_state_is_refused_by_name(straight):
    import aiayn
    from aiayn.training import adamw_cosine, load_train_state, train_state_info

    def fresh():
        model = aiayn.build("gpt-tiny", vocab_size=64, max_len=32, d_model=32, n_heads=2, n_layers=2, d_ff=64)
        return model, *adamw_cosine(model, 1e-2, 4, 1)

    run = copy_of_state_at_2(straight, "damaged")
    state = run / "train_state"
    shard = sorted(state.glob("*.safetensors"))[1]
    data = bytearray(shard.read_bytes())
    data[-1] ^= 1
    shard.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=rf"{shard.name} do not match the SHA-256"):
        load_train_state(run, *fresh())
    shard.unlink()
    with pytest.raises(ValueError, match="incomplete or mixed"):
        load_train_state(run, *fresh())

    # a crash between the two renames of a save: the complete state set aside is found
    run = copy_of_state_at_2(straight, "swapped")
    (run / "train_state").rename(run / ".train_state.old")
    (run / ".train_state.new").mkdir()  # the half-written next one is not read
    assert train_state_info(run)["step"] == 2

    other = aiayn.build("gpt-tiny", vocab_size=64, max_len=32, d_model=32, n_heads=2, n_layers=3, d_ff=64)
    with pytest.raises(ValueError, match=r"does not fit the model and optimizer: missing \[.model/decoder\.layers\.2"):
        load_train_state(run, other, *adamw_cosine(other, 1e-2, 4, 1))


def test_the_newest_of_a_file_and_a_folder_is_resumed(straight, tmp_path):
    run = copy_of_state_at_2(straight, "both")
    # an older single-file state beside the folder (a crash before the save that wrote the folder removed it)
    from aiayn.training.state import _META

    save_file({"rng/torch": torch.get_rng_state()}, str(run / "train_state.safetensors"),
              metadata={_META: json.dumps({"step": 1, "batches": 2, "extra": {}})})
    from aiayn.training import train_state_info

    assert train_state_info(run)["step"] == 2


BUILD = """
import torch
import aiayn
from torch.distributed.tensor import DTensor
from aiayn.training import distributed
from aiayn.models.checkpoint import unique_tensors

distributed.init(fsdp=True)
cfg = dict(vocab_size=64, max_len=32, d_model=32, n_heads=2, n_layers=2, d_ff=64, positional="rope")
torch.manual_seed(0)
whole = aiayn.build("gpt-tiny", **cfg)  # what one process starts from
after = torch.get_rng_state()
torch.manual_seed(0)
model = distributed.build_sharded(lambda: aiayn.build("gpt-tiny", **cfg), param_dtype=torch.bfloat16)
assert torch.equal(torch.get_rng_state(), after)  # the generator goes on as after one build, on every rank
assert all(isinstance(p, DTensor) and p.device.type == "cpu" for p in model.parameters())
gathered, expected = unique_tensors(model), unique_tensors(whole)
if distributed.is_main():
    assert gathered.keys() == expected.keys() and all(torch.equal(gathered[k], expected[k]) for k in expected)
buffers = dict(whole.named_buffers())  # rope's frequencies are no weight: sent apart
assert buffers and all(torch.equal(b, buffers[k]) for k, b in model.named_buffers())

seen = []  # MixedPrecisionPolicy: weights gathered and computed in bf16, shards and gradients float32
model.decoder.layers[0].ff.fc1.register_forward_pre_hook(lambda m, a: seen.append(m.weight.dtype))
model(torch.randint(0, 64, (2, 8))).float().sum().backward()
assert seen == [torch.bfloat16], seen
assert all(p.dtype == p.grad.dtype == torch.float32 for p in model.parameters())
print("ok", distributed.rank())
"""


def test_a_model_built_on_the_meta_device_starts_from_one_process_weights_and_computes_in_bf16(tmp_path):
    """``build_sharded``: rank 0 builds on the CPU, every rank shards a meta-device copy and takes its shards;
    ``param_dtype=bfloat16`` gathers bf16 weights for the forward and keeps float32 shards and gradients."""
    (tmp_path / "build.py").write_text(BUILD)
    assert launch(tmp_path / "build.py", [], 2).count("ok") == 2


def test_weights_two_modules_share_stay_shared_across_moves_to_and_from_the_meta_device():
    # a move to or from meta gives each module attribute a parameter of its own: a GPT's head would then train
    # apart from its token table (and outside FSDP's all-reduce) after build_sharded's to_empty
    import aiayn
    from aiayn.training.distributed import kept_ties

    model = aiayn.build("gpt-tiny", vocab_size=50, n_layers=1)
    assert model.lm_head.weight is model.embed.tokens.weight
    model.to("meta")
    assert model.lm_head.weight is not model.embed.tokens.weight  # what kept_ties is for
    model = aiayn.build("gpt-tiny", vocab_size=50, n_layers=1)
    with kept_ties(model):
        model.to("meta")
    assert model.lm_head.weight is model.embed.tokens.weight
    with kept_ties(model):
        model.to_empty(device="cpu")
    assert model.lm_head.weight is model.embed.tokens.weight and model.lm_head.weight.device.type == "cpu"
