"""Checks that every pass has a DEBUG_TYPE and debug output under its flag:
for each source that defines passes (GEN_PASS_DEF_<NAME>), its first pass's
flag (Passes.td's Pass<"flag">) is its DEBUG_TYPE with an LLVM_DEBUG, and
each other pass of the file prints with DEBUG_WITH_TYPE("<flag>", ...).
Usage: debug-types.py SOURCE_ROOT"""
import glob
import os
import re
import sys

root = sys.argv[1]
flags = {}
for td in ("include/trainmem/Dialect/Train/Transforms/Passes.td",
           "include/trainmem/Conversion/Passes.td"):
    text = open(os.path.join(root, td)).read()
    for name, flag in re.findall(r'def (\w+)\s*:\s*Pass<"([\w-]+)"', text):
        flags[name.upper()] = flag
missing = []
passes = 0
for path in sorted(glob.glob(os.path.join(root, "lib/**/*.cpp"),
                             recursive=True)):
    text = open(path).read()
    defined = re.findall(r"#define GEN_PASS_DEF_(\w+)", text)
    if not defined:
        continue
    rel = os.path.relpath(path, root)
    types = re.findall(r'#define DEBUG_TYPE "([\w-]+)"', text)
    for index, name in enumerate(defined):
        passes += 1
        flag = flags.get(name)
        if flag is None:
            missing.append(f"{rel}: {name} is not in Passes.td")
        elif index == 0:
            if types != [flag]:
                missing.append(f"{rel}: DEBUG_TYPE should be \"{flag}\", "
                               f"is {types}")
            elif "LLVM_DEBUG(" not in text:
                missing.append(f"{rel}: no LLVM_DEBUG for {flag}")
        elif f'DEBUG_WITH_TYPE("{flag}"' not in text:
            missing.append(f"{rel}: no DEBUG_WITH_TYPE(\"{flag}\", ...)")
if missing:
    sys.exit("\n".join(missing))
print(f"{passes} passes, each with its debug type")
