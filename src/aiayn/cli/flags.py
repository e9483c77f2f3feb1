"""The help of the flags that several commands share (``aiayn serve``'s own parser among them), written once.
Both :mod:`aiayn.cli` and :mod:`aiayn.cli.serve` read them from here, so neither imports the other for them."""

DEVICE_HELP = "where the model runs: auto (default: a GPU when there is one, else the CPU), cpu, cuda, cuda:N or mps"
FORCE_HELP = "replace OUT when it already holds files (refused otherwise; the old folder goes once the new is in)"
INT8_HELP = "int8 weights on the CPU (every Linear and token table; faster, a quarter of the memory)"
DTYPE_HELP = ("the weights' dtype (default: as saved, float32); half precision runs flash attention on a GPU and "
              "pays on a CPU only where it has bfloat16 units")
COMPILE_HELP = ("decode over a static cache with a torch.compile'd step: the same text; the first call of a batch "
                "shape waits for the compiler (pays on small models and long outputs: docs/benchmarks.md)")

__all__ = ["COMPILE_HELP", "DEVICE_HELP", "DTYPE_HELP", "FORCE_HELP", "INT8_HELP"]
