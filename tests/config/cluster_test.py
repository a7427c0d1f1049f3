"""Cluster settings from flags or from TF_CONFIG (no TensorFlow needed)."""

import json
import unittest

from absl.testing import absltest

from inception.config import cluster as cluster_lib
from inception.config import recovery


class ClusterSettingsTest(unittest.TestCase):

    def settings(self, **overrides):
        values = dict(job_name="worker", task_id=0, ps_hosts=["ps:2222"],
                      worker_hosts=["w0:2222", "w1:2222"])
        values.update(overrides)
        return cluster_lib.cluster_settings(**values)

    def test_defaults_aggregate_one_gradient_per_worker(self):
        settings = self.settings()
        self.assertTrue(settings.is_chief)
        self.assertEqual(settings.replicas_to_aggregate, 2)
        self.assertEqual(self.settings(num_replicas_to_aggregate=-1).replicas_to_aggregate, 2)
        self.assertFalse(self.settings(task_id=1).is_chief)
        self.assertFalse(self.settings(job_name="ps").is_chief)
        self.assertIsNone(cluster_lib.cluster_settings("", 0, [], []))

    def test_a_cluster_without_parameter_servers_is_an_all_reduce(self):
        collective = self.settings(ps_hosts=[])
        self.assertTrue(collective.collective)
        self.assertFalse(self.settings().collective)
        self.assertEqual(collective.replicas_to_aggregate, 2)
        self.assertIn("cluster of 2 worker(s) and no parameter server (all-reduce)",
                      collective.describe())
        self.assertEqual(collective.cluster_spec().jobs, ["worker"])
        self.assertEqual(sorted(self.settings().cluster_spec().jobs), ["ps", "worker"])

    def test_bad_clusters_are_refused_with_what_to_do(self):
        cases = [
            (dict(num_replicas_to_aggregate=3), "between 1 and the number of workers"),
            (dict(task_id=2), "--task_id=2 but --worker_hosts lists 2"),
            (dict(job_name="ps", task_id=1), "--task_id=1 but --ps_hosts lists 1"),
            (dict(job_name="ps", ps_hosts=[]), "--ps_hosts is empty"),
            (dict(worker_hosts=[]), "--worker_hosts is empty"),
            (dict(ps_hosts=[], num_replicas_to_aggregate=1),
             "--num_replicas_to_aggregate=1 is for parameter servers"),
            (dict(worker_hosts=["w0:2222", "w0:2222"]), "appears more than once"),
            (dict(worker_hosts=["w0"]), "not host:port"),
            (dict(job_name="chief"), "use ps or worker"),
            (dict(job_name="", task_id=0), "need --job_name"),
            (dict(restart_exit_code=1), "--restart_exit_code=1: use 3 to 255 but none of"),
            (dict(restart_exit_code=130), "130 \\(Ctrl-C\\)"),
            (dict(restart_exit_code=256), "use 3 to 255"),
        ]
        for overrides, pattern in cases:
            with self.subTest(overrides=overrides):
                with self.assertRaisesRegex(cluster_lib.ClusterConfigError, pattern):
                    self.settings(**overrides)


    def test_the_restart_code_is_one_a_scheduler_can_be_told_to_retry(self):
        self.assertEqual(self.settings().restart_exit_code, 138)
        self.assertEqual(self.settings(restart_exit_code=42).restart_exit_code, 42)
        # 138 is what Kubeflow's ExitCode policy retries; any code the table gives a meaning
        # to is refused.
        for code in recovery.TAKEN_EXIT_CODES:
            with self.assertRaises(cluster_lib.ClusterConfigError):
                recovery.check_restart_exit_code(code)


