#!/bin/bash
# Builds, on a machine with package-registry access, everything an offline NVIDIA GPU machine
# needs to run this project's benchmark and training with TensorFlow 2.21's CUDA build:
# TensorFlow and its Python dependencies for the target's Python, cudart and cuBLAS 12, all
# compressed with zstd and split into parts of at most PART_MB MiB (for transfers that limit
# size). Usage: tools/gpu_offline/make_payload.sh OUT_DIR [PYTHON_VERSION, default 3.12]
# Then copy OUT_DIR's parts to the GPU machine and run tools/gpu_offline/run_on_gpu.sh there.
set -euo pipefail
out=${1:?usage: make_payload.sh OUT_DIR [PYTHON_VERSION]}
py=${2:-3.12}
part_mb=${PART_MB:-61}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out" "$work/wheels" "$work/site/cu12" "$work/cublas"
echo "downloading wheels for Python $py into $work/wheels" >&2
# Versions: requirements.txt's pins where it has them; the CUDA 12.5 libraries TF 2.21 was
# built against; the rest are TensorFlow's and Keras's own needs.
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version "$py" \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform manylinux1_x86_64 -d "$work/wheels" \
  tensorflow==2.21.0 tf-keras==2.21.0 tf-slim==1.1.0 keras==3.15.1 namex==0.1.0 \
  optree==0.20.0 gast==0.7.0 google_pasta==0.2.0 astunparse==1.6.3 termcolor==3.3.0 \
  ml_dtypes==0.6.0 flatbuffers==25.12.19 wrapt==2.5.2 absl-py==2.5.1 protobuf==7.36.2 \
  opt_einsum==3.4.0 "nvidia-cuda-runtime-cu12>=12.5.82,<12.6" \
  "nvidia-cublas-cu12>=12.5.3.2,<12.6"
for wheel in "$work"/wheels/*.whl; do
  case $(basename "$wheel") in
    nvidia_cublas*) unzip -q -o "$wheel" 'nvidia/cublas/lib/libcublas*.so.12' -d "$work/cublas" ;;
    nvidia_cuda_runtime*) unzip -q -o "$wheel" 'nvidia/cuda_runtime/lib/libcudart.so.12' \
                            -d "$work/cublas" ;;
    *) unzip -q -o "$wheel" -d "$work/site" ;;
  esac
done
rm -rf "$work/site/tensorflow/include"  # 430 MB of C++ headers nothing here compiles against
echo "compressing (several minutes on 2 cores)" >&2
tar -C "$work/site" --exclude=tensorflow/libtensorflow_cc.so.2 -cf - . \
  | zstd -q -T0 -15 --long=27 -o "$work/A.tar.zst"
zstd -q -T0 -19 --long=30 -o "$work/cc.zst" "$work/site/tensorflow/libtensorflow_cc.so.2"
tar -C "$work/cublas/nvidia" -cf - cublas/lib cuda_runtime/lib \
  | zstd -q -T0 -19 --long=29 -o "$work/C.tar.zst"
echo "$(stat -c %s "$work/A.tar.zst") $(stat -c %s "$work/cc.zst") $(stat -c %s "$work/C.tar.zst")" \
  > "$out/sizes"
rm -rf "$out/parts" && mkdir -p "$out/parts"
cat "$work/A.tar.zst" "$work/cc.zst" "$work/C.tar.zst" \
  | split -b $((part_mb * 1024 * 1024)) -d -a 2 - "$out/parts/blob."
for part in "$out"/parts/blob.*; do
  mkdir -p "$out/parts/c${part##*.}" && mv "$part" "$out/parts/c${part##*.}/"
done
# zstd may be missing there: carry this machine's binary and the libraries it links.
mkdir -p "$out/bin" && cp "$(command -v zstd)" "$out/bin/"
ldd "$(command -v zstd)" | awk '/=> \// {print $3}' | grep -v -E 'libc\.so|ld-linux' \
  | xargs -r -I{} cp -L {} "$out/bin/"
cp "$(dirname "$0")/run_on_gpu.sh" "$out/"
echo "payload: $(du -sh "$out" | cut -f1) in $(ls "$out/parts" | wc -l) parts under $out/parts" >&2
