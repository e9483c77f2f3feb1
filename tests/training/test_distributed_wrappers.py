"""Two gloo ranks through torchrun: FSDP splits every weight, GPT classification reduces its gradients under DDP,
and --minutes shares the stream once (tests/training/test_distributed.py: whole runs compared with one process)."""

from __future__ import annotations

import json

import pytest
import torch

from launching import launch

pytestmark = [
    pytest.mark.skipif(not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
                       reason="needs torch.distributed with gloo"),
    pytest.mark.usefixtures("one_thread"),
]


SHARDING = """
import torch
import aiayn
from torch.distributed.tensor import DTensor
from aiayn.training import adamw_cosine, distributed
from aiayn.models.checkpoint import unique_tensors

distributed.init(fsdp=True)
torch.manual_seed(distributed.rank())  # each rank its own weights: sharding starts from rank 0's
model = aiayn.build("{preset}")
whole = aiayn.count_parameters(model)
before = {{k: v.clone() for k, v in unique_tensors(model).items()}}
optimizer, _ = adamw_cosine(model, 1e-3, 10, 2)
decayed = {{id(p) for p in optimizer.param_groups[0]["params"]}}
names = {{n for n, p in model.named_parameters() if id(p) in decayed}}
distributed.shard_model(model, optimizer)
params = dict(model.named_parameters())
assert all(isinstance(p, DTensor) for p in params.values())
held = sum(p.to_local().numel() for p in params.values())
assert held <= 0.6 * whole, (held, whole)  # each rank holds about half of every weight
assert aiayn.count_parameters(model) == whole  # counted whole
group = optimizer.param_groups[0]["params"]
assert {{id(p) for p in group}} == {{id(params[n]) for n in names}}  # the same groups, now of shards
gathered = unique_tensors(model)  # for a checkpoint: rank 0 alone keeps the whole tensors
if distributed.rank() == 0:
    assert gathered.keys() == before.keys() and all(torch.equal(gathered[k], before[k]) for k in before)
else:
    assert gathered == {{}}
print("rank", distributed.rank(), "holds", held, "of", whole)
"""


@pytest.mark.parametrize("preset", ["gpt-tiny", "swin-tiny"])
def test_fsdp_splits_every_weight_and_keeps_the_optimizer_groups(preset, tmp_path):
    script = tmp_path / "shard.py"
    script.write_text(SHARDING.format(preset=preset))
    assert launch([str(script)]).count("holds") == 2


TEXTCLASS = """
import sys
import torch
import torch.distributed as dist
from aiayn.recipes import textclass
from aiayn.training import distributed

distributed.init()
for tie, compile_ in [(True, False), (False, False), (False, True)]:
    cfg = textclass.Config(model_type="gpt", n_examples=200, vocab_size=120, max_len=16, batch_size=4,
                           out=sys.argv[1], model={"n_layers": 1, "d_model": 32, "n_heads": 2, "d_ff": 64,
                                                   "tie_output": tie})
    task = textclass.TextClassification(cfg, None, lambda *a, **k: None)
    model = task.model
    engine = distributed.wrap(model)  # as aiayn.training.fit trains it
    if compile_:
        engine = torch.compile(engine, backend="eager")
    batches = distributed.shard(task.batches(0))
    for step in range(2):  # DDP refuses a second forward when a gradient of the first was never reduced
        model.zero_grad(set_to_none=True)
        loss, _, n = task.loss(engine, next(batches))
        loss.backward()
        grad = model.score.weight.grad
        both = [torch.empty_like(grad) for _ in range(2)]
        dist.all_gather(both, grad)
        assert torch.equal(both[0], both[1]), f"tie_output={tie}, compiled={compile_}: the ranks' class-head " \\
            "gradients differ (not all-reduced)"
        assert grad.abs().sum() > 0
    print("rank", distributed.rank(), "agrees", tie, compile_)
"""


def test_gpt_text_classification_under_ddp_all_reduces_the_heads_gradients(tmp_path):
    """textclass's GPT branch through DDP, with a tied and an untied LM head, and with torch.compile around DDP
    (as ``--compile`` has it): each rank its own batches, the same averaged class-head gradients on both."""
    script = tmp_path / "textclass.py"
    script.write_text(TEXTCLASS)
    assert launch([str(script), str(tmp_path)]).count("agrees") == 6


MINUTES = """
import json
import sys
from aiayn.recipes import base, lm
from aiayn.training import distributed


class Counted(lm.LanguageModel):
    \"\"\"The LM recipe, noting the stream index of every batch a loss reads.\"\"\"
    read: list[int] = []

    def batches(self, start):
        return enumerate(super().batches(start), start)

    def loss(self, model, batch):
        if isinstance(batch[0], int):  # a training batch (validation's come as they are)
            k, batch = batch
            self.read.append(k)
        return super().loss(model, batch)


distributed.init()
cfg = lm.Config(n_train=200, n_test=4, block=16, batch_size=2, warmup=2, eval_every=0, eval_blocks=2,
                save_every=100, out=sys.argv[1], name="run", model={"n_layers": 1, "d_model": 32, "n_heads": 2,
                                                                    "d_ff": 64})
if sys.argv[2] == "minutes":  # 2 updates timed, then the fit: a budget this small leaves 1 more
    base.run(cfg.__class__(**{**cfg.__dict__, "minutes": 1e-6}), Counted, progress=False, verbose=False)
else:
    base.run(cfg.__class__(**{**cfg.__dict__, "steps": 5}), Counted, resume=f"{sys.argv[1]}/run", progress=False,
             verbose=False)
print("READ", distributed.rank(), json.dumps(Counted.read))
"""


def test_minutes_under_two_ranks_shares_the_stream_once_and_resumes_where_it_stopped(tmp_path):
    """``--minutes`` trains twice on one stream (the timed updates, then the rest): each rank must go on reading
    its own batches, and the run must resume after the last batch either read."""
    script = tmp_path / "minutes.py"
    script.write_text(MINUTES)

    def read(stdout: str) -> dict[int, list[int]]:
        return {int(r): json.loads(ks) for r, ks in (line.split(" ", 2)[1:] for line in stdout.splitlines()
                                                      if line.startswith("READ "))}

    assert read(launch([str(script), str(tmp_path), "minutes"])) == {0: [0, 2, 4], 1: [1, 3, 5]}  # 3 updates
    assert read(launch([str(script), str(tmp_path), "resume"])) == {0: [6, 8], 1: [7, 9]}  # updates 4 and 5
