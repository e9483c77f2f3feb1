"""Nothing a user saved is lost, and a run that goes wrong stops with a message that says where."""

import copy
import os
import random
import re
import signal
import subprocess
import sys
import time

import pytest
import torch

import aiayn
from aiayn.io import digest
from aiayn.training import fit, load_train_state, save_train_state, train_state_info
from aiayn.training.session import FolderLocked, Session


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


def test_a_checkpoint_whose_digest_key_was_lost_is_refused(tmp_path):
    # a bit flipped in the key's name leaves valid JSON; a file that says what its digest covers must hold it
    from safetensors import safe_open
    from safetensors.torch import save_file

    path = aiayn.save(aiayn.build("gpt-tiny", vocab_size=16, n_layers=1), tmp_path / "m.safetensors")
    with safe_open(str(path), framework="pt") as f:
        meta, tensors = f.metadata(), {k: f.get_tensor(k) for k in f.keys()}
    meta["aiayn_sha257"] = meta.pop("aiayn_sha256")
    save_file(tensors, tmp_path / "other.safetensors", metadata=meta)
    with pytest.raises(ValueError, match=r"other\.safetensors is corrupted: .*config but holds no aiayn_sha256"):
        aiayn.load(tmp_path / "other.safetensors")
    del meta["aiayn_sha257"], meta["aiayn_digest_of"]  # a file from before digests: still loads
    save_file(tensors, tmp_path / "old.safetensors", metadata=meta)
    assert aiayn.load(tmp_path / "old.safetensors").cfg == aiayn.load(path).cfg


def test_a_checkpoint_whose_config_and_weights_disagree_is_refused_naming_the_keys(tmp_path):
    import json

    from safetensors import safe_open
    from safetensors.torch import save_file

    path = aiayn.save(aiayn.build("transformer-tiny", src_vocab_size=30, tgt_vocab_size=30), tmp_path / "m.safetensors")
    with safe_open(str(path), framework="pt") as f:
        meta, tensors = f.metadata(), {k: f.get_tensor(k) for k in f.keys()}
    config = json.loads(meta["aiayn_config"])
    config["n_encoder_layers"] = 3  # the config now asks for a layer the file does not hold
    text = json.dumps(config)  # a consistent file (its digest covers this config) whose weights still disagree
    save_file(tensors, tmp_path / "other.safetensors",
              metadata={**meta, "aiayn_config": text, "aiayn_sha256": digest(tensors, text)})
    with pytest.raises(ValueError, match=r"does not match its config: missing keys \['encoder\.layers\.2\."):
        aiayn.load(tmp_path / "other.safetensors")


def test_a_training_state_whose_bytes_changed_is_refused_before_anything_is_loaded(tmp_path):
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.Adam(model.parameters())
    save_train_state(tmp_path, model, optimizer, None, step=1, batches=1)
    flip_last_byte(tmp_path / "train_state.safetensors")
    fresh = torch.nn.Linear(3, 2)
    before = {k: v.clone() for k, v in fresh.state_dict().items()}
    with pytest.raises(ValueError, match=r"corrupted.*SHA-256"):
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


def nan_at(call):
    """A loss for a ``Linear(2, 1)``: finite, but at the given call sqrt'(0) = inf makes the gradient NaN."""
    calls = iter(range(100))

    def loss_fn(model, batch):
        out = model(torch.ones(1, 2)).sum()
        loss = (out * 0).sqrt() if next(calls) == call else out
        return loss, loss.detach(), 1

    return loss_fn


