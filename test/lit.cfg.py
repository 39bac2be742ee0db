# -*- Python -*-
# lit configuration of trainmem's regression tests (FileCheck, verify).

import os
import shutil
import subprocess

import lit.formats
from lit.llvm import llvm_config

config.name = "TRAINMEM"

config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)

# Two suites: the end-to-end tests that take longest (long-tests.txt) and
# the rest. `--param suite=quick` runs the rest (check-trainmem), `long`
# the listed ones (check-trainmem-long); without it, all. A directory with
# listed tests has a lit.local.cfg that picks its tests by config.suite
# and config.long_tests; with `long`, no other directory has any.
config.suite = lit_config.params.get("suite", "all")
if config.suite not in ("all", "quick", "long"):
    lit_config.fatal(f"suite={config.suite}: expected quick, long or all")
with open(os.path.join(os.path.dirname(__file__), "long-tests.txt")) as f:
    config.long_tests = sorted(
        {line.split("#")[0].strip() for line in f} - {""})
for listed in config.long_tests:
    path = os.path.join(os.path.dirname(__file__), listed)
    if not os.path.isfile(path):
        lit_config.fatal(f"long-tests.txt names {listed}, which is not a test")
    if not os.path.isfile(os.path.join(os.path.dirname(path), "lit.local.cfg")):
        lit_config.fatal(f"long-tests.txt names {listed}, whose directory has "
                         "no lit.local.cfg to pick its suite")
config.suffixes = [".mlir", ".test"]
config.test_suffixes = config.suffixes
if config.suite == "long":
    config.suffixes = []
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.trainmem_obj_root, "test")
config.excludes = ["CMakeLists.txt", "README.md", "lit.cfg.py", "lit.site.cfg.py",
                   "Inputs", "long-tests.txt"]

llvm_config.use_default_substitutions()
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)

tools = ["trainmem-opt", "trainmem-model", "trainmem-run", "trainmem-plan",
         "trainmem-import", "trainmem-bench-adamw-8bit", "FileCheck", "not", "count"]
llvm_config.add_tool_substitutions(
    tools, [config.trainmem_tools_dir, config.llvm_tools_dir])

# The GoogleTest binaries (some run again under other settings).
config.substitutions.append(
    ("%unittests", os.path.join(config.trainmem_obj_root, "unittests")))

# The source tree (for tests that read it).
config.substitutions.append(("%trainmem-src", config.trainmem_src_root))

# The directory of the tools (for scripts that take it, TRAINMEM_BIN).
config.substitutions.append(("%trainmem-bin", config.trainmem_tools_dir))

# PyTorch (Debian's python3-torch, which scripts/setup.sh installs) runs
# under /usr/bin/python3, not the python3 first on PATH.
config.substitutions.append(("%torch-python", "/usr/bin/python3"))

# Hugging Face transformers: the venv scripts/setup.sh makes (Debian's torch
# and transformers 4.44.2), which trainmem-import runs under. Where it could
# not be installed (no network), the tests that need it are unsupported.
hf_venv = os.environ.get("TRAINMEM_PYTHON_VENV", "/opt/trainmem-python")
hf_python = os.path.join(hf_venv, "bin", "python3")
config.substitutions.append(("%hf-python", hf_python))
try:
    if subprocess.run([hf_python, "-c", "import transformers"],
                      capture_output=True, timeout=120).returncode == 0:
        config.available_features.add("transformers")
except (OSError, subprocess.TimeoutExpired):
    pass
for name in ("TRAINMEM_PYTHON", "TRAINMEM_PYTHON_VENV"):
    if name in os.environ:
        config.environment[name] = os.environ[name]
config.environment["OMP_WAIT_POLICY"] = "PASSIVE"

# The shipped corpus.
config.substitutions.append(
    ("%corpus", os.path.join(config.trainmem_src_root, "data",
                             "kjv-genesis-exodus.txt")))

# Compiles C++ against trainmem's headers (tests of what must not compile).
config.substitutions.append(
    ("%cxx-syntax", " ".join(
        [config.cxx_compiler, "-std=c++20", "-fsyntax-only",
         "-Wno-ambiguous-reversed-operator", "-Werror=reorder-init-list"] +
        ["-I" + d for d in config.mlir_include_dir.split(";") if d] +
        ["-I" + os.path.join(config.trainmem_src_root, "include"),
         "-I" + os.path.join(config.trainmem_src_root, "runtime", "include"),
         "-I" + os.path.join(config.trainmem_obj_root, "include")])))

# The CUDA backend: "cuda" where the runtime is built with it, "cuda-device"
# where a GPU also answers (nvidia-smi lists one). Tests of the GPU itself
# say REQUIRES: cuda-device; without one they are reported unsupported.
if config.trainmem_runtime_cuda == "ON":
    config.available_features.add("cuda")
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True,
                                text=True, timeout=30)
        if listed.returncode == 0 and "GPU" in listed.stdout:
            config.available_features.add("cuda-device")
    except (OSError, subprocess.TimeoutExpired):
        pass

# Several processes: the runtime's MPI communicator and mpirun (OpenMPI).
# Tests run ranks oversubscribed on this machine's cores, as root in CI.
if config.trainmem_runtime_mpi == "ON" and shutil.which("mpirun"):
    config.available_features.add("mpi")
    config.substitutions.append(
        ("%mpirun", "mpirun --allow-run-as-root --oversubscribe "
                    "--mca btl self,vader"))

# Refactoring aid (scripts/capture-outputs.sh): with TRAINMEM_CAPTURE_DIR
# set, every FileCheck input is also saved there, one file per FileCheck
# call of each test, so that two builds' outputs can be compared byte for
# byte.
if os.environ.get("TRAINMEM_CAPTURE_DIR"):
    config.environment["TRAINMEM_CAPTURE_DIR"] = os.environ["TRAINMEM_CAPTURE_DIR"]
    wrapper = os.path.join(config.trainmem_src_root, "scripts",
                           "capture-filecheck.sh")
    config.substitutions = [
        (pattern, f"{wrapper} %s {value}")
        if isinstance(value, str) and os.path.basename(value) == "FileCheck"
        else (pattern, value) for pattern, value in config.substitutions]
