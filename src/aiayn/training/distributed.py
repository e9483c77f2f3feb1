"""Data-parallel training on PyTorch's own engine: ``torch.distributed`` started by ``torchrun``.

    torchrun --standalone --nproc_per_node 2 -m aiayn train --task lm        # one machine, two processes
    torchrun --nnodes 2 --nproc_per_node 8 --rdzv_backend c10d \\
             --rdzv_endpoint HOST:29500 --rdzv_id run1 -m aiayn train ...    # on each of two machines

How a run is split, whatever the task:

* Every rank builds the same model (the same seed; ``DistributedDataParallel`` also copies rank 0's
  weights to the others when it wraps the model) and reads the same data.
* The batches form one stream, the one a single process would read. Rank ``r`` of ``W`` takes batches
  ``r, r + W, r + 2W, ...`` (:func:`shard`), so token-count batches are shared out whole.
* One update consumes ``accum`` batches on every rank: ``W * accum`` batches of the stream. The gradients
  are summed over all of them and divided by all their tokens (:func:`aiayn.training.fit`), so a run of
  ``W`` ranks is the same update, up to float rounding, as one process with ``accum * W``.
* Rank 0 alone writes the run folder, checkpoints, validation and logs. The training state records the
  stream position in batches, so a run resumes under any number of ranks (``aiayn train --resume`` keeps
  the batches per update, ``W * accum``, when the new ``W`` divides it).

Backends: ``gloo`` on CPUs, ``nccl`` on CUDA GPUs.

FSDP, for a model too big to keep whole on every device (``aiayn train --fsdp``, or :func:`init` with
``fsdp=True``): PyTorch's ``fully_shard`` (FSDP2) splits every weight, gradient and optimizer state
over the ranks, and gathers a block's weights only while that block computes (:func:`shard_model`).
The batches, the update and the stream position are those of data parallelism above, so the same run
may go on under DDP, FSDP or one process. The training state is saved sharded, each rank writing its
own shards (``aiayn.training.state``), and loads into any number of ranks. What must see whole tensors
takes every rank: the final weights are gathered one tensor at a time (:func:`full`) and rank 0 writes
them; validation runs on every rank. A bf16 run may gather and compute in bf16 (:func:`shard_model`'s
``param_dtype``), and a model may be built on the meta device so that no GPU holds it whole
(:func:`build_sharded`).
"""

from __future__ import annotations

import contextlib
import inspect
import itertools
import os
import types
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar, cast

import torch
import torch.distributed as dist
from torch import nn

if TYPE_CHECKING:
    from torch.distributed.fsdp import FSDPModule

T = TypeVar("T")
_FSDP = False  # shard models over the ranks (init(fsdp=True)) instead of copying them


def launched() -> bool:
    """Started by ``torchrun`` (or anything that sets ``WORLD_SIZE`` > 1)."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def init(fsdp: bool = False, device: str | None = None) -> None:
    """Join the process group ``torchrun`` describes in the environment, once; nothing for one process.
    ``fsdp``: models given to :class:`aiayn.training.session.Session` are sharded over the ranks
    (:func:`shard_model`). ``device``: where the ranks train (:func:`aiayn.training.device.resolve`'s names;
    default auto): NCCL, each rank on ``cuda:LOCAL_RANK`` (passed to the group as its ``device_id``), for CUDA;
    gloo otherwise.

    Raises:
        ValueError: ``device`` names a GPU other than this rank's, ``cuda:LOCAL_RANK`` (say ``cuda``).
    """
    global _FSDP
    _FSDP = fsdp
    if launched() and not dist.is_initialized():
        from aiayn.training.device import resolve

        where = resolve(device)  # refuses a GPU other than this rank's (cuda:LOCAL_RANK)
        if where.type == "cuda":
            torch.cuda.set_device(where.index)
            # NCCL binds the group to this rank's GPU now, rather than guessing one at the first collective
            dist.init_process_group("nccl", device_id=where)
        else:
            dist.init_process_group("gloo")


def shutdown() -> None:
    """Leave the process group, if this process joined one."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def active() -> bool:
    """Running with more than one process in an initialised group."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def rank() -> int:
    return dist.get_rank() if active() else 0


def world_size() -> int:
    return dist.get_world_size() if active() else 1


def is_main() -> bool:
    """Rank 0, the one that writes files and prints (every process when not distributed)."""
    return rank() == 0


class Share(Iterator[T]):
    """This rank's share of a stream (:func:`shard`), which knows it is one, so that sharing it again leaves it
    as it is."""

    def __init__(self, batches: Iterable[T]) -> None:
        self._batches = itertools.islice(batches, rank(), None, world_size())

    def __iter__(self) -> Share[T]:
        return self

    def __next__(self) -> T:
        return next(self._batches)


def shard(batches: Iterable[T]) -> Iterator[T]:
    """This rank's share of a stream of batches: every ``world_size``-th one, starting at ``rank``. A share given
    again is returned as it is: one stream fed to several fits (``--minutes`` times the first updates, then trains
    on) is split once, or every rank would skip its own ``rank`` batches again at each fit and read the others'."""
    if isinstance(batches, Share) or not active():
        return iter(batches)
    return Share(batches)


