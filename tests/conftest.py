import os
import sys
from pathlib import Path

import pytest
import torch

# The suite runs on the CPU even on a machine with a GPU ("auto" means cpu, in this process and the commands it
# starts); the GPU tests (`pytest -m gpu`) name their device.
os.environ.setdefault("AIAYN_DEVICE", "cpu")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture
def one_thread():
    """One torch thread: tiny tensors on a shared 2-core machine only contend with more (several times
    slower), and two runs compared bit for bit must sum in the same order."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)

sys.path.insert(0, str(Path(__file__).parent))  # tests/shared.py: where the shared data sets are
