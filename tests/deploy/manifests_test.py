"""The Kubernetes manifests and the Slurm script of deploy/: they parse, pass only flags the
trainer has, and agree on the image, port, restart code and shared volume; the environment each
scheduler gives a task describes the cluster it should. Each manifest lets only its job's own
pods reach them (a NetworkPolicy), and runs them as a user and group other than root, without
privileges or capabilities, under the runtime's default seccomp profile, on a read-only root
filesystem (docs/ports.md); each starts the trainer the way the Dockerfile's image does, with
bin/inception and no Bazel."""

import copy
import json
import os
import re
import unittest

import yaml
from absl import flags
from absl.testing import absltest

from inception import train  # defines the trainer's flags  # pylint: disable=unused-import
from inception.config import cluster as cluster_lib
from inception.config import recovery

DEPLOY = os.path.join(os.path.dirname(__file__), "..", "..", "deploy")
DOCKERFILE = os.path.join(os.path.dirname(__file__), "..", "..", "Dockerfile")
LAUNCHER = "bin/inception"
# The exit statuses Kubeflow's training operator v1.9.0 retries under restartPolicy ExitCode:
# 128 and above (pkg/util/train/train_util.go, IsRetryableExitCode: `exitCode >= 128`, the
# same in v1.8.0); a lower status fails the replica for good.
KUBEFLOW_FIRST_RETRYABLE = 128
RESTART = recovery.DEFAULT_RESTART_EXIT_CODE
# The label each controller puts on its job's pods, valued with the job's name: JobSet v0.12.0
# (pkg/controllers/jobset_controller.go, labelAndAnnotateObject) and Kubeflow's training
# operator v1.9.0 (pkg/controller.v1/common/job_controller.go, GenLabels).
JOBSET_POD_LABEL = "jobset.sigs.k8s.io/jobset-name"
TFJOB_POD_LABEL = "training.kubeflow.org/job-name"


def documents(name):
    """The YAML documents of the manifest `name` of deploy/kubernetes, in order."""
    with open(os.path.join(DEPLOY, "kubernetes", name), encoding="utf-8") as handle:
        return [document for document in yaml.safe_load_all(handle) if document]


def load(name):
    """The job of the manifest `name`: its first document."""
    return documents(name)[0]


def network_policy(name):
    """The one NetworkPolicy of the manifest `name` (AssertionError if there is none, or more)."""
    policies = [document for document in documents(name)
                if document["kind"] == "NetworkPolicy"]
    if len(policies) != 1:
        raise AssertionError(f"{name} has {len(policies)} NetworkPolicy documents, not 1")
    return policies[0]


def check_only_the_job_reaches_its_pods(test, name, label, ports):
    """Checks that the NetworkPolicy of manifest `name` selects the pods whose `label` is the
    job's name and admits ingress to them from those pods alone, on the TCP `ports` alone: a
    rule without `from` would admit everyone, a namespace selector or an address block others."""
    job, policy = load(name), network_policy(name)
    test.assertEqual(policy["apiVersion"], "networking.k8s.io/v1")
    test.assertEqual(policy["metadata"].get("namespace"), job["metadata"].get("namespace"))
    own_pods = {"matchLabels": {label: job["metadata"]["name"]}}
    spec = policy["spec"]
    test.assertEqual(spec["podSelector"], own_pods)
    test.assertIn("Ingress", spec["policyTypes"])
    test.assertTrue(spec["ingress"], "an empty ingress list admits no one, not the job")
    for rule in spec["ingress"]:
        test.assertEqual(rule.get("from"), [{"podSelector": own_pods}])
        test.assertEqual(rule.get("ports"), [{"protocol": "TCP", "port": port} for port in ports])


def check_locked_down(test, pod):
    """Checks that `pod` (a pod template's spec) runs as a user and group other than root, with
    the runtime's default seccomp profile, and every container of it (init containers too, if
    any) without privilege escalation, capabilities or privileged mode, on a read-only root
    filesystem with /tmp an emptyDir of the pod's own."""
    security = pod["securityContext"]
    test.assertIs(security["runAsNonRoot"], True)
    test.assertGreater(security["runAsUser"], 0)
    test.assertGreater(security["runAsGroup"], 0)
    test.assertEqual(security["fsGroup"], security["runAsGroup"])  # so it may write /runs
    test.assertEqual(security["seccompProfile"], {"type": "RuntimeDefault"})
    for each in pod.get("initContainers", []) + pod["containers"]:
        with test.subTest(container=each["name"]):
            restricted = each["securityContext"]
            test.assertIs(restricted["allowPrivilegeEscalation"], False)
            test.assertEqual(restricted["capabilities"], {"drop": ["ALL"]})
            test.assertIs(restricted.get("privileged", False), False)
            test.assertIs(restricted["readOnlyRootFilesystem"], True)
            mounts = {mount["mountPath"]: mount["name"] for mount in each["volumeMounts"]}
            volumes = {volume["name"]: volume for volume in pod["volumes"]}
            test.assertEqual(volumes[mounts["/tmp"]].get("emptyDir"), {})
            # Nothing in a container may undo the pod's user, group or seccomp profile.
            for key in ("runAsUser", "runAsGroup", "runAsNonRoot", "seccompProfile"):
                test.assertEqual(restricted.get(key, security[key]), security[key], key)


