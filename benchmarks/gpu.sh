#!/usr/bin/env bash
# A lent GPU in one command of at most 8 minutes (GPU_S, 470 s), the most valuable figures first, everything
# written into $OUT (default benchmarks/results) as it comes, so a command cut off keeps what came before:
#
#   1. decode     HBM bandwidth; gpt2 bf16 greedy decoding, batch 1, 256 new tokens: eager, compile=True (static
#                 cache, CUDA graphs; skipped graphs counted), GPT2LMHeadModel static cache + compiled forward
#                 ($OUT/gpu.json, rewritten after each figure; at most DECODE_S, 200 s)
#   2. train      bf16 training MFU, eager: gpt2 16 x 1024 against GPT2LMHeadModel, transformer-base against
#                 torch.nn.Transformer (at most TRAIN_S, 90 s)
#   3. tests      pytest -m gpu over the tests that need no CPU-trained run ($OUT/gpu-tests.txt, its last line
#                 in gpu.json; at most TESTS_S, 120 s)
#   4. compiled   the training figures with both sides compiled, in what time is left
#
#   bash benchmarks/gpu.sh            # on the GPU machine: python3 with torch (CUDA), transformers, pytest
#
# Nothing is installed: aiayn is imported from src/ (PYTHONPATH) by ${PYTHON:-python3}. Without a CUDA device it
# stops at once (status 3). A stage that fails or runs past its limit is reported and the next one runs; the
# command's status is the first failure's.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-benchmarks/results}
PY=${PYTHON:-python3}
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
export TORCH_LOGS=${TORCH_LOGS-perf_hints}  # inductor says why it skips a CUDA graph
mkdir -p "$OUT"
if command -v nvidia-smi > /dev/null; then
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
fi
"$PY" -c "import aiayn, torch, sys; print('aiayn', aiayn.__file__, 'torch', torch.__version__); \
sys.exit(0 if torch.cuda.is_available() else 3)" || { echo "gpu.sh: no CUDA device here (or no torch)" >&2; exit 3; }

budget=${GPU_S:-470}
status=0
stage() {  # stage NAME LIMIT COMMAND...: run COMMAND for at most LIMIT s and what is left of the budget
    local name=$1 limit=$2 left=$(( budget - SECONDS ))
    shift 2
    if (( left < 10 || limit < 1 )); then echo "gpu.sh: $name skipped: ${left}s left of ${budget}s" >&2; return; fi
    (( left < limit )) && limit=$left
    echo "== $name (at most ${limit}s)"
    timeout "$limit" "$@"
    local rc=$?
    if (( rc == 124 )) && [[ $name == compiled ]]; then  # the last stage takes what time is left: a cut is no failure
        echo "gpu.sh: $name cut off at ${limit}s; its figures so far are in gpu.json" >&2
    elif (( rc != 0 )); then
        echo "gpu.sh: $name failed (status $rc; 124: cut off at ${limit}s)" >&2
        (( status == 0 )) && status=$rc
    fi
}

stage decode "${DECODE_S:-200}" "$PY" benchmarks/gpu.py decode --out "$OUT"
stage train "${TRAIN_S:-90}" "$PY" benchmarks/gpu.py train --steps 10 --out "$OUT"
# the GPU tests' files by name: others import what the GPU machine lacks (hypothesis, starlette)
stage tests "${TESTS_S:-120}" bash -c '"$0" -m pytest -m gpu -q -p no:cacheprovider tests/models/test_gpu.py \
    tests/layers/test_attention_kernels.py tests/decoding/test_gpu_decoding.py \
    > "$1/gpu-tests.txt" 2>&1; rc=$?; tail -3 "$1/gpu-tests.txt"; exit $rc' "$PY" "$OUT"
"$PY" - "$OUT" << 'EOF'  # the tests' closing line beside the figures
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
report, path = out / "gpu-tests.txt", out / "gpu.json"
if report.exists() and path.exists():
    data = json.loads(path.read_text())
    lines = [line for line in report.read_text().splitlines() if line.strip()]
    data["results"]["pytest-gpu"] = {"summary": lines[-1] if lines else "(no output)"}
    path.write_text(json.dumps(data, indent=2) + "\n")
EOF
stage compiled 600 "$PY" benchmarks/gpu.py train --steps 10 --compile --out "$OUT"
exit "$status"
