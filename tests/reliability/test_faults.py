"""Faults while training: a process killed with SIGKILL in the middle of its saves, a second process training
into the same folder, and the commands printed for the user to paste (a folder with a space in its name).
"""

import random
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from reliability_kit import ENV, TINY_LM, aiayn, in_process

FOREVER = ["--steps", "100000", "--save-every", "1"]  # trains until killed, saving after every update


def start(args: list[str], cwd: Path, log: Path) -> subprocess.Popen:
    with open(log, "wb") as out:
        return subprocess.Popen([sys.executable, "-m", "aiayn", *args], cwd=cwd, env=ENV, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def wait_for_state(run: Path, process: subprocess.Popen, log: Path, after: int = 0, timeout: float = 180) -> int:
    """Wait until ``run`` holds a training state past update ``after`` (checking every state seen reads back
    whole), with ``process`` still training; the state's update."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, f"training ended (exit {process.returncode}): {log.read_text()[-2000:]}"
        if (run / "train_state.safetensors").exists():
            step = loadable(run)
            if step > after:
                return step
        time.sleep(0.2)
    raise AssertionError(f"no training state past update {after} in {timeout} s: {log.read_text()[-2000:]}")


def loadable(run: Path) -> int:
    """The update of the training state in ``run``, after reading back all of it (metadata and tensors)."""
    from safetensors.torch import load_file

    from aiayn.training import train_state_info

    step = train_state_info(run)["step"]
    assert load_file(run / "train_state.safetensors")
    return step


def history_rows(run: Path) -> int:
    return len((run / "history.csv").read_text().strip().splitlines()) - 1


def kill_and_resume(tmp_path: Path, kills: int) -> None:
    """Train into ``my runs/lm`` (a space in the path), SIGKILL it ``kills`` times at moments spread over its
    saves (resuming it each time), and meanwhile start a second process on the same folder; then resume to a
    few updates more and finish."""
    run = tmp_path / "my runs" / "lm"
    log = tmp_path / "first.log"
    first = start(["train", "lm", *TINY_LM, *FOREVER, "--out", "my runs", "--name", "lm"], tmp_path, log)
    try:
        done = wait_for_state(run, first, log)
        # a second process on the same folder, while the first trains: refused, naming it; the first goes on
        args_json = (run / "args.json").read_bytes()
        second = aiayn(["train", "--resume", str(run), "--steps", "100000", "--no-progress"], cwd=tmp_path)
        assert "Traceback" not in second.stderr, second.stderr
        assert second.returncode in (1, 2), f"exit {second.returncode}: {second.stderr[-2000:]}"
        assert len(second.stderr.strip().splitlines()) == 1, second.stderr
        assert str(run) in second.last or "my runs/lm" in second.last, second.last
        assert (run / "args.json").read_bytes() == args_json
        done = wait_for_state(run, first, log, after=done)  # unharmed: still training, still saving
        for i in range(kills):
            time.sleep(random.Random(i).uniform(0.0, 0.5))  # somewhere among its saves
            first.send_signal(signal.SIGKILL)
            first.wait(timeout=60)
            done = loadable(run)  # whatever the moment, the last state reads back whole
            if i + 1 < kills:
                log = tmp_path / f"resumed{i}.log"
                first = start(["train", "--resume", str(run), "--no-progress"], tmp_path, log)
                done = wait_for_state(run, first, log, after=done)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(timeout=60)
    finished = aiayn(["train", "--resume", str(run), "--steps", str(done + 2), "--no-progress"], cwd=tmp_path)
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert loadable(run) == done + 2 == history_rows(run)
    assert not list(run.glob(".*.tmp")), "temporary files of the killed saves are still there"
    import aiayn as lib

    assert lib.load(run) is not None


def test_sigkill_while_saving_then_resume_and_a_second_process_refused(tmp_path):
    kill_and_resume(tmp_path, kills=1)


@pytest.mark.slow
def test_sigkill_at_several_moments(tmp_path):
    kill_and_resume(tmp_path, kills=4)


def commands(text: str) -> list[list[str]]:
    """The aiayn commands ``text`` suggests (after "try:", or between backticks), split as a shell would."""
    found = [m.group(1) for m in re.finditer(r"`(aiayn [^`]*)`", text)]
    found += [m.group(1) for m in re.finditer(r"try: (aiayn .*)$", text, re.MULTILINE)]
    return [shlex.split(c) for c in found]


def test_suggested_commands_are_shell_quoted(tmp_path, capsys, monkeypatch):
    # a run folder whose path holds a space: every command printed for pasting names it as one word
    trained = in_process(["train", "lm", "--steps", "2", *TINY_LM, "--out", "my runs"], tmp_path, capsys)
    assert trained.returncode == 0, trained.stderr
    suggested = commands(trained.stdout)
    assert suggested, f"no `try:` command printed: {trained.stdout[-1000:]}"
    for argv in suggested:
        assert (tmp_path / argv[argv.index("--run") + 1]).resolve() == (tmp_path / "my runs" / "lm-dates").resolve()

    # stopped mid-training (Ctrl-C): the message says how to resume, pasteable as it is
    import aiayn.recipes.lm as lm

    real = lm.lm_batches

    def interrupted(*args, **kwargs):
        for i, batch in enumerate(real(*args, **kwargs)):
            if i == 2:
                raise KeyboardInterrupt
            yield batch

    monkeypatch.setattr(lm, "lm_batches", interrupted)
    stopped = in_process(["train", "lm", "--steps", "50", "--save-every", "1", *TINY_LM, "--out", "my runs",
                          "--name", "stopped"], tmp_path, capsys)
    assert stopped.returncode == 130, stopped.stderr
    resume = [argv for argv in commands(stopped.stderr) if "--resume" in argv]
    assert resume, f"no resume command in: {stopped.stderr!r}"
    for argv in resume:
        assert (tmp_path / argv[argv.index("--resume") + 1]).resolve() == (tmp_path / "my runs" / "stopped").resolve()
    assert (tmp_path / "my runs" / "stopped" / "train_state.safetensors").is_file()  # what the command resumes
