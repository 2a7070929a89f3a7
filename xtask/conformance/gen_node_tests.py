"""Write the ONNX backend *node* test cases of the installed `onnx` package to disk.

The onnx wheel no longer ships them as files, and its `cmd_tools generate-data` writes only the
`real` and `simple` kinds, so this collects the node cases itself and writes them in the layout
the ONNX backend test runner uses:

    OUT/<test name>/model.onnx
    OUT/<test name>/test_data_set_<k>/input_<j>.pb, output_<j>.pb

Usage: python gen_node_tests.py OUT
"""

import os
import shutil
import sys

from onnx import TensorProto, numpy_helper
from onnx.backend.test.case import node


def write_value(path, value, value_info):
    t = value_info.type
    if t.HasField("map_type"):
        proto = numpy_helper.from_dict(value, value_info.name)
    elif t.HasField("sequence_type"):
        proto = numpy_helper.from_list(value, value_info.name)
    elif t.HasField("optional_type"):
        proto = numpy_helper.from_optional(value, value_info.name)
    elif isinstance(value, TensorProto):
        proto = value
    else:
        proto = numpy_helper.from_array(value, value_info.name)
    with open(path, "wb") as f:
        f.write(proto.SerializeToString())


def main(out):
    cases = node.collect_testcases()
    written = 0
    for case in cases:
        case_dir = os.path.join(out, case.name)
        if os.path.exists(case_dir):
            shutil.rmtree(case_dir)
        os.makedirs(case_dir)
        with open(os.path.join(case_dir, "model.onnx"), "wb") as f:
            f.write(case.model.SerializeToString())
        for i, (inputs, outputs) in enumerate(case.data_sets):
            d = os.path.join(case_dir, f"test_data_set_{i}")
            os.makedirs(d)
            for j, v in enumerate(inputs):
                write_value(os.path.join(d, f"input_{j}.pb"), v, case.model.graph.input[j])
            for j, v in enumerate(outputs):
                write_value(os.path.join(d, f"output_{j}.pb"), v, case.model.graph.output[j])
        written += 1
    print(f"wrote {written} node test cases to {out}")


if __name__ == "__main__":
    main(sys.argv[1])