def flag_values(args):
    """{flag: value} of `--flag=value` arguments, after checking that each is a flag of the
    trainer and that it parses the value (a copy of the flag parses it)."""
    values = dict(arg[2:].split("=", 1) for arg in args)
    for name, value in values.items():
        if name not in flags.FLAGS:
            raise AssertionError(f"//inception:train has no flag --{name}")
        copy.deepcopy(flags.FLAGS[name]).parse(value)
    return values


def jobset_pod(manifest):
    job = manifest["spec"]["replicatedJobs"][0]["template"]["spec"]
    return job, job["template"]["spec"], job["template"]["spec"]["containers"][0]


class JobSetTest(unittest.TestCase):

    def setUp(self):
        self.manifest = load("jobset.yaml")
        self.job, self.pod, self.container = jobset_pod(self.manifest)
        self.args = flag_values(self.container["args"])

    def test_the_restart_code_restarts_the_jobset_and_anything_else_fails_it(self):
        rules = self.job["podFailurePolicy"]["rules"]
        fail = [rule for rule in rules if rule["action"] == "FailJob"][0]["onExitCodes"]
        self.assertEqual((fail["operator"], fail["values"]), ("NotIn", [RESTART]))
        self.assertEqual(fail["containerName"], self.container["name"])
        self.assertEqual(int(self.args["restart_exit_code"]), RESTART)
        # A preempted pod counts as a failure (a restart), before its exit status is looked at.
        self.assertEqual(rules[0]["onPodConditions"][0]["type"], "DisruptionTarget")
        self.assertEqual(self.job["backoffLimit"], 0)
        self.assertEqual(self.manifest["spec"]["failurePolicy"]["rules"][0],
                         {"action": "FailJobSet", "onJobFailureReasons": ["PodFailurePolicy"]})
        self.assertGreaterEqual(self.pod["terminationGracePeriodSeconds"], 120)

    def test_each_pod_finds_its_peers_by_the_jobsets_host_names(self):
        self.assertEqual(self.job["completionMode"], "Indexed")
        count = self.job["completions"]
        self.assertEqual(self.job["parallelism"], count)
        env = {item["name"]: item for item in self.container["env"]}
        self.assertEqual(env["JOB_COMPLETIONS"]["value"], str(count))
        self.assertIn("jobset.sigs.k8s.io/jobset-name",
                      env["JOBSET_NAME"]["valueFrom"]["fieldRef"]["fieldPath"])
        port = int(self.args["cluster_port"])
        self.assertEqual(self.container["ports"][0]["containerPort"], port)
        name = self.manifest["metadata"]["name"]
        job_name = self.manifest["spec"]["replicatedJobs"][0]["name"]
        environment = {"JOBSET_NAME": name, "REPLICATED_JOB_NAME": job_name,
                       "JOB_COMPLETIONS": str(count), "JOB_COMPLETION_INDEX": "1"}
        settings = cluster_lib.cluster_settings("", 0, [], [], cluster_port=port,
                                                environment=environment)
        self.assertEqual(settings.task_id, 1)
        self.assertTrue(settings.collective)
        self.assertEqual(settings.worker_hosts[count - 1],
                         f"{name}-{job_name}-0-{count - 1}.{name}:{port}")

    def test_the_train_dir_is_on_the_shared_volume(self):
        self.assertTrue(shared_train_dir(self, self.args, self.container, self.pod))

    def test_only_the_jobsets_own_pods_reach_its_pods(self):
        check_only_the_job_reaches_its_pods(self, "jobset.yaml", JOBSET_POD_LABEL,
                                            [int(self.args["cluster_port"])])

    def test_pods_run_unprivileged_as_a_user_other_than_root(self):
        check_locked_down(self, self.pod)


def shared_train_dir(test, args, container, pod):
    """Checks that --train_dir lies on a mounted persistent volume claim; returns the claim."""
    mounts = {mount["mountPath"]: mount["name"] for mount in container["volumeMounts"]}
    path = [mount for mount in mounts if args["train_dir"].startswith(mount + "/")]
    test.assertEqual(len(path), 1, args["train_dir"])
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    return volumes[mounts[path[0]]]["persistentVolumeClaim"]["claimName"]