def test_a_non_finite_gradient_stops_before_the_update_and_keeps_the_last_save(tmp_path):
    model = torch.nn.Linear(2, 1)
    good = copy.deepcopy(model)  # the same 4 updates with no NaN after them: the weights that must survive
    fit(good, iter(range(100)), 4, torch.optim.SGD(good.parameters(), lr=0.1), nan_at(None), progress=False)
    expected = good.state_dict()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    saved = []

    def save(step, history):
        saved.append(step)
        save_train_state(tmp_path, model, optimizer, None, step, batches=step)

    with pytest.raises(FloatingPointError, match=r"gradient norm is nan at step 5.*saved after step 4 is intact"):
        fit(model, iter(range(100)), 10, optimizer, nan_at(4), progress=False, save=save, save_every=2)
    assert all(torch.equal(v, expected[k]) for k, v in model.state_dict().items())  # the 5th update never ran
    on_disk = torch.nn.Linear(2, 1)
    state = load_train_state(tmp_path, on_disk, torch.optim.SGD(on_disk.parameters(), lr=0.1), None)
    assert state["step"] == 4 and all(torch.equal(v, expected[k]) for k, v in on_disk.state_dict().items())
    assert saved == [2, 4]


def claimer(*folders):
    """A process that, for each of ``folders`` in turn, waits for a line on its stdin, claims the folder and
    prints ``locked`` or ``refused``; then sleeps until killed, keeping what it claimed."""
    code = ("import sys, time; from pathlib import Path; from aiayn.training.session import FolderLocked, lock\n"
            "print('ready', flush=True)\n"
            "for folder in sys.argv[1:]:\n"
            "    sys.stdin.readline()\n"
            "    try: lock(Path(folder)); print('locked', flush=True)\n"
            "    except FolderLocked: print('refused', flush=True)\n"
            "time.sleep(60)\n")
    job = subprocess.Popen([sys.executable, "-c", code, *map(str, folders)], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=True)
    assert job.stdout.readline().strip() == "ready"
    return job


def claim(*jobs):
    """Let ``jobs`` claim their next folder together: what each said."""
    for job in jobs:
        job.stdin.write("go\n")
    for job in jobs:
        job.stdin.flush()
    return [job.stdout.readline().strip() for job in jobs]


def stop(*jobs):
    for job in jobs:
        job.kill()  # SIGKILL: it never unlocks
        job.wait()


def test_a_second_process_cannot_train_in_a_locked_run_folder(tmp_path):
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    other = claimer(tmp_path)
    try:
        assert claim(other) == ["locked"]
        with pytest.raises(FolderLocked, match=f"another process \\(pid {other.pid}\\) is training in {tmp_path}"):
            Session(tmp_path, model, optimizer, None)
    finally:
        stop(other)
    assert (tmp_path / ".lock").read_text().strip() == str(other.pid)  # killed: its file stays
    run = Session(tmp_path, model, optimizer, None)  # but the owner is gone, and the system freed its lock
    assert (tmp_path / ".lock").read_text().strip() == str(os.getpid())
    run.unlock()  # training over: this process (a notebook, say) or another may resume the folder
    assert not (tmp_path / ".lock").exists()
    after = claimer(tmp_path)
    try:
        assert claim(after) == ["locked"]
    finally:
        stop(after)


def test_processes_claiming_a_free_run_folder_together_get_it_once(tmp_path):
    # four processes claim each of 50 folders at the same moment; a lock file read, then written, lets several in
    folders = [tmp_path / str(i) for i in range(50)]
    for folder in folders:
        folder.mkdir()
    jobs = [claimer(*folders) for _ in range(4)]
    try:
        for folder in folders:
            assert sorted(claim(*jobs)) == ["locked", "refused", "refused", "refused"], folder
    finally:
        stop(*jobs)


def test_a_nan_validation_loss_is_never_the_best_and_does_not_block_later_bests(tmp_path):
    model = aiayn.build("gpt-tiny", vocab_size=16, d_model=8, n_heads=2, n_layers=1, d_ff=16)
    run = Session(tmp_path, model, torch.optim.SGD(model.parameters(), lr=0.1), None)
    best = tmp_path / "best.safetensors"
    run.record({"step": 1, "val_loss": float("nan")})
    assert not best.exists()  # min() over [nan, ...] is nan, and nothing would ever be below it
    for step, loss, kept in ((2, 3.0, True), (3, 4.0, False), (4, float("nan"), False), (5, 1.0, True)):
        with torch.no_grad():
            model.embed.tokens.weight.fill_(step)
        run.record({"step": step, "val_loss": loss})
        assert (aiayn.load(best).embed.tokens.weight[0, 0].item() == step) == kept, step
    run.unlock()


