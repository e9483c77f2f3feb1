import pytest
import torch


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # tests/shared.py: where the shared data sets are
