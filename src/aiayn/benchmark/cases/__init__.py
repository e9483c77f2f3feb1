"""The benchmark cases by name: ours against PyTorch's, Hugging Face's, CTranslate2's and onnxruntime's models, on
the same work. :data:`CASES` maps each name to its builder, ``builder(quick, device) -> Case``.

Each case builds its models (random weights, no downloads), checks that ours computes what each peer
computes (the same logits within a tolerance, the same generated tokens) and returns a
:class:`~aiayn.benchmark.harness.Case` whose sides each do one unit of work. ``quick=True`` shrinks every
size so the whole set runs in seconds (the tests); the numbers then mean nothing. A case lives in the module of
its kind, named by its name's ending where the peer is an engine (``-ct2``, ``-ort``); the peers' models and
adapters are in :mod:`aiayn.benchmark.peers`.

    case                         unit of work                                  peers                        module
    train-small                  training step, Transformer d256, vocab 8k     torch.nn.Transformer,        training
                                                                               MarianMTModel
    train-base                   training step, transformer-base, vocab 8k     the same                     training
    gpt2-train                   gpt2 training step, AdamW                     GPT2LMHeadModel              training
    decode-greedy                greedy translation with our KV cache          MarianMTModel.generate       decoding
    decode-beam                  beam search (4) with our KV cache             MarianMTModel.generate       decoding
    gpt2-generate                gpt2 greedy generation, batch 1               GPT2LMHeadModel.generate     generation
    llama-tiny-generate          llama-tiny greedy generation, batch 1         LlamaForCausalLM.generate    generation
    llama-tiny-generate-b16      the same, batch 16                            LlamaForCausalLM.generate    generation
    llama-124m-generate          Llama-shaped 124M greedy generation, batch 1  LlamaForCausalLM.generate    generation
    llama-124m-generate-b16      the same, batch 16                            LlamaForCausalLM.generate    generation
    gpt2-generate-compiled       gpt2-generate's work, our step compiled       ours eager, GPT2LMHeadModel  generation
                                                                               static cache + compiled
    llama-124m-generate-b16-compiled  the b16 case, our step compiled          the same, LlamaForCausalLM   generation
    llama-tiny-generate-compiled      llama-tiny-generate, our step compiled   the same                     generation
    llama-tiny-generate-b16-compiled  llama-tiny-generate-b16, compiled        the same                     generation
    swin-forward                 swin-t forward, 224 px, eval                  SwinForImageClassification   vision
    vit-forward                  vit-b16 forward, 224 px, eval                 ViTForImageClassification    vision
    gpt2-generate-ct2            gpt2-generate's work                          GPT2LMHeadModel.generate,    ct2
                                                                               ctranslate2.Generator
    gpt2-generate-ct2-int8       the same in int8                              ctranslate2.Generator        ct2
    llama-124m-generate-ct2      llama-124m-generate's work                    LlamaForCausalLM.generate,   ct2
                                                                               ctranslate2.Generator
    llama-124m-generate-b16-ct2  llama-124m-generate-b16's work                the same                     ct2
    decode-greedy-ct2            decode-greedy's work                          MarianMTModel.generate,      ct2
                                                                               ctranslate2.Translator
    decode-greedy-ct2-int8       the same in int8                              ctranslate2.Translator       ct2
    decode-beam-ct2              decode-beam's work, length penalty 0.6        MarianMTModel.generate,      ct2
                                                                               ctranslate2.Translator
    decode-beam-ct2-int8         the same in int8                              ctranslate2.Translator       ct2
    gpt2-generate-ct2-compiled   gpt2-generate-ct2's work, our step compiled   ours eager, the same peers   ct2
    decode-greedy-ct2-compiled   decode-greedy-ct2's work, compiled            the same                     ct2
    decode-beam-ct2-compiled     decode-beam-ct2's work, compiled              the same                     ct2
    gpt2-generate-ct2-int8-compiled  the int8 case, our step compiled          ours eager int8, ctranslate2 ct2
    decode-greedy-ct2-int8-compiled  the int8 case, compiled                   the same                     ct2
    decode-beam-ct2-int8-compiled  the int8 case, compiled                     the same                     ct2
    decode-greedy-ort            decode-greedy's work                          ours in ONNX, onnxruntime    ort
    gpt2-generate-ort            gpt2-generate's work                          ours in ONNX, onnxruntime    ort
    decode-greedy-ort-compiled   decode-greedy-ort's work, our step compiled   ours eager, onnxruntime      ort
    gpt2-generate-ort-compiled   gpt2-generate-ort's work, our step compiled   the same                     ort
    llama-124m-generate-llamacpp          llama-124m-generate's work       llama.cpp f32                llamacpp
    llama-124m-generate-llamacpp-int8     the same, ours int8              llama.cpp q8_0               llamacpp
    llama-124m-generate-llamacpp-compiled the same, our step compiled      ours eager, llama.cpp f32    llamacpp
    llama-124m-generate-llamacpp-int8-compiled  int8, compiled                 ours eager int8, q8_0        llamacpp

Where a peer runs the same weights, ours is converted from it with ``aiayn.from_hf`` (the Llama cases go the other
way: ours is exported with :func:`aiayn.convert.to_hf.to_hf` and Hugging Face loads the folder); the
``torch.nn.Transformer`` peer gets our weights copied in, and CTranslate2's models are converted from the Hugging
Face ones. CTranslate2 and onnxruntime are optional (``pip install "aiayn[bench]"``), llama.cpp too
(``benchmarks/llamacpp.sh`` builds it); without them ``aiayn bench`` skips the ``-ct2``, ``-ort`` and
``-llamacpp`` cases.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from aiayn.benchmark.cases import ct2, decoding, generation, llamacpp, ort, training, vision
from aiayn.benchmark.harness import Case

CASES: dict[str, Callable[[bool, torch.device], Case]] = {
    "train-small": training.train_small,
    "train-base": training.train_base,
    "decode-greedy": decoding.decode_greedy,
    "decode-beam": decoding.decode_beam,
    "gpt2-generate": generation.gpt2_generate,
    "gpt2-train": training.gpt2_train,
    "llama-tiny-generate": generation.llama_tiny_generate,
    "llama-tiny-generate-b16": generation.llama_tiny_generate_b16,
    "llama-124m-generate": generation.llama_124m_generate,
    "llama-124m-generate-b16": generation.llama_124m_generate_b16,
    "gpt2-generate-compiled": generation.gpt2_generate_compiled,
    "llama-124m-generate-b16-compiled": generation.llama_124m_generate_b16_compiled,
    "llama-tiny-generate-compiled": generation.llama_tiny_generate_compiled,
    "llama-tiny-generate-b16-compiled": generation.llama_tiny_generate_b16_compiled,
    "swin-forward": vision.swin_forward,
    "vit-forward": vision.vit_forward,
    "gpt2-generate-ct2": ct2.gpt2_generate_ct2,
    "gpt2-generate-ct2-int8": ct2.gpt2_generate_ct2_int8,
    "llama-124m-generate-ct2": ct2.llama_124m_generate_ct2,
    "llama-124m-generate-b16-ct2": ct2.llama_124m_generate_b16_ct2,
    "decode-greedy-ct2": ct2.decode_greedy_ct2,
    "decode-greedy-ct2-int8": ct2.decode_greedy_ct2_int8,
    "decode-beam-ct2": ct2.decode_beam_ct2,
    "decode-beam-ct2-int8": ct2.decode_beam_ct2_int8,
    "gpt2-generate-ct2-compiled": ct2.gpt2_generate_ct2_compiled,
    "decode-greedy-ct2-compiled": ct2.decode_greedy_ct2_compiled,
    "decode-beam-ct2-compiled": ct2.decode_beam_ct2_compiled,
    "gpt2-generate-ct2-int8-compiled": ct2.gpt2_generate_ct2_int8_compiled,
    "decode-greedy-ct2-int8-compiled": ct2.decode_greedy_ct2_int8_compiled,
    "decode-beam-ct2-int8-compiled": ct2.decode_beam_ct2_int8_compiled,
    "decode-greedy-ort": ort.decode_greedy_ort,
    "gpt2-generate-ort": ort.gpt2_generate_ort,
    "decode-greedy-ort-compiled": ort.decode_greedy_ort_compiled,
    "gpt2-generate-ort-compiled": ort.gpt2_generate_ort_compiled,
    "llama-124m-generate-llamacpp": llamacpp.llama_124m_generate_llamacpp,
    "llama-124m-generate-llamacpp-int8": llamacpp.llama_124m_generate_llamacpp_int8,
    "llama-124m-generate-llamacpp-compiled": llamacpp.llama_124m_generate_llamacpp_compiled,
    "llama-124m-generate-llamacpp-int8-compiled": llamacpp.llama_124m_generate_llamacpp_int8_compiled,
}

__all__ = ["CASES"]
