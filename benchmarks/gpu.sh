#!/usr/bin/env bash
# A lent GPU (an H200), in three commands that each finish well inside 8 minutes (each is cut off, and fails, at
# its limit), all writing into $OUT (default benchmarks/results); about 10 minutes of the GPU in all:
#
#   OUT=... bash benchmarks/gpu.sh tests      # pytest -m gpu: CPU against GPU for every family, kernels, devices
#                                             #   (report: $OUT/gpu-tests.txt); at most $TESTS_S s (240)
#   OUT=... bash benchmarks/gpu.sh eager      # MFU of gpt2 and transformer-base training and gpt2 generation
#                                             #   tokens/s in bf16 ($OUT/gpu.json), then the CPU harness's fp32
#                                             #   cases on the GPU ($OUT/gpu/); at most $EAGER_S s (210)
#   OUT=... bash benchmarks/gpu.sh compiled   # the MFU figures under torch.compile ($OUT/compiled/gpu.json);
#                                             #   at most $COMPILED_S s (180)
#
# Nothing is installed: aiayn is imported from src/ (PYTHONPATH) by ${PYTHON:-python3}, which needs torch (and
# pytest for the tests). A failed test, a missing module or a limit passed ends the command with a non-zero
# status; run from anywhere in the repository.
set -euo pipefail
cd "$(dirname "$0")/.."
stage=${1:-}
case "$stage" in
    tests | eager | compiled) ;;
    *) echo "usage: OUT=FOLDER bash benchmarks/gpu.sh tests|eager|compiled (one stage a command)" >&2; exit 2 ;;
esac
OUT=${OUT:-benchmarks/results}
PY=${PYTHON:-python3}
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$OUT"
if command -v nvidia-smi > /dev/null; then
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
fi
# the package and a GPU, or stop here with the reason
"$PY" -c "import aiayn, torch; print('aiayn', aiayn.__file__, 'torch', torch.__version__, torch.cuda.is_available())"

case "$stage" in
    tests)
        status=0
        timeout "${TESTS_S:-240}" "$PY" -m pytest -m gpu -q -p no:cacheprovider > "$OUT/gpu-tests.txt" 2>&1 \
            || status=$?
        tail -5 "$OUT/gpu-tests.txt"
        if [ "$status" -ne 0 ]; then
            echo "gpu.sh tests: pytest failed (status $status; 124: cut off at ${TESTS_S:-240} s): see" \
                 "$OUT/gpu-tests.txt" >&2
            exit "$status"
        fi
        ;;
    eager)
        start=$SECONDS
        timeout "${EAGER_S:-210}" "$PY" benchmarks/gpu.py --steps 20 --out "$OUT"
        left=$(( ${EAGER_S:-210} - (SECONDS - start) ))
        timeout "$(( left > 1 ? left : 1 ))" "$PY" -m aiayn bench train-base gpt2-train gpt2-generate \
            --device cuda --rounds 5 --out "$OUT/gpu" --docs "$OUT/gpu/benchmarks.md"
        ;;
    compiled)
        timeout "${COMPILED_S:-180}" "$PY" benchmarks/gpu.py --steps 20 --compile --out "$OUT/compiled"
        ;;
esac
