# -*- Python -*-
# lit configuration that runs trainmem's GoogleTest binaries.

import os

import lit.formats

config.name = "TRAINMEM-Unit"
config.suffixes = []
config.test_exec_root = os.path.join(config.trainmem_obj_root, "unittests")
config.test_source_root = config.test_exec_root
config.test_format = lit.formats.GoogleTest(".", "Tests")

# Two suites, as test/lit.cfg.py's: `--param suite=quick` runs all but the
# tests of long-tests.txt, `long` those, without it all (a GoogleTest
# filter; every binary is still run, its listed tests picked by name).
suite = lit_config.params.get("suite", "all")
if suite not in ("all", "quick", "long"):
    lit_config.fatal(f"suite={suite}: expected quick, long or all")
with open(os.path.join(config.trainmem_src_root, "unittests",
                       "long-tests.txt")) as f:
    long_tests = [line.strip() for line in f
                  if line.strip() and not line.startswith("#")]
if suite == "quick":
    config.environment["GTEST_FILTER"] = "-" + ":".join(long_tests)
elif suite == "long":
    config.environment["GTEST_FILTER"] = ":".join(long_tests)
