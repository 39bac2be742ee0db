"""Checks a train-memory-report SVG against the JSON report of the same
step: the file parses as XML whose root is an SVG element, it carries the
peak (data-peak-bytes, and the bytes in its heading) equal to the report's
peak_bytes, and it draws one area per category live somewhere.
usage: check-svg.py PICTURE.svg REPORT.json"""

import json
import sys
import xml.etree.ElementTree as ET

SVG = "{http://www.w3.org/2000/svg}"
root = ET.parse(sys.argv[1]).getroot()
report = json.load(open(sys.argv[2]))
if root.tag != SVG + "svg":
    sys.exit(f"{sys.argv[1]}: the root is {root.tag}, not an SVG element")
peak = int(root.attrib["data-peak-bytes"])
if peak != report["peak_bytes"]:
    sys.exit(f"peak {peak} B in the picture, {report['peak_bytes']} B in the "
             "report")
texts = "".join(t.text or "" for t in root.iter(SVG + "text"))
if f"({peak} B)" not in texts:
    sys.exit(f"the heading does not say the peak ({peak} B)")
areas = [p.attrib["data-category"] for p in root.iter(SVG + "path")]
live = [c for c, b in report["totals"].items() if b > 0]
if sorted(areas) != sorted(live):
    sys.exit(f"areas {sorted(areas)}, categories live {sorted(live)}")
print(f"SVG, peak {peak} B as the report says, areas: {', '.join(areas)}")
