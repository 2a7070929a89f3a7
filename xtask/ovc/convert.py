"""Convert an ONNX model to OpenVINO IR with ovc (the pinned openvino wheel), weights kept f32.

usage: convert.py MODEL.onnx OUT.xml [NAME=D,D,... ...]
"""
import sys

import openvino as ov


def main():
    src, out, *shapes = sys.argv[1:]
    inputs = []
    for s in shapes:
        name, dims = s.split("=", 1)
        inputs.append((name, [int(d) for d in dims.split(",") if d]))
    model = ov.convert_model(src, input=inputs or None)
    ov.save_model(model, out, compress_to_fp16=False)


if __name__ == "__main__":
    main()