def test_a_second_signal_says_nothing_was_saved(tmp_path):
    model = torch.nn.Linear(2, 1)
    run = Session(tmp_path, model, torch.optim.SGD(model.parameters(), lr=0.1), None)

    def loss(model, batch):  # two signals inside one update: the second stops at once
        if batch == 2:
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)
        out = model(torch.ones(1, 2)).sum()
        return out, out.detach(), 1

    with pytest.raises(KeyboardInterrupt, match=r"second signal, without saving.*from the last state saved") as e:
        run.fit(iter(range(9)), 5, loss)
    assert "the state is saved" not in str(e.value)


STEPS = 30
# One torch thread a process, as the one_thread fixture: with two each, on a shared 2-core machine these runs took
# minutes instead of seconds.
ONE_THREAD = {**os.environ, "OMP_NUM_THREADS": "1"}
# `aiayn train --resume` with a spy on the update its training loop starts after
RESUME = """\
import sys
import aiayn.training.session as runs
fit = runs.fit
def spy(*args, start, **kwargs):
    print(f"starts after update {start}", file=sys.stderr)
    return fit(*args, start=start, **kwargs)
runs.fit = spy
from aiayn.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _train(out):
    return subprocess.Popen([sys.executable, "-m", "aiayn", "train", "--task", "lm", "--steps", str(STEPS),
                             "--eval-every", "15", "--save-every", "1", "--batch-size", "4", "--block", "32",
                             "--no-progress", "--out", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=ONE_THREAD)


def _saved_step(run):
    try:
        return train_state_info(run)["step"]
    except FileNotFoundError:
        return 0


@pytest.mark.parametrize("seed", [0, pytest.param(1, marks=pytest.mark.slow)])  # another moment: -m slow
def test_a_run_killed_at_a_random_moment_resumes_to_the_weights_of_one_never_killed(tmp_path, seed):
    straight = _train(tmp_path / "a")  # trains beside the victim: one thread each, two cores
    victim = _train(tmp_path / "b")
    run = tmp_path / "b" / "lm-dates"
    try:
        rng = random.Random(seed)
        after = rng.randint(1, STEPS - 15)  # at least 15 updates before the end, however fast the machine
        deadline = time.time() + 300
        while _saved_step(run) < after and victim.poll() is None and time.time() < deadline:
            time.sleep(0.01)
        time.sleep(rng.uniform(0.0, 0.05))  # somewhere in the next update or in the middle of its save
        victim.send_signal(signal.SIGKILL)
        _, errors = victim.communicate(timeout=60)
        assert victim.returncode == -signal.SIGKILL, errors  # killed, not finished or crashed
        done = train_state_info(run)["step"]
        assert 0 < done < STEPS  # a state from the middle of training
        resumed = subprocess.run([sys.executable, "-c", RESUME, "train", "--resume", str(run), "--no-progress"],
                                 capture_output=True, text=True, timeout=600, env=ONE_THREAD, check=False)
        assert resumed.returncode == 0, resumed.stderr
        assert re.findall(r"starts after update (\d+)", resumed.stderr) == [str(done)]  # that state, not step 0
        _, errors = straight.communicate(timeout=600)
        assert straight.returncode == 0, errors
    finally:
        for process in (straight, victim):
            if process.poll() is None:  # a failure above: stop what still runs
                process.kill()
                process.wait()
    a = aiayn.load(tmp_path / "a" / "lm-dates").state_dict()
    b = aiayn.load(run).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    rows = [(tmp_path / d / "lm-dates" / "history.csv").read_text() for d in "ab"]
    strip = [[line.split(",")[:-1] for line in r.splitlines()] for r in rows]  # all but the seconds column
    assert strip[0] == strip[1]
