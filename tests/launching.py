"""Starting ``torchrun`` from a test: several processes on this machine, gloo between them."""

import os
import subprocess
import sys


def launch(target: list[str], nproc: int = 2) -> str:
    """``torchrun --standalone --nproc_per_node nproc TARGET`` (a script or ``-m module``, and arguments)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", *target]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout
