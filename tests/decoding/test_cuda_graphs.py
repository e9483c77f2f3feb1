"""The compiled decode step can be replayed as a CUDA graph: inductor skips CUDA graphs for a graph that writes an
input which is neither a parameter, a buffer nor marked static ("skipping cudagraphs due to mutated inputs") and
then launches every kernel of the step one by one. That check needs no GPU: it is inductor's own function
(``check_for_mutation_ignore_cuda_graph_managed_tensor``), applied here to every graph the CPU compiles for the
step, greedy, beams, sampling (a sliding window's ring too) and a server's slots, with the inputs the graph
mutates and those it holds static, as inductor hands them to it on a GPU. Speculative decoding does not compile
(``compile=True`` with an assistant is refused, tested in ``test_speculative``).

The cache buffers are also reused: a second generation of the same shape writes the memory the first one wrote,
so a recorded graph replays instead of being recorded again."""

import inspect

import pytest
import torch
from torch._inductor import output_code
from torch._inductor.cudagraph_utils import check_for_mutation_ignore_cuda_graph_managed_tensor

import aiayn
from aiayn.decoding import beam
from aiayn.layers import kv_cache

pytestmark = pytest.mark.usefixtures("one_thread")

PROMPTS = torch.tensor([[5, 9, 12, 7, 3, 4], [0, 0, 0, 8, 4, 1]])
MASK = torch.tensor([[1] * 6, [0, 0, 0, 1, 1, 1]])


@pytest.fixture
def graphs(monkeypatch):
    """What inductor's CUDA graph check says of each graph compiled while the test runs: ``None`` (no input
    mutated but static ones) or the reason it would skip CUDA graphs."""
    found: list[tuple[list[int], str | None]] = []
    init = output_code.CompiledFxGraph.__init__
    signature = inspect.signature(init)

    def spy(*args, **kwargs):
        init(*args, **kwargs)
        given = signature.bind(*args, **kwargs).arguments
        graph = given["self"]
        reason = check_for_mutation_ignore_cuda_graph_managed_tensor(
            given["gm"], graph.mutated_inputs, graph.mutated_input_idxs, given["static_input_idxs"])
        found.append((sorted(graph.mutated_input_idxs), reason))

    monkeypatch.setattr(output_code.CompiledFxGraph, "__init__", spy)
    monkeypatch.setattr(beam, "COMPILE_RANK", False)  # the ranking's graph writes nothing and is no step: not here
    torch._dynamo.reset()
    # compiled here, not read from a cache; the check as with a GPU's default (CUDA graph trees)
    with torch._inductor.config.patch({"fx_graph_cache": False, "triton.cudagraph_trees": True}):
        yield found
    torch._dynamo.reset()


def gpt(window=None):
    torch.manual_seed(0)
    extra = {"attention_window": window} if window else {}
    return aiayn.build(aiayn.preset("llama-tiny", vocab_size=64, max_len=64, eos_id=2, **extra)).eval()


def translate(**options):
    torch.manual_seed(0)
    net = aiayn.build(aiayn.preset("transformer-tiny")).eval()
    net.generate(torch.randint(4, 60, (2, 7)), max_new_tokens=4, compile=True, **options)


def slots():
    session = gpt().slots(3, 16, compile=True)
    with torch.no_grad():
        taken, _ = session.join([[5, 9, 12]], [4])
        session.step(taken, [0])


CASES = {  # each compiles a step of its own (10-30 s on a CPU): the first three in CI, all with -m slow
    "gpt-greedy-ring": lambda: gpt(window=4).generate(PROMPTS, attention_mask=MASK, max_new_tokens=4,
                                                      do_sample=False, compile=True),
    "translation-beams": lambda: translate(num_beams=3),
    "server-slots": slots,
    "gpt-sampling": lambda: gpt().generate(PROMPTS, attention_mask=MASK, max_new_tokens=4, do_sample=True, top_k=5,
                                           compile=True, generator=torch.Generator().manual_seed(0)),
    "gpt-beams": lambda: gpt().generate(PROMPTS, attention_mask=MASK, max_new_tokens=4, num_beams=2, compile=True),
    "translation-greedy": lambda: translate(do_sample=False),
}
SLOW = {"gpt-sampling", "gpt-beams", "translation-greedy"}


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.slow) if c in SLOW else c for c in CASES])
def test_a_compiled_step_mutates_only_static_inputs(graphs, case):
    CASES[case]()
    assert graphs, "nothing was compiled"
    for mutated, reason in graphs:
        assert mutated, "the step writes its cache: some input must be mutated, or the spy saw the wrong graph"
        assert reason is None, reason


def test_a_second_generation_of_a_shape_writes_the_same_buffers():
    """The pool (``kv_cache.buffers``): the same addresses for the next session of the same shapes (so a recorded
    graph replays), other memory for a session alive beside it, and the buffers zeroed when handed out again."""
    net = gpt()

    def addresses(session):
        return [t.data_ptr() for layer in session.layers for t in (layer.self_attn.k, layer.self_attn.v)]

    with torch.no_grad():
        first = net.session(static=True)
        first.prefill(PROMPTS, new_tokens=4)  # 10 columns
        seen = addresses(first)
        first.layers[0].self_attn.v.fill_(float("nan"))  # a row the next session must not read
        beside = net.session(static=True)
        beside.prefill(PROMPTS, new_tokens=4)
        assert not set(addresses(beside)) & set(seen)  # alive together: apart
        del first
        again = net.session(static=True)
        again.prefill(PROMPTS[:, :3], new_tokens=7)  # 10 columns again
        assert addresses(again) == seen
        assert again.layers[0].self_attn.v[:, :, 3:].eq(0).all()  # nothing of the last session left
        assert all(getattr(t, "_dynamo_static_input_type", None) == "unguarded"
                   for layer in again.layers for t in (layer.self_attn.k, layer.self_attn.v))
    kv_cache._kept.clear()
