"""Run a zoo model with the onnx reference evaluator (an implementation independent of OpenVINO).

usage: reference.py MODEL.onnx OUTDIR SEED
Writes input_<i>.pb (seeded inputs) and output_<i>.pb (the reference outputs) as TensorProtos.
"""
import sys

import numpy as np
import onnx
import onnx.version_converter
from onnx import numpy_helper
from onnx.reference import ReferenceEvaluator


def main():
    path, out, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
    model = onnx.load(path)
    # the reference evaluator implements (De)QuantizeLinear from opset 19: convert the model
    # (the converter rewrites what changed, e.g. ReduceMean's axes becoming an input)
    if any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in model.graph.node):
        opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
        if opset < 19:
            model = onnx.version_converter.convert_version(model, 19)
    rng = np.random.default_rng(seed)
    feeds = {}
    for i, inp in enumerate(model.graph.input):
        t = inp.type.tensor_type
        shape = [d.dim_value for d in t.shape.dim]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type)
        if np.issubdtype(dtype, np.integer):
            value = rng.integers(0, 8, size=shape).astype(dtype)
        else:
            value = (0.5 * rng.standard_normal(shape)).astype(dtype)
        feeds[inp.name] = value
        onnx.save_tensor(numpy_helper.from_array(value, inp.name), f"{out}/input_{i}.pb")
    results = ReferenceEvaluator(model).run(None, feeds)
    for i, (o, value) in enumerate(zip(model.graph.output, results)):
        onnx.save_tensor(numpy_helper.from_array(np.asarray(value), o.name), f"{out}/output_{i}.pb")


if __name__ == "__main__":
    main()
