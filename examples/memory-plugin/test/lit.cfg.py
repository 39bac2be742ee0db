# lit configuration of the example plugin's tests: the installed
# trainmem-opt and trainmem-model, and the plugin as %plugin.
import os

import lit.formats

config.name = "TRAINMEM-PLUGIN"
config.test_format = lit.formats.ShTest(True)
config.suffixes = [".mlir", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.excludes = ["lit.cfg.py", "lit.site.cfg.py.in"]

config.substitutions.append(("%plugin_dir", os.path.dirname(config.plugin)))
config.substitutions.append(("%plugin_name", os.path.basename(config.plugin)))
config.substitutions.append(("%plugin", config.plugin))
for tool in ["trainmem-opt", "trainmem-model"]:
    config.substitutions.append(
        (r"\b" + tool + r"\b", os.path.join(config.trainmem_tools_dir, tool)))
config.substitutions.append((r"\bFileCheck\b", config.filecheck))
config.substitutions.append((r"\bnot\b", os.path.join(
    os.path.dirname(config.filecheck), "not")))
