#!/usr/bin/env bash
# Download into .whl/ (git-ignored) the wheels the lent H200 lacks, for its Python 3.12 and
# torch 2.11: torchao (0.17: the release built against torch 2.11), soundfile with cffi and
# pycparser (libsndfile is inside the soundfile wheel), soxr. numpy, triton, safetensors and
# tokenizers are already there (KINDS.md). About 5 MiB in all; the device command installs them
# first (bench/README.md).
#
#     bash bench/fetch_device_wheels.sh
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELS=(torchao==0.17.0 soundfile==0.14.0 cffi==2.1.1 pycparser==3.12 soxr==1.1.0)
PLATFORMS=(manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64
           manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64)
mkdir -p .whl
rm -f .whl/*.whl  # one version of each: two would stop the whole install there
args=(--no-deps --only-binary=:all: --python-version 3.12 --implementation cp -d .whl)
for p in "${PLATFORMS[@]}"; do args+=(--platform "$p"); done
for wheel in "${WHEELS[@]}"; do
    python3 -m pip download -q "${args[@]}" "$wheel"
done
ls -l .whl
total=$(du -cb .whl/*.whl | tail -1 | cut -f1)
echo "total: $((total / 1024)) KiB in $(ls .whl/*.whl | wc -l) wheels"
if (( total > 48 * 1024 * 1024 )); then
    echo "over 48 MiB: the working tree that travels is limited to 64 MiB" >&2
    exit 1
fi
