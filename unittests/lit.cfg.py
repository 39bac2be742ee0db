# -*- Python -*-
# lit configuration that runs trainmem's GoogleTest binaries.

import os

import lit.formats

config.name = "TRAINMEM-Unit"
config.suffixes = []
config.test_exec_root = os.path.join(config.trainmem_obj_root, "unittests")
config.test_source_root = config.test_exec_root
config.test_format = lit.formats.GoogleTest(".", "Tests")
