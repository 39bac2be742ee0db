"""The cached native figures: one hardware JSON in the cache directory,
with measured GEMM rates and op fits (and, where mpirun is, the
collectives' bandwidth), and the plan made with them predicts a positive
time for every row."""
import glob
import json
import shutil
import sys

cache, plan = sys.argv[1], sys.argv[2]
files = glob.glob(cache + "/hardware-native-*-cpu-quick.json")
assert len(files) == 1, files
figures = json.load(open(files[0]))
assert figures["name"] == "native", figures["name"]
assert figures["gemm_rates"], "no GEMM rates"
for rate in figures["gemm_rates"]:
    assert rate["flops_per_second"] > 0 and min(rate["m"], rate["n"], rate["k"]) >= 1
for name, rate in figures["op_rates"].items():
    assert name.startswith("train."), name
    assert min(rate.values()) >= 0, (name, rate)
# Ops that run kernels take time; views (a reshape) none.
for op in ("train.add", "train.layer_norm", "train.cross_entropy", "train.lion"):
    assert sum(figures["op_rates"][op].values()) > 0, op
assert sum(figures["op_rates"]["train.reshape"].values()) == 0
assert figures["peak_flops"] == max(r["flops_per_second"] for r in figures["gemm_rates"])
# With mpirun here, the collectives between two local ranks are measured.
if shutil.which("mpirun"):
    assert "collectives measured between 2 MPI ranks" in figures["source"], figures["source"]
    assert figures["interconnect_bandwidth"] != 5e9
rows = json.load(open(plan))["candidates"]
assert rows and all(r["seconds"]["step"] > 0 for r in rows if "seconds" in r)
print("ok: %d GEMM shapes, %d op fits" % (len(figures["gemm_rates"]), len(figures["op_rates"])))