class TfConfigTest(unittest.TestCase):
    """TF_CONFIG as Kubeflow's TFJob and Vertex AI write it."""

    CLUSTER = {"ps": ["ps0:2222"], "worker": ["w0:2222", "w1:2222"]}

    def from_env(self, task, cluster=None, **flags):
        values = dict(job_name="", task_id=0, ps_hosts=[], worker_hosts=[])
        values.update(flags)
        return cluster_lib.cluster_settings(**values, environment={
            "TF_CONFIG": json.dumps({"cluster": cluster or self.CLUSTER, "task": task})})

    def test_the_task_and_cluster_come_from_tf_config_without_flags(self):
        settings = self.from_env({"type": "worker", "index": 1})
        self.assertEqual((settings.job_name, settings.task_id), ("worker", 1))
        self.assertEqual(settings.ps_hosts, ("ps0:2222",))
        self.assertEqual(settings.worker_hosts, ("w0:2222", "w1:2222"))
        self.assertFalse(settings.is_chief)
        self.assertEqual(self.from_env({"type": "ps", "index": 0}).job_name, "ps")

    def test_a_chief_task_is_worker_zero(self):
        cluster = {"chief": ["c0:2222"], "worker": ["w0:2222"], "ps": ["ps0:2222"]}
        chief = self.from_env({"type": "chief", "index": 0}, cluster)
        self.assertTrue(chief.is_chief)
        self.assertEqual(chief.worker_hosts, ("c0:2222", "w0:2222"))
        worker = self.from_env({"type": "worker", "index": 0}, cluster)
        self.assertEqual(worker.task_id, 1)

    def test_flags_that_agree_are_fine_and_flags_that_contradict_are_an_error(self):
        agreeing = self.from_env({"type": "worker", "index": 1}, job_name="worker", task_id=1,
                                 ps_hosts=["ps0:2222"])
        self.assertEqual(agreeing.task_id, 1)
        with self.assertRaisesRegex(cluster_lib.ClusterConfigError,
                                    "--job_name=worker --task_id=0 but TF_CONFIG says worker 1"):
            self.from_env({"type": "worker", "index": 1}, job_name="worker", task_id=0)
        with self.assertRaisesRegex(cluster_lib.ClusterConfigError,
                                    "--ps_hosts=other:1 but TF_CONFIG lists ps0:2222"):
            self.from_env({"type": "ps", "index": 0}, ps_hosts=["other:1"])

    def test_unusable_tf_config_is_one_clear_line(self):
        cases = [("not json", "TF_CONFIG is not the JSON"),
                 (json.dumps({"cluster": self.CLUSTER, "task": {"type": "evaluator"}}),
                  "type 'evaluator'")]
        for text, pattern in cases:
            with self.subTest(text=text):
                with self.assertRaisesRegex(cluster_lib.ClusterConfigError, pattern):
                    cluster_lib.cluster_settings("", 0, [], [], environment={"TF_CONFIG": text})
        self.assertIsNone(cluster_lib.cluster_settings("", 0, [], [],
                                                       environment={"TF_CONFIG": "  "}))

    def test_workers_without_ps_tasks_are_an_all_reduce_cluster(self):
        settings = self.from_env({"type": "worker", "index": 0},
                                 {"chief": ["c0:2222"], "worker": ["w0:2222"]})
        self.assertTrue(settings.collective)
        self.assertEqual((settings.job_name, settings.task_id), ("worker", 1))
        self.assertEqual(settings.worker_hosts, ("c0:2222", "w0:2222"))

    def test_a_one_task_job_trains_on_this_machine(self):
        # Single-replica jobs (e.g. Vertex AI's) describe the cluster as their one task.
        for cluster, task in (({"chief": ["c0:2222"]}, {"type": "chief", "index": 0}),
                              ({"worker": ["w0:2222"]}, {"type": "worker", "index": 0})):
            with self.subTest(cluster=cluster):
                self.assertIsNone(self.from_env(task, cluster))

    def test_mistakes_in_tf_config_are_named_as_tf_config(self):
        with self.assertRaisesRegex(cluster_lib.ClusterConfigError,
                                    r"^TF_CONFIG's task index=2 but TF_CONFIG's chief and worker "
                                    r"list lists 2 task\(s\)"):
            self.from_env({"type": "worker", "index": 2})


class JobSetTest(unittest.TestCase):
    """A JobSet pod's environment, as deploy/kubernetes/jobset.yaml sets it."""

    def environment(self, index, completions=3, **extra):
        return dict({"JOB_COMPLETION_INDEX": str(index), "JOB_COMPLETIONS": str(completions),
                     "JOBSET_NAME": "inception", "REPLICATED_JOB_NAME": "workers"}, **extra)

    def test_the_task_is_the_completion_index_and_the_peers_the_stable_host_names(self):
        settings = cluster_lib.cluster_settings("", 0, [], [], cluster_port=2345,
                                                environment=self.environment(2))
        self.assertEqual((settings.job_name, settings.task_id), ("worker", 2))
        self.assertEqual(settings.worker_hosts, tuple(
            f"inception-workers-0-{task}.inception:2345" for task in range(3)))
        self.assertTrue(settings.collective)
        self.assertTrue(cluster_lib.cluster_settings(
            "", 0, [], [], environment=self.environment(0)).is_chief)
        other = cluster_lib.cluster_settings("", 0, [], [], environment=self.environment(
            1, JOBSET_SUBDOMAIN="net"))
        self.assertEqual(other.address, "inception-workers-0-1.net:2222")

    def test_one_pod_trains_alone_and_flags_win(self):
        self.assertIsNone(cluster_lib.cluster_settings("", 0, [], [],
                                                       environment=self.environment(0, 1)))
        flagged = cluster_lib.cluster_settings("worker", 1, [], ["a:1", "b:1"],
                                               environment=self.environment(0))
        self.assertEqual((flagged.task_id, flagged.worker_hosts), (1, ("a:1", "b:1")))

    def test_a_missing_variable_is_one_line_naming_the_manifest(self):
        broken = self.environment(0)
        del broken["JOB_COMPLETIONS"]
        with self.assertRaisesRegex(cluster_lib.ClusterConfigError,
                                    "JOB_COMPLETIONS.*deploy/kubernetes/jobset.yaml"):
            cluster_lib.cluster_settings("", 0, [], [], environment=broken)
        with self.assertRaisesRegex(cluster_lib.ClusterConfigError,
                                    "the JobSet's task index=5 but the JobSet's worker list "
                                    r"lists 3 task\(s\)"):
            cluster_lib.cluster_settings("", 0, [], [], environment=self.environment(5))


if __name__ == "__main__":
    absltest.main()
