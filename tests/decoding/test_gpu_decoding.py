"""On a CUDA GPU, the compiled decoding (a family's static session): the eager tokens, replayed as CUDA graphs
(none skipped), a second generation of a shape compiled and recorded no more; a bfloat16 pipeline, eager and
compiled; a server's slots warmed and stepped on one worker thread.

Skipped without CUDA (``pytest -m gpu``; ``bash benchmarks/gpu.sh`` runs them). These models are random, their
output gain raised so that the greedy choices stand far apart (float32 against float32, bfloat16 against
bfloat16, but other kernels): a near-tie flipped by rounding is not a failure of the path under test.
"""

from __future__ import annotations

import threading

import pytest
import torch
from torch._dynamo.utils import counters

import aiayn

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
PROMPTS = torch.tensor([[5, 9, 12, 7, 3, 4], [0, 0, 0, 8, 4, 1]])
MASK = torch.tensor([[1] * 6, [0, 0, 0, 1, 1, 1]])


@pytest.fixture(autouse=True)
def exact_fp32():
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32 = old


def sharp(model):
    """``model`` with its final norm's gain x 8: logits 8 times further apart, no near-ties."""
    with torch.no_grad():
        model.decoder.norm.weight.mul_(8)
    return model


def gpt(preset="llama-tiny"):
    torch.manual_seed(0)
    return sharp(aiayn.build(aiayn.preset(preset, vocab_size=64, max_len=64, eos_id=2)).eval()).cuda()


def test_compiled_decoding_replays_cuda_graphs_and_gives_the_eager_tokens():
    counters.clear()
    for preset in ("llama-tiny", "gpt-tiny"):
        net = gpt(preset)
        ids, mask = PROMPTS.cuda(), MASK.cuda()
        eager = net.generate(ids, attention_mask=mask, max_new_tokens=20, do_sample=False)
        compiled = net.generate(ids, attention_mask=mask, max_new_tokens=20, do_sample=False, compile=True)
        assert torch.equal(compiled, eager), preset
    graphs = counters["stats"]["unique_graphs"]
    again = net.generate(ids, attention_mask=mask, max_new_tokens=20, do_sample=False, compile=True)
    assert torch.equal(again, eager) and counters["stats"]["unique_graphs"] == graphs  # nothing compiled again
    torch.manual_seed(0)
    seq2seq = aiayn.build(aiayn.preset("transformer-tiny")).eval().cuda()
    src = torch.randint(4, 60, (3, 7), generator=torch.Generator().manual_seed(1)).cuda()
    for options in ({"do_sample": False}, {"num_beams": 3}):
        runs = [seq2seq.generate(src, max_new_tokens=10, compile=flag, **options) for flag in (False, True)]
        assert torch.equal(*runs), options
    assert counters["inductor"]["cudagraph_skips"] == 0, "a compiled step ran without CUDA graphs"


def hf_folder(tmp_path):
    """A Hugging Face GPT-2 folder (random weights, its final norm's gain x 8) with a byte-level BPE tokenizer."""
    transformers = pytest.importorskip("transformers")
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import decoders, models, pre_tokenizers, trainers

    bpe = tokenizers.Tokenizer(models.BPE())
    bpe.pre_tokenizer, bpe.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
    bpe.train_from_iterator(["The cat sat on the mat. It was warm!"] * 20, trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    torch.manual_seed(0)
    hf = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=bpe.get_vocab_size(), n_positions=64, n_embd=32, n_layer=2, n_head=2, bos_token_id=0,
        eos_token_id=0))
    with torch.no_grad():
        hf.transformer.ln_f.weight.mul_(8)
    hf.save_pretrained(tmp_path)
    bpe.save(str(tmp_path / "tokenizer.json"))
    return tmp_path


def test_a_bfloat16_pipeline_on_the_gpu_decodes_alike_eager_and_compiled(tmp_path):
    folder = hf_folder(tmp_path)
    eager = aiayn.pipeline(folder, device="cuda", dtype="bfloat16")
    compiled = aiayn.pipeline(folder, device="cuda", dtype="bfloat16", compile=True)
    weights = list(eager.model.parameters())
    assert all(p.dtype == torch.bfloat16 and p.is_cuda for p in weights)
    prompts = ["The cat sat", "It"]
    want = eager.generate(prompts, max_new_tokens=12, do_sample=False)
    assert all(t.strip() for t in want)
    assert compiled.generate(prompts, max_new_tokens=12, do_sample=False) == want


def test_a_servers_slots_warmed_and_stepped_on_one_worker_thread():
    """``serve --compile``'s static slots: warmed on a worker thread, then stepped there, as the eager slots
    step; CUDA graph trees keep their state per thread, so this is the path the server takes."""
    net = gpt("gpt-tiny")
    runs, errors = [], []

    def worker(compile):
        try:
            with torch.inference_mode():
                slots = net.slots(4, 32, static=True, compile=compile)
                slots.warm()  # as Worker.prepare
                taken, logits = slots.join([[5, 9, 12], [7, 3, 4, 4, 8]], [11, 11])
                token, got = logits.argmax(-1), []
                for _ in range(10):
                    token = slots.step(taken, token.tolist()).argmax(-1)
                    got.append(token)
                runs.append(torch.stack(got).cpu())
        except Exception as e:  # reported on the test's thread
            errors.append(e)

    counters.clear()
    for flag in (False, True):
        thread = threading.Thread(target=worker, args=(flag,))
        thread.start()
        thread.join(300)
    assert not errors, errors
    assert torch.equal(*runs)
    assert counters["inductor"]["cudagraph_skips"] == 0


def test_serve_compile_on_the_gpu_gives_the_eager_tokens_without_skipped_graphs():
    """``aiayn serve --compile``'s worker (where starlette is installed): warmed and stepped on its thread, a row
    decodes what the eager slots decode, and no CUDA graph is skipped."""
    pytest.importorskip("starlette")
    from aiayn.decoding import GenerationConfig, sample
    from aiayn.pipelines.lm import Text
    from aiayn.serve.generation import ContinuousBatcher, Row
    from aiayn.serve.metrics import Metrics

    class Ids:
        eos_id = None

        def decode(self, ids):
            return " ".join(map(str, ids))

    net = gpt("gpt-tiny")
    want = sample(net, [[5, 9, 12]], 12, temperature=0)[0][3:]
    counters.clear()
    worker = ContinuousBatcher(net, set(), max_batch=4, max_wait=0.0, max_queue=4, metrics=Metrics(), compile=True,
                               length=32)
    worker.start()
    done, events = threading.Event(), []
    row = Row(prompt=[5, 9, 12], config=GenerationConfig(max_new_tokens=12), generator=None,
              text=Text(Ids(), []), send=lambda e: events.append(e) or (e[0] in ("done", "error") and done.set()))
    assert worker.submit([row]) and done.wait(300), events
    worker.stop(timeout=60)
    assert row.text.ids == want and counters["inductor"]["cudagraph_skips"] == 0, events
