import os
import sys
from pathlib import Path

import pytest
import torch

# The suite runs on the CPU even on a machine with a GPU ("auto" means cpu, in this process and the commands it
# starts); the GPU tests (`pytest -m gpu`) name their device.
os.environ.setdefault("AIAYN_DEVICE", "cpu")
# Products take the kernels of the fixed rules (aiayn.layers.kernels), not those timed on first use: a run's numbers
# then do not depend on what an earlier run measured; tests/layers/test_kernels.py measures.
os.environ.setdefault("AIAYN_KERNELS", "rules")

# Under pytest-xdist (the README's `pytest -n auto`) the workers share the cores: each takes its share of torch
# threads, and so do the commands it starts, instead of every worker running as many threads as there are cores
# (threads that wait on each other's cores make a run several times slower).
if (workers := int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))) > 1:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    share = max(1, cores // workers)
    torch.set_num_threads(share)
    os.environ["OMP_NUM_THREADS"] = str(share)


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


@pytest.fixture
def traced_ops():
    """``(ops, backend)``: a ``torch.compile`` backend that records in ``ops`` the functions each graph it is given
    calls, then runs the graph as traced (dynamo reset first, so every call traces anew)."""
    torch._dynamo.reset()
    ops: list[str] = []

    def backend(graph, inputs):
        ops.extend(str(node.target) for node in graph.graph.nodes if node.op == "call_function")
        return graph.forward

    return ops, backend
