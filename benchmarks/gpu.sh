#!/usr/bin/env bash
# One prepared run for a lent GPU (an H200): `pytest -m gpu`, then MFU of gpt2 and transformer-base training and gpt2 generation
# tokens/s in bf16, eager and then compiled, plus the fp32 side-by-side cases of the CPU harness on the GPU.
# Writes benchmarks/results/gpu.json, results/compiled/gpu.json and the harness's <case>.json files under results/gpu/.
# A few minutes in all; run from the repository root with the package installed.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-benchmarks/results}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
# the GPU tests first (CPU against GPU outputs for every family, kernels, devices); their report is kept
mkdir -p "$OUT"
python -m pytest -m gpu -q -p no:cacheprovider > "$OUT/gpu-tests.txt" 2>&1 \
    || echo "some GPU tests failed: see $OUT/gpu-tests.txt"
tail -3 "$OUT/gpu-tests.txt"
python benchmarks/gpu.py --steps 20 --out "$OUT"
python benchmarks/gpu.py --steps 20 --compile --out "$OUT/compiled"
python -m aiayn bench train-base gpt2-train gpt2-generate --device cuda --rounds 7 --out "$OUT/gpu" \
    --docs "$OUT/gpu/benchmarks.md"
