"""Print OpenVINO's own record of which ONNX nodes each executed layer holds, as JSON.

usage: fused_layers.py MODEL.onnx

Compiles the model on the CPU as bident's reference PU does (f32 precision hint, profiling on)
and, for every layer of the runtime model other than inputs, outputs, constants and layers
reading only constants (weight preparation), prints the
`originalLayersNames` from its runtime info: a JSON list of lists of node names. Only the
Python and C++ APIs expose this record; bident's backend fusion reconstructs the same grouping
from the profile the C API gives, and this script is the oracle it is checked against.
"""
import json
import sys

import openvino as ov


def main():
    core = ov.Core()
    model = core.read_model(sys.argv[1])
    compiled = core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32", "PERF_COUNT": "YES"})
    groups = []
    kind = lambda op: op.get_rt_info()["layerType"].astype(str)
    for op in compiled.get_runtime_model().get_ordered_ops():
        info = op.get_rt_info()
        if kind(op) in ("Input", "Output", "Parameter", "Result", "Const"):
            continue
        # a layer on constants only prepares weights (e.g. `MatMul/transpose_b`), computes nothing
        sources = [i.get_source_output().get_node() for i in op.inputs()]
        if sources and all(kind(s) == "Const" for s in sources):
            continue
        names = info["originalLayersNames"].astype(str)
        groups.append([n for n in names.split(",") if n])
    print(json.dumps(groups))


if __name__ == "__main__":
    main()
