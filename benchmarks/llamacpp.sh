#!/usr/bin/env bash
# llama.cpp as a peer of `aiayn bench` (the -llamacpp cases): llama-cpp-python built from its source release into
# the active environment, with this machine's instruction sets but without AMX (its int8 tile kernels crashed with
# a segmentation fault on the first q8_0 product on the Sapphire Rapids VMs here), and the same release's
# llama.cpp tree kept for its GGUF converter (convert_hf_to_gguf.py, which the wheel does not hold).
#
#     bash benchmarks/llamacpp.sh            # about ten minutes on two cores; prints the line to export
#     export LLAMA_CPP_DIR=...               # then: aiayn bench llama-124m-generate-llamacpp --out ...
set -euo pipefail
VERSION=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
HOME_DIR=${AIAYN_CACHE:-$HOME/.cache/aiayn}/llama-cpp-python-$VERSION
mkdir -p "$HOME_DIR"
if [[ ! -d $HOME_DIR/src ]]; then
  pip download "llama-cpp-python==$VERSION" --no-deps --no-binary :all: -d "$HOME_DIR" -q
  mkdir -p "$HOME_DIR/src" && tar xzf "$HOME_DIR/llama_cpp_python-$VERSION.tar.gz" -C "$HOME_DIR/src" --strip-components 1
fi
# ggml's switches for the instruction sets /proc/cpuinfo lists (GGML_NATIVE would also turn AMX on)
flags=(-DGGML_NATIVE=OFF)
for pair in avx:AVX avx2:AVX2 fma:FMA f16c:F16C bmi2:BMI2 avx512f:AVX512 avx512_vbmi:AVX512_VBMI \
            avx512_vnni:AVX512_VNNI avx512_bf16:AVX512_BF16 avx_vnni:AVX_VNNI; do
  grep -qw "${pair%%:*}" /proc/cpuinfo && flags+=("-DGGML_${pair##*:}=ON")
done
CMAKE_ARGS="${flags[*]}" CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) pip install --no-deps --force-reinstall -q "$HOME_DIR/src"
pip install -q diskcache jinja2 numpy  # llama-cpp-python's own requirements (its tree holds gguf-py for the converter)
echo "export LLAMA_CPP_DIR=$HOME_DIR/src/vendor/llama.cpp"
