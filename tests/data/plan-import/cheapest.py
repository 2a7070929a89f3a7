#!/usr/bin/env python3
"""A plan made outside bident: each op on the PU where its dispatch + execution is least, read
from a cost table exported as JSON (`cargo xtask costs export DIR costs.json`), written as a
placement for `cargo xtask plan import placement.json DIR`. Usage: cheapest.py COSTS OUT"""
import json
import sys

with open(sys.argv[1]) as f:
    costs = json.load(f)
pus = [p["name"] for p in costs["soc"]["pus"]]
placement = {}
for op in costs["ops"]:
    options = [(c["dispatch_us"] + c["exec_us"], pus[j]) for j, c in enumerate(op["per_pu"]) if c is not None]
    placement[op["name"]] = min(options)[1]
with open(sys.argv[2], "w") as f:
    json.dump({"schedule": "sequential", "objective": "latency", "placement": placement}, f, indent=1)
