#!/bin/bash
# Runs on the offline GPU machine, from the repository root, with make_payload.sh's output in
# PAYLOAD (default .gpu). Subcommands (each unpacks first if needed):
#   smoke                 TensorFlow sees the GPU; a matmul and a convolution run on it
#   check [flags]         the one GPU check (tools/gpu_check.py; flags go to it): GPU tests,
#                         demo trainings in fp32/bf16/fp16 with evaluation, the benchmark
#   train [flags]         the demo training and then one evaluation (flags go to training)
#   bench [flags]         bench.throughput (flags go to it)
#   python ARGS...        any python3 command in the same environment
# Results and logs go under OUT (default ./gpu_out). Written for TF 2.21's CUDA 12.5 build on a
# machine whose own CUDA is 13: cudart and cuBLAS 12 come with the payload, cuDNN 9 is the
# machine's, and FFT/solver 12 libraries stand in for the 11 sonames TensorFlow opens at start
# (nothing here calls them).
set -uo pipefail
payload=${PAYLOAD:-.gpu}
out=${OUT:-./gpu_out}
site=${SITE:-/tmp/inception_gpu_site}
start=$(date +%s)
say() { echo "[$(( $(date +%s) - start ))s] $*" >&2; }
mkdir -p "$out"

unpack() {
  [ -f "$site/.done" ] && return 0
  local zstd="env LD_LIBRARY_PATH=$payload/bin $payload/bin/zstd" blob=/tmp/inception_gpu_blob
  read -r size_a size_cc size_c < "$payload/sizes"
  cat "$payload"/parts/c*/blob.* > "$blob" || return 1
  [ "$(stat -c %s "$blob")" -eq $((size_a + size_cc + size_c)) ] \
    || { say "payload incomplete: $(stat -c %s "$blob") of $((size_a + size_cc + size_c)) bytes"; return 1; }
  mkdir -p "$site/cu12"
  piece() {  # bytes [$1, $1 + $2) of the blob; $2 empty: to the end
    dd if="$blob" bs=4M iflag=skip_bytes,count_bytes skip="$1" ${2:+count="$2"} status=none
  }
  piece 0 "$size_a" | $zstd -d -q --long=31 | tar -C "$site" -xf - || return 1
  piece "$size_a" "$size_cc" \
    | $zstd -d -q --long=31 -o "$site/tensorflow/libtensorflow_cc.so.2" || return 1
  piece $((size_a + size_cc)) "" | $zstd -d -q --long=31 | tar -C "$site/cu12" -xf - || return 1
  rm -f "$blob"
  touch "$site/.done"
  say "unpacked $(du -sh "$site" | cut -f1) into $site"
}

environment() {
  local cuda13 links=/tmp/inception_gpu_links
  cuda13=$(find / -xdev -name 'libcufft.so.12*' 2>/dev/null | head -1)
  [ -n "$cuda13" ] || say "no libcufft.so.12 on this machine: TensorFlow will not use the GPU"
  cuda13=$(dirname "${cuda13:-/nonexistent/x}")
  mkdir -p "$links"
  ln -sf "$cuda13/libcufft.so.12" "$links/libcufft.so.11"
  ln -sf "$cuda13/libcusolver.so.12" "$links/libcusolver.so.11"
  export LD_LIBRARY_PATH="$site/cu12/cublas/lib:$site/cu12/cuda_runtime/lib:$links:$cuda13:${LD_LIBRARY_PATH:-}"
  export PYTHONPATH="$site:$PWD" PYTHONUNBUFFERED=1
  # TF 2.21 ships compute_90 PTX, not Hopper machine code: keep the JIT results between runs.
  export CUDA_CACHE_PATH=/tmp/inception_gpu_nvcache CUDA_CACHE_MAXSIZE=4294967296
  export XLA_FLAGS="--xla_gpu_cuda_data_dir=${CUDA_HOME:-/usr/local/cuda}"
  export TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-1}
}

unpack || { say "unpack failed"; exit 3; }
environment
command=${1:-smoke}
shift || true
case $command in
  smoke)
    python3 - <<'PY' 2>&1 | tee "$out/smoke.log"
import time
import tensorflow as tf
info = tf.sysconfig.get_build_info()
print("tensorflow", tf.__version__, "cuda", info.get("cuda_version"),
      info.get("cuda_compute_capabilities"))
print("gpus", tf.config.list_physical_devices("GPU"))
start = time.time()
x = tf.random.normal([4096, 4096])
print("matmul", float(tf.reduce_sum(x @ x)), f"{time.time() - start:.1f}s")
y = tf.nn.conv2d(tf.random.normal([8, 64, 64, 32]), tf.random.normal([3, 3, 32, 64]), 1, "SAME")
print("conv", y.shape, f"{time.time() - start:.1f}s")
PY
    grep -q "^conv" "$out/smoke.log" ;;
  check)
    python3 -m tools.gpu_check --out="$out" "$@" ;;
  train)
    python3 -m inception.train --train_dir=/tmp/inception_gpu_train "$@" 2>&1 \
      | tee "$out/train.log" | grep -v "^WARNING\|^I0000"
    python3 -m inception.eval --checkpoint_dir=/tmp/inception_gpu_train --run_once 2>&1 \
      | tee "$out/eval.log" | tail -3 ;;
  bench)
    python3 -m bench.throughput --output_json="$out/bench.json" "$@" 2>&1 \
      | tee "$out/bench.log" | grep -v "^WARNING\|^I0000" ;;
  python)
    python3 "$@" ;;
  *)
    say "unknown subcommand $command (smoke, check, train, bench, python)"; exit 2 ;;
esac
