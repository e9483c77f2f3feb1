"""Nothing a user saved is lost, and a run that goes wrong stops with a message that says where."""

import random
import signal
import subprocess
import sys
import time

import pytest
import torch

import aiayn
from aiayn.cli.runs import FolderLocked, Run
from aiayn.training import fit, load_train_state, save_train_state


def flip_last_byte(path):
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01  # inside the last tensor's bytes: the header still parses
    path.write_bytes(bytes(data))


def test_a_checkpoint_whose_bytes_changed_is_refused_by_its_digest(tmp_path):
    model = aiayn.build("transformer-tiny", src_vocab_size=30, tgt_vocab_size=30)
    path = aiayn.save(model, tmp_path / "m.safetensors")
    aiayn.load(path)  # intact: loads
    flip_last_byte(path)
    with pytest.raises(ValueError, match=r"m\.safetensors is corrupted.*SHA-256.*not loaded"):
        aiayn.load(path)


def test_a_checkpoint_whose_config_and_weights_disagree_is_refused_naming_the_keys(tmp_path):
    import json

    from safetensors import safe_open
    from safetensors.torch import save_file

    path = aiayn.save(aiayn.build("transformer-tiny", src_vocab_size=30, tgt_vocab_size=30), tmp_path / "m.safetensors")
    with safe_open(str(path), framework="pt") as f:
        meta, tensors = f.metadata(), {k: f.get_tensor(k) for k in f.keys()}
    config = json.loads(meta["aiayn_config"])
    config["n_encoder_layers"] = 3  # the config now asks for a layer the file does not hold
    save_file(tensors, tmp_path / "other.safetensors", metadata={**meta, "aiayn_config": json.dumps(config)})
    with pytest.raises(ValueError, match=r"does not match its config: missing keys \['encoder\.layers\.2\."):
        aiayn.load(tmp_path / "other.safetensors")


def test_a_training_state_whose_bytes_changed_is_refused_before_anything_is_loaded(tmp_path):
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.Adam(model.parameters())
    save_train_state(tmp_path, model, optimizer, None, step=1, batches=1)
    flip_last_byte(tmp_path / "train_state.safetensors")
    fresh = torch.nn.Linear(3, 2)
    before = {k: v.clone() for k, v in fresh.state_dict().items()}
    with pytest.raises(ValueError, match="corrupted.*SHA-256"):
        load_train_state(tmp_path, fresh, torch.optim.Adam(fresh.parameters()), None)
    assert all(torch.equal(before[k], v) for k, v in fresh.state_dict().items())  # never half-loaded


def test_an_averaged_checkpoint_carries_its_own_digest(tmp_path):
    a = aiayn.build("transformer-tiny", src_vocab_size=30, tgt_vocab_size=30)
    b = aiayn.build("transformer-tiny", src_vocab_size=30, tgt_vocab_size=30)
    from aiayn.training import average_checkpoints

    out = average_checkpoints([aiayn.save(a, tmp_path / "a"), aiayn.save(b, tmp_path / "b")], tmp_path / "avg")
    mean = aiayn.load(out)
    name = "encoder.layers.0.ff.fc1.weight"
    torch.testing.assert_close(mean.state_dict()[name], (a.state_dict()[name] + b.state_dict()[name]) / 2)


def test_a_non_finite_gradient_stops_before_the_update_and_keeps_the_last_save(tmp_path):
    model = torch.nn.Linear(2, 1)
    calls = iter(range(100))
    saved = []

    def loss_fn(model, batch):  # finite loss; at the 5th update sqrt'(0) = inf gives a NaN gradient
        n = next(calls)
        out = model(torch.ones(1, 2)).sum()
        loss = (out * 0).sqrt() if n == 4 else out
        return loss, loss.detach(), 1

    with pytest.raises(FloatingPointError, match="gradient norm is nan at step 5.*saved after step 4 is intact"):
        fit(model, iter(range(100)), 10, torch.optim.SGD(model.parameters(), lr=0.1), loss_fn, progress=False,
            save=lambda step, history: saved.append(step), save_every=2)
    assert saved == [2, 4]


def test_a_second_process_cannot_train_in_a_locked_run_folder(tmp_path):
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (tmp_path / ".lock").write_text(f"{other.pid}\n")
        with pytest.raises(FolderLocked, match=f"another process \\(pid {other.pid}\\) is training in {tmp_path}"):
            Run(tmp_path, model, optimizer, None)
    finally:
        other.kill()
        other.wait()
    run = Run(tmp_path, model, optimizer, None)  # the owner is gone: the stale lock is taken over
    assert (tmp_path / ".lock").read_text().strip() == str(__import__("os").getpid())
    run.unlock()  # training over: this process (a notebook, say) or another may resume the folder
    assert not (tmp_path / ".lock").exists()


def _train(out, *extra):
    return [sys.executable, "-m", "aiayn", "train", "--task", "lm", "--steps", "40", "--eval-every", "20",
            "--save-every", "1", "--batch-size", "4", "--block", "32", "--no-progress", "--out", str(out), *extra]


@pytest.mark.parametrize("seed", [0, 1])
def test_a_run_killed_at_a_random_moment_resumes_to_the_weights_of_one_never_killed(tmp_path, seed):
    straight = subprocess.run(_train(tmp_path / "a"), capture_output=True, text=True, timeout=600)
    assert straight.returncode == 0, straight.stderr
    victim = subprocess.Popen(_train(tmp_path / "b"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    state = tmp_path / "b" / "lm-dates" / "train_state.safetensors"
    deadline = time.time() + 300
    while not state.exists() and victim.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(random.Random(seed).uniform(0.0, 1.0))  # somewhere in the middle of training (or of a save)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    resumed = subprocess.run([sys.executable, "-m", "aiayn", "train", "--resume", str(tmp_path / "b" / "lm-dates"),
                              "--no-progress"], capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    a = aiayn.load(tmp_path / "a" / "lm-dates").state_dict()
    b = aiayn.load(tmp_path / "b" / "lm-dates").state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    rows = [(tmp_path / d / "lm-dates" / "history.csv").read_text() for d in "ab"]
    strip = [[line.split(",")[:-1] for line in r.splitlines()] for r in rows]  # all but the seconds column
    assert strip[0] == strip[1]
