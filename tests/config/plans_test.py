"""Training plans from the command line and from files: parsing, checks, the one plan."""

import json
import os
import unittest

from absl.testing import absltest

from inception.config import plans
from inception.config import recipe
from inception.config import settings as settings_lib
from tests import testing_utils


class PlanParsingTest(unittest.TestCase):

    def test_command_line_form(self):
        plan = plans.parse_stages("head:2000:InceptionV3/Logits,InceptionV3/AuxLogits; all")
        self.assertEqual(plan.stages[0], plans.Stage(
            "head", 2000, ("InceptionV3/Logits", "InceptionV3/AuxLogits")))
        self.assertEqual(plan.stages[1], plans.Stage("all"))
        self.assertIsNone(plan.total_steps)
        self.assertEqual([plan.stage_index_at(s) for s in (0, 1999, 2000, 10**6)], [0, 0, 1, 1])

    def test_file_form(self):
        path = os.path.join(testing_utils.temp_dir("plan"), "plan.json")
        with open(path, "w", encoding="utf-8") as handle:
            json.dump({"stages": [{"name": "g", "steps": 5, "scopes": ["generator"],
                                   "loss_terms": ["generator_loss"], "optimizer": "adam",
                                   "learning_rate": 0.001},
                                  {"name": "d", "steps": 3}]}, handle)
        plan = plans.load_plan(path)
        self.assertEqual(plan.stages[0].loss_terms, ("generator_loss",))
        self.assertEqual(plan.total_steps, 8)
        self.assertEqual(plan.stage_start(1), 5)

    def test_bad_plans(self):
        cases = {"a:x": "whole number", "a;b:3": "needs a number of steps",
                 "a:0": "at least 1", "a:1;a": "unique", "a:1:b:c": "expected name"}
        for text, message in cases.items():
            with self.subTest(text=text):
                with self.assertRaisesRegex(plans.PlanError, message):
                    plans.parse_stages(text)
        with self.assertRaisesRegex(plans.PlanError, "unknown optimizer"):
            plans.TrainingPlan((plans.Stage("a", optimizer="lbfgs"),)).validate()

    def test_file_with_unknown_key(self):
        path = os.path.join(testing_utils.temp_dir("plan_bad"), "plan.json")
        with open(path, "w", encoding="utf-8") as handle:
            json.dump({"stages": [{"name": "a", "stepz": 3}]}, handle)
        with self.assertRaisesRegex(plans.PlanError, "unknown stage key"):
            plans.load_plan(path)

    def test_a_stage_without_an_optimizer_takes_the_runs_in_a_file_and_from_flags(self):
        path = os.path.join(testing_utils.temp_dir("plan_default"), "plan.json")
        with open(path, "w", encoding="utf-8") as handle:
            json.dump({"stages": [{"name": "a", "steps": 2}, {"name": "b",
                                                              "optimizer": "sgd"}]}, handle)
        from_file = plans.load_plan(path)
        self.assertEqual([stage.optimizer for stage in from_file.stages], [None, "sgd"])
        from_flags = plans.parse_stages("a:2;b")
        self.assertEqual([stage.optimizer for stage in from_flags.stages], [None, None])
        for defaults, optimizer in ((recipe.OWN_DATA_DEFAULTS, "adam"),
                                    (recipe.IMAGENET_DEFAULTS, "rmsprop")):
            for plan, expected in ((from_file, [optimizer, "sgd"]),
                                   (from_flags, [optimizer, optimizer])):
                resolved = settings_lib.with_defaults(
                    settings_lib.OptimizationSettings(plan=plan), defaults)
                self.assertEqual([stage.optimizer for stage in
                                  resolved.training_plan().stages], expected)


class PlanFromFlagsTest(unittest.TestCase):

    def test_each_flag_gives_the_same_kind_of_plan(self):
        self.assertIsNone(plans.plan_from_flags())
        by_scopes = plans.plan_from_flags(trainable_scopes=("InceptionV3/Logits",))
        self.assertEqual(by_scopes, plans.TrainingPlan((plans.Stage(
            "train", scopes=("InceptionV3/Logits",)),)))
        self.assertEqual(plans.plan_from_flags(stages="head:5:InceptionV3/Logits;all"),
                         plans.parse_stages("head:5:InceptionV3/Logits;all"))
        path = os.path.join(testing_utils.temp_dir("plan_flags"), "plan.json")
        with open(path, "w", encoding="utf-8") as handle:
            json.dump({"stages": [{"name": "all"}]}, handle)
        self.assertEqual(plans.plan_from_flags(training_plan=path),
                         plans.TrainingPlan((plans.Stage("all"),)))

    def test_more_than_one_plan_flag_or_an_unreadable_file_is_refused(self):
        with self.assertRaisesRegex(plans.PlanError, "pass only one of --trainable_scopes / "
                                                     "--stages"):
            plans.plan_from_flags(trainable_scopes=("a",), stages="a:1;b")
        with self.assertRaisesRegex(plans.PlanError, "cannot read --training_plan=/nonexistent"):
            plans.plan_from_flags(training_plan="/nonexistent/plan.json")


if __name__ == "__main__":
    absltest.main()