def broadcast(obj: T) -> T:
    """Rank 0's ``obj`` on every rank (anything picklable: a tokenizer, a folder name)."""
    if not active():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def all_gather(obj: T) -> list[T]:
    """Every rank's ``obj`` (anything picklable), in rank order, on every rank."""
    if not active():
        return [obj]
    out: list[Any] = [None] * world_size()
    dist.all_gather_object(out, obj)
    return out


def barrier() -> None:
    if active():
        dist.barrier()


class DataParallel(nn.parallel.DistributedDataParallel):
    """``DistributedDataParallel`` that lets through the wrapped model's own methods and attributes
    (BERT's ``mlm_logits``, a config), so a loss function is written once for one process and many.
    Gradients of parameters used outside ``forward`` (the heads) are averaged like the others, since
    the reducer hooks every parameter's gradient."""

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.module, name)


def unwrap(model: nn.Module) -> nn.Module:
    """The model inside ``torch.compile``'s and DDP's wrappers (for type checks and the model's own methods)."""
    while True:
        if isinstance(model, nn.parallel.DistributedDataParallel):
            model = cast(nn.Module, model.module)
        elif isinstance(inner := getattr(model, "_orig_mod", None), nn.Module):  # torch.compile's OptimizedModule
            model = inner
        else:
            return model


