"""How long a task waits for a peer that stopped answering without dying (a machine gone, a
process stopped): TensorFlow's coordination-service heartbeats against the session's operation
timeout (--step_timeout_secs), on two processes of 127.0.0.1 summing a tensor with a collective
all-reduce each step, until the second one is stopped (SIGSTOP: it keeps its sockets, as a
dead machine's peers see no reset).

    python3 -m bench.heartbeats --output_json=bench/results/heartbeats-cpu-2core.json

Three ways: the graph-mode session this trainer runs (tf.compat.v1.train.Server), without and
with a coordination service configured (ConfigProto.experimental.coordination_config), and
TensorFlow's eager runtime with it (what MultiWorkerMirroredStrategy starts). Run by hand from
the repository root with the project's environment.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time

from common import machine
from common.loopback import free_ports

WAYS = ("graph", "graph_coordinated", "eager_coordinated")
TASK = r'''
import os, sys, time
import tensorflow as tf
from tensorflow.core.protobuf import tensorflow_server_pb2
from tensorflow.python.eager import context
tf1 = tf.compat.v1
task, hosts, way = int(sys.argv[1]), sys.argv[2].split(","), sys.argv[3]
heartbeat_ms, timeout_ms = int(sys.argv[4]), int(sys.argv[5])
leader = "/job:worker/replica:0/task:0"
config = tf1.ConfigProto()
config.experimental.collective_group_leader = leader
if way != "graph":
    coordination = config.experimental.coordination_config
    coordination.service_type = "standalone"
    coordination.service_leader = leader
    coordination.heartbeat_timeout_in_ms = heartbeat_ms
spec = tf1.train.ClusterSpec({"worker": hosts})
device = f"/job:worker/replica:0/task:{task}/device:CPU:0"
def reduce(value):
    return tf.raw_ops.CollectiveReduceV2(
        input=value, group_size=2, group_key=1, instance_key=1, ordering_token=[],
        merge_op="Add", final_op="Id", communication_hint="ring")
if way == "eager_coordinated":
    context.context().configure_collective_ops(collective_leader=leader)
    context.context().enable_collective_ops(tensorflow_server_pb2.ServerDef(
        cluster=spec.as_cluster_def(), job_name="worker", task_index=task, protocol="grpc",
        default_session_config=config))
    @tf.function
    def step():
        with tf.device(device):
            return reduce(tf.constant([1.0, 2.0]))
else:
    os.environ["GRPC_FAIL_FAST"] = "true"
    server = tf1.train.Server(spec, job_name="worker", task_index=task, config=config)
    graph = tf.Graph()
    with graph.as_default(), tf.device(device):
        summed = reduce(tf.constant([1.0, 2.0]))
    session_config = tf1.ConfigProto()
    session_config.CopyFrom(config)
    session_config.device_filters[:] = [f"/job:worker/task:{task}"]
    session_config.operation_timeout_in_ms = timeout_ms
    session = tf1.Session(server.target, graph=graph, config=session_config)
    step = lambda: session.run(summed)
steps = 0
while True:
    started = time.time()
    try:
        step()
    except Exception as error:  # the point: which error, after how long
        print(f"FAILED {time.time() - started:.2f} {type(error).__name__}", flush=True)
        break
    steps += 1
    if steps == 20:
        print("RUNNING", flush=True)
    time.sleep(0.05)
'''


def measure(way, heartbeat_ms, timeout_ms):
    """Seconds from stopping the second task to the first task's failed step, and the error."""
    hosts = ",".join(f"127.0.0.1:{port}" for port in free_ports(2))
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="3")
    tasks = [subprocess.Popen([sys.executable, "-c", TASK, str(task), hosts, way,
                               str(heartbeat_ms), str(timeout_ms)], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True, env=env)
             for task in range(2)]
    try:
        while tasks[0].stdout.readline().strip() != "RUNNING":
            if tasks[0].poll() is not None:
                raise RuntimeError(f"{way}: the first task ended before it ran")
        tasks[1].send_signal(signal.SIGSTOP)
        stopped = time.time()
        line = tasks[0].stdout.readline().split()
        return {"seconds": round(time.time() - stopped, 2), "error": line[2] if line else None}
    finally:
        for task in tasks:
            task.kill()
            task.wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--heartbeat_ms", type=int, default=5000)
    parser.add_argument("--timeout_ms", type=int, default=60000,
                        help="the session's operation timeout (--step_timeout_secs)")
    parser.add_argument("--output_json", default="")
    args = parser.parse_args()
    results = {way: measure(way, args.heartbeat_ms, args.timeout_ms) for way in WAYS}
    for way, result in results.items():
        print(f"{way}: the first task's step failed {result['seconds']} s after the other "
              f"stopped ({result['error']})")
    if args.output_json:
        with open(args.output_json, "w", encoding="utf-8") as handle:
            json.dump({"results": results, "heartbeat_timeout_ms": args.heartbeat_ms,
                       "operation_timeout_ms": args.timeout_ms,
                       "machine": f"{os.uname().machine} {machine.cpu_summary()}",
                       "date": time.strftime("%Y-%m-%d")}, handle, indent=2)
            handle.write("\n")


if __name__ == "__main__":
    main()
