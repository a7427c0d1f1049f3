# The trainer's machine image: the programs and their Python environment, no Bazel. Build it
# from the repository root:
#   docker build -t inception-trainer .                               # CPUs
#   docker build --build-arg FLAVOUR=cuda -t inception-trainer .      # NVIDIA GPUs
# and run a program with its flags, e.g.
#   docker run --rm -v /runs:/runs inception-trainer train --train_dir=/runs/demo
# The entry point is bin/inception (PROGRAM [flags]); the Kubernetes manifests of
# deploy/kubernetes start it the same way. It runs as uid/gid 1000 and writes only to
# --train_dir and /tmp (the demo's data set too: INCEPTION_CACHE_DIR), so the container's root
# filesystem may be read-only. The files copied below are the ones the programs need;
# tests/deploy/image_test.py trains from a directory holding only them.
FROM python:3.11-slim-bookworm

# cpu: the pinned requirements; cuda: TensorFlow's CUDA wheels too, as bin/bazel installs on a
# machine with NVIDIA GPUs (the host needs the NVIDIA driver and container toolkit).
ARG FLAVOUR=cpu
ENV INCEPTION_VENV=/opt/venv \
    INCEPTION_CACHE_DIR=/tmp/inception \
    PYTHONDONTWRITEBYTECODE=1

COPY requirements.txt /opt/inception/requirements.txt
RUN python -m venv "$INCEPTION_VENV" \
    && "$INCEPTION_VENV/bin/pip" install --no-cache-dir --disable-pip-version-check \
         -r /opt/inception/requirements.txt \
    && if [ "$FLAVOUR" = cuda ]; then \
         "$INCEPTION_VENV/bin/pip" install --no-cache-dir --disable-pip-version-check \
           "tensorflow[and-cuda]==$(sed -n 's/^tensorflow==//p' /opt/inception/requirements.txt)"; \
       fi

COPY bin /opt/inception/bin
COPY common /opt/inception/common
COPY data /opt/inception/data
COPY inception /opt/inception/inception
# Compiled once here: a read-only root filesystem would otherwise make every start compile.
RUN "$INCEPTION_VENV/bin/python" -m compileall -q /opt/inception \
    && groupadd --gid 1000 trainer && useradd --uid 1000 --gid 1000 --create-home trainer

USER 1000:1000
WORKDIR /opt/inception
ENTRYPOINT ["bin/inception"]
CMD ["train"]