def through_forward(model: nn.Module, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(unwrap(model), *args, **kwargs)`` run as the forward of ``model`` and of whatever wraps it.

    A wrapper acts only on its forward: DDP all-reduces in the backward pass only the gradients of a forward
    through it (a model's other methods called through the wrapper skip that, and the ranks drift apart), and
    ``torch.compile`` compiles only the forward. A computation that is not the model's forward (GPT's
    classification: its features and the class head) goes through here. Unwrapped, it is a plain call.
    """
    inner = unwrap(model)
    if inner is model:
        return fn(model, *args, **kwargs)
    inner.forward = types.MethodType(fn, inner)  # for this call the instance's forward shadows the class's
    try:
        return model(*args, **kwargs)
    finally:
        del inner.forward


def sharding() -> bool:
    """Models are to be sharded over several ranks (FSDP) rather than copied (DDP)."""
    return _FSDP and active()


def is_sharded(model: nn.Module) -> bool:
    """``model`` is split over the ranks by ``fully_shard``."""
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def shard_model(model: nn.Module, optimizer: torch.optim.Optimizer | None = None,
                param_dtype: torch.dtype | None = None) -> nn.Module:
    """Split ``model`` over the ranks in place with FSDP2's ``fully_shard``: each block (an element of an
    ``nn.ModuleList`` made of layers) is its own unit, gathered only while it computes, and the rest
    (embeddings, heads, tied weights) is the root's. Every rank starts from rank 0's weights; a model on
    the meta device is left there, to be given its weights by :func:`materialize`.

    ``optimizer``, if given, was built on the whole model and has not stepped: it is pointed at the
    shards (its groups and settings are kept), so a task builds its optimizer the same way under DDP
    and FSDP.

    ``param_dtype``: the dtype weights are gathered and computed in (``torch.bfloat16`` for a bf16 run:
    half the bytes to gather), with FSDP2's ``MixedPrecisionPolicy``; the shards the optimizer updates stay
    float32, and gradients are reduced over the ranks in float32. ``None``: the weights' own dtype.
    """
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    if optimizer is not None and optimizer.state:
        raise ValueError("optimizer has state already; shard the model before the first update")
    names = {id(p): n for n, p in model.named_parameters()}
    groups = [[names[id(p)] for p in g["params"]] for g in optimizer.param_groups] if optimizer else []
    device = next(model.parameters()).device
    if device.type != "meta":
        with torch.no_grad():  # every rank starts from rank 0's weights, as under DDP
            for t in itertools.chain(model.parameters(), model.buffers()):
                dist.broadcast(t, src=0)
    # the mesh's device: where the shards live (a meta model's: where materialize puts them)
    mesh = init_device_mesh(_device().type if device.type == "meta" else device.type, (world_size(),))
    policy = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32 if param_dtype else None)
    blocks = [m for lst in model.modules() if isinstance(lst, nn.ModuleList) for m in lst
              if any(True for _ in m.children()) and any(True for _ in m.parameters())]  # not a lone Linear
    for block in reversed(blocks):  # the innermost first: fully_shard goes bottom-up
        fully_shard(block, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    params = dict(model.named_parameters())
    for g, group in zip(optimizer.param_groups if optimizer else [], groups):
        g["params"] = [params[n] for n in group]
    return model


def _device() -> torch.device:
    """This rank's device: its GPU under NCCL, else the CPU."""
    if dist.is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def build_sharded(build: Callable[[], nn.Module], param_dtype: torch.dtype | None = None) -> nn.Module:
    """``build()``'s model, sharded over the ranks without any rank's device ever holding it whole.

    Rank 0 builds it on the CPU (its initial weights and the generator after them are those one process
    would have: the same seed gives the same run); every rank builds it again on the meta device (shapes, no
    memory), shards that (:func:`shard_model`), allocates its shards on its device (``to_empty``) and takes
    rank 0's weights and buffers, one tensor at a time. One process: ``build()`` as it is.

    Build the optimizer on the model this returns; :class:`aiayn.training.session.Session` leaves a sharded
    model as it is.
    """
    if not active():
        return build()
    whole = build() if is_main() else None  # on the CPU (host memory), not the GPU
    rng = broadcast(torch.get_rng_state())  # every rank's generator as after the one build (dropout, data)
    torch.set_rng_state(rng)
    with torch.device("meta"):
        model = build()
    shard_model(model, param_dtype=param_dtype)
    materialize(model, None if whole is None else {**whole.state_dict(), **dict(whole.named_buffers())})
    return model


@contextlib.contextmanager
def kept_ties(model: nn.Module) -> Iterator[None]:
    """Weights two modules share (a GPT's head and its token table) shared again after the moves inside: a move
    to or from the meta device (``to``, ``to_empty``) gives each module attribute a new parameter of its own,
    and an untied copy would train on its own, outside FSDP's all-reduce."""
    first: dict[int, tuple[nn.Module, str]] = {}
    ties = []
    for module in model.modules():
        for name, p in module.named_parameters(recurse=False):
            if id(p) in first:
                ties.append((module, name, *first[id(p)]))
            else:
                first[id(p)] = (module, name)
    yield
    for module, name, owner, owner_name in ties:
        setattr(module, name, getattr(owner, owner_name))


def shard_built(model: nn.Module, param_dtype: torch.dtype | None = None) -> nn.Module:
    """``model``, built whole in host memory (and perhaps given loaded weights there), sharded in place over the
    ranks onto each rank's device: it moves to the meta device, is sharded (:func:`shard_model`) and takes rank
    0's weights and buffers one tensor at a time (:func:`materialize`), so no device ever holds it whole. Build
    the optimizer on it afterwards."""
    whole = {**model.state_dict(), **dict(model.named_buffers())} if is_main() else None  # (their CPU storage
    with kept_ties(model):  # stays with these tensors when the move to meta swaps the parameters' data)
        model.to("meta")
    shard_model(model, param_dtype=param_dtype)
    materialize(model, whole)
    return model


