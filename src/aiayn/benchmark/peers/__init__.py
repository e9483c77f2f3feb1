"""What the benchmark cases measure ours against, one module a peer:

    torch_transformer   torch.nn.Transformer as the paper's model, our weights copied in   (train-*)
    hf                  Hugging Face models of our sizes, random weights                    (most cases)
    ct2                 CTranslate2's Generator and Translator, converted from those        (*-ct2, *-ct2-int8)
    ort                 ours exported to ONNX, run by onnxruntime                           (*-ort)

CTranslate2 and onnxruntime are optional (``pip install "aiayn[bench]"``); their modules import them only when
asked, and say how to install them (:class:`~aiayn.benchmark.harness.Unavailable`) when they are missing.
"""
