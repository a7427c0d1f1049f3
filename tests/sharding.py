"""unittest with Bazel's test sharding: a target with `shard_count = N` runs as N processes
side by side, each taking every N-th test (in order, so a class's tests stay together and its
setUpClass runs once per shard that has any of them)."""

import os
import sys
import unittest


def tests_of(suite):
    """The test cases of a (nested) suite, in order."""
    for item in suite:
        if isinstance(item, unittest.TestSuite):
            yield from tests_of(item)
        else:
            yield item


def main(verbosity=1):
    """Runs the __main__ module's tests of this shard and exits with their status."""
    total = int(os.environ.get("TEST_TOTAL_SHARDS", "1"))
    index = int(os.environ.get("TEST_SHARD_INDEX", "0"))
    status_file = os.environ.get("TEST_SHARD_STATUS_FILE")
    if status_file:  # tells Bazel this runner knows about shards
        with open(status_file, "w", encoding="utf-8"):
            pass
    if len(sys.argv) > 1:  # a test named on the command line: plain unittest
        unittest.main(module="__main__", verbosity=verbosity)
    everything = list(tests_of(unittest.defaultTestLoader.loadTestsFromModule(
        sys.modules["__main__"])))
    chosen = unittest.TestSuite(everything[index::total])
    result = unittest.TextTestRunner(verbosity=verbosity).run(chosen)
    sys.exit(0 if result.wasSuccessful() else 1)