def materialize(model: nn.Module, whole: dict[str, torch.Tensor] | None) -> None:
    """Give a model sharded on the meta device (:func:`shard_model`) its storage on this rank's device, and
    rank 0's ``whole`` tensors (its state dict and every buffer, the non-persistent ones too, on the CPU;
    ``None`` on the other ranks): each rank keeps its shard of each weight, sent one tensor at a time.
    A run that resumes loads its state over these (``aiayn.training.load_train_state``)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    device = _device()
    with kept_ties(model):
        model.to_empty(device=device)
    weights: dict[str, Any] = {} if whole is None else {k: v for k, v in whole.items() if k in model.state_dict()}
    set_model_state_dict(model, weights, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))
    with torch.no_grad():  # buffers are not sharded: each rank holds rank 0's whole (masks, position tables)
        for name, buffer in model.named_buffers():
            if whole is not None:
                buffer.copy_(whole[name])
            dist.broadcast(buffer, src=0)


def full(t: torch.Tensor) -> torch.Tensor:
    """The whole of a tensor, gathered from every rank's shard if it is one (every rank must call it
    for the same tensors, in the same order), on the CPU; any other tensor as it is."""
    from torch.distributed.tensor import DTensor

    return t.full_tensor().cpu() if isinstance(t, DTensor) else t


def local(whole: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``whole`` split the way ``like`` is (this rank's shard, no communication: every rank holds
    ``whole``); ``whole`` itself when ``like`` is no shard."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    if not isinstance(like, DTensor):
        return whole
    return distribute_tensor(whole.to(like.device, like.dtype), like.device_mesh, like.placements, src_data_rank=None)


@contextlib.contextmanager
def accumulating(model: nn.Module) -> Iterator[None]:
    """Inside, backward passes keep their gradients on this rank (the first batches of an update);
    the last batch's backward, outside, reduces the sum over every rank once."""
    model = getattr(model, "_orig_mod", model)  # under torch.compile: the module it compiled
    if is_sharded(model):
        sharded = cast("FSDPModule", model)
        sharded.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            sharded.set_requires_gradient_sync(True)
    elif hasattr(model, "no_sync"):
        with cast(nn.parallel.DistributedDataParallel, model).no_sync():  # DDP (or any module with no_sync)
            yield
    else:
        yield


def wrap(model: nn.Module) -> nn.Module:
    """``model`` for one process or sharded (FSDP); :class:`DataParallel` around it for several. Buffers are not
    re-broadcast every forward: no model here updates its buffers while training (DETR's batch norm
    is frozen), so they stay equal on every rank."""
    if not active() or is_sharded(model):
        return model
    device = next(model.parameters()).device
    ids = [device.index] if device.type == "cuda" else None
    takes = inspect.signature(nn.parallel.DistributedDataParallel).parameters  # renamed in PyTorch 2.12
    no_sync: dict[str, Any] = ({"forward_sync_buffers": False} if "forward_sync_buffers" in takes
                               else {"broadcast_buffers": False})
    return DataParallel(model, device_ids=ids, **no_sync)


def all_sum(values: list[float]) -> list[float]:
    """The sums over ranks of a few numbers (losses, token counts), in float64."""
    if not active():
        return values
    device = "cuda" if dist.get_backend() == "nccl" else "cpu"
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return t.tolist()


def fork_random_state() -> None:
    """Give ranks 1.. their own dropout streams (rank 0 keeps the one a single process would have)."""
    if active() and rank():
        torch.manual_seed(int(torch.randint(2**62, ())) + rank())


__all__ = [
    "DataParallel",
    "Share",
    "accumulating",
    "active",
    "all_gather",
    "all_sum",
    "barrier",
    "broadcast",
    "build_sharded",
    "fork_random_state",
    "full",
    "init",
    "is_main",
    "is_sharded",
    "launched",
    "local",
    "materialize",
    "rank",
    "shard",
    "shard_built",
    "shard_model",
    "sharding",
    "through_forward",
    "unwrap",
    "world_size",
    "wrap",
]