class TfJobTest(unittest.TestCase):

    def setUp(self):
        self.manifest = load("tfjob.yaml")
        self.replicas = self.manifest["spec"]["tfReplicaSpecs"]

    def test_kubeflow_retries_the_restart_code_and_every_task_is_alike(self):
        self.assertGreaterEqual(RESTART, KUBEFLOW_FIRST_RETRYABLE)
        for mistake in (1, 2):  # a run's own error, a bad flag: not retried
            self.assertLess(mistake, KUBEFLOW_FIRST_RETRYABLE)
        self.assertNotIn("PS", self.replicas)  # an all-reduce cluster
        for kind, spec in self.replicas.items():
            with self.subTest(kind=kind):
                self.assertEqual(spec["restartPolicy"], "ExitCode")
                container = spec["template"]["spec"]["containers"][0]
                self.assertEqual(container["name"], "tensorflow")  # what the operator reads
                self.assertEqual(container["ports"][0]["name"], "tfjob-port")
                args = flag_values(container["args"])
                self.assertEqual(int(args["restart_exit_code"]), RESTART)
                self.assertTrue(shared_train_dir(self, args, container, spec["template"]["spec"]))

    def test_the_operators_tf_config_gives_the_chief_worker_0(self):
        port = self.replicas["Chief"]["template"]["spec"]["containers"][0]["ports"][0][
            "containerPort"]
        workers = self.replicas["Worker"]["replicas"]
        cluster = {"chief": [f"inception-chief-0:{port}"],
                   "worker": [f"inception-worker-{i}:{port}" for i in range(workers)]}
        chief = cluster_lib.cluster_settings("", 0, [], [], environment={"TF_CONFIG": json.dumps(
            {"cluster": cluster, "task": {"type": "chief", "index": 0}})})
        self.assertTrue(chief.is_chief)
        self.assertEqual(chief.num_workers, workers + 1)

    def test_only_the_tfjobs_own_pods_reach_its_pods(self):
        ports = {port["containerPort"] for spec in self.replicas.values()
                 for port in spec["template"]["spec"]["containers"][0]["ports"]}
        check_only_the_job_reaches_its_pods(self, "tfjob.yaml", TFJOB_POD_LABEL, sorted(ports))

    def test_pods_run_unprivileged_as_a_user_other_than_root(self):
        for kind, spec in self.replicas.items():
            with self.subTest(kind=kind):
                check_locked_down(self, spec["template"]["spec"])


class AgreementTest(unittest.TestCase):

    def test_both_manifests_and_the_slurm_script_agree(self):
        _, pod, jobset = jobset_pod(load("jobset.yaml"))
        tfjob_pod = load("tfjob.yaml")["spec"]["tfReplicaSpecs"]["Chief"]["template"]["spec"]
        tfjob = tfjob_pod["containers"][0]
        self.assertEqual(jobset["image"], tfjob["image"])
        self.assertEqual(jobset["command"], tfjob["command"])
        # The image's launcher, from the image's working directory, as its entry point runs it.
        with open(DOCKERFILE, encoding="utf-8") as handle:
            dockerfile = handle.read()
        self.assertEqual(jobset["command"], [LAUNCHER, "train"])
        self.assertIn(f'ENTRYPOINT ["{LAUNCHER}"]', dockerfile)
        for container in (jobset, tfjob):
            self.assertIn(f"WORKDIR {container['workingDir']}\n", dockerfile)
        self.assertEqual(jobset["ports"][0]["containerPort"], tfjob["ports"][0]["containerPort"])
        jobset_args, tfjob_args = flag_values(jobset["args"]), flag_values(tfjob["args"])
        for name in ("train_dir", "data_dir", "batch_size", "num_gpus", "restart_exit_code"):
            self.assertEqual(jobset_args[name], tfjob_args[name], name)
        self.assertEqual(shared_train_dir(self, jobset_args, jobset, pod),
                         shared_train_dir(self, tfjob_args, tfjob, tfjob_pod))
        self.assertEqual(pod["securityContext"], tfjob_pod["securityContext"])
        self.assertEqual(network_policy("jobset.yaml")["spec"]["ingress"][0]["ports"],
                         network_policy("tfjob.yaml")["spec"]["ingress"][0]["ports"])
        with open(os.path.join(DEPLOY, "slurm", "train.sbatch"), encoding="utf-8") as handle:
            script = handle.read()
        self.assertEqual(int(re.search(r"^RESTART_EXIT_CODE=(\d+)$", script, re.M).group(1)),
                         RESTART)
        self.assertIn(f"TRAIN=${{INCEPTION_TRAIN:-{LAUNCHER} train}}", script)
        slurm = dict(re.findall(r"--(\w+)=([^\s'\"\\]+)", script))
        self.assertEqual(slurm["cluster_port"], jobset_args["cluster_port"])
        for name in ("train_dir", "data_dir", "batch_size", "num_gpus"):
            self.assertEqual(slurm[name], jobset_args[name], name)


if __name__ == "__main__":
    absltest.main()
