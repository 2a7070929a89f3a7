//! ONNX rewrites applied before OpenVINO reads a model: constructs its CPU plugin computes
//! wrongly, written in an equivalent form it computes correctly. Every rewrite is exact.
//!
//! - **`Pad` with constant `pads` and a run-time `constant_value`.** OpenVINO 2026.4.1 pads with 0
//!   then (measured with the pinned wheel: constant pads with an input value pads with 0; both
//!   constant, or both inputs, pad correctly). bident meets it whenever it extracts such a Pad: the
//!   pads fix the output shape, so they are pinned constants. Rewritten as
//!   `Where(Pad(ones, pads), Pad(x, pads), value)`, with `ones = ConstantOfShape(Shape(x), true)`:
//!   the pad regions take `value`, everything else the data, bit for bit. Only the main graph
//!   is rewritten, not control-flow subgraphs.

use std::borrow::Cow;
use std::collections::HashSet;

use bident_onnx::{AttributeProto, ModelProto, NodeProto, TensorProto, attribute_proto};
use prost::Message;

/// The model with every known-bad construct rewritten, or the bytes unchanged when it has none.
pub(crate) fn for_openvino(onnx: &[u8]) -> Cow<'_, [u8]> {
    // cheap guard: most models have no Pad at all
    if !onnx.windows(3).any(|w| w == b"Pad") {
        return Cow::Borrowed(onnx);
    }
    // not ONNX (an IR's XML, garbage): OpenVINO's reader says what is wrong with it
    let Ok(mut model) = ModelProto::decode(onnx) else { return Cow::Borrowed(onnx) };
    let Some(graph) = model.graph.as_mut() else { return Cow::Borrowed(onnx) };
    let constants: HashSet<String> = graph
        .initializer
        .iter()
        .map(|t| t.name().to_string())
        .chain(graph.node.iter().filter(|n| n.op_type() == "Constant").flat_map(|n| n.output.clone()))
        .collect();
    let mut nodes = Vec::with_capacity(graph.node.len());
    let mut rewritten = 0;
    for n in std::mem::take(&mut graph.node) {
        if pad_with_runtime_value(&n, &constants) {
            nodes.extend(pad_as_where(&n, rewritten));
            rewritten += 1;
        } else {
            nodes.push(n);
        }
    }
    graph.node = nodes;
    if rewritten == 0 {
        return Cow::Borrowed(onnx);
    }
    Cow::Owned(model.encode_to_vec())
}

/// A constant-mode Pad (opset 11+: pads and value are inputs) whose pads are constant and whose
/// value is not.
fn pad_with_runtime_value(n: &NodeProto, constants: &HashSet<String>) -> bool {
    let mode = n.attribute.iter().find(|a| a.name() == "mode").and_then(|a| a.s.as_deref());
    n.op_type() == "Pad"
        && matches!(n.domain(), "" | "ai.onnx")
        && mode.is_none_or(|m| m == b"constant")
        && n.input.get(1).is_some_and(|p| constants.contains(p))
        && n.input.get(2).is_some_and(|v| !v.is_empty() && !constants.contains(v))
}

fn pad_as_where(n: &NodeProto, k: usize) -> Vec<NodeProto> {
    let p = format!("bident_pad{k}_");
    let name = |s: &str| format!("{p}{s}");
    let node = |op: &str, inputs: Vec<String>, output: String, attribute: Vec<AttributeProto>| NodeProto {
        name: Some(format!("{}{}", n.name(), output.strip_prefix(&p).map_or(String::new(), |s| format!("/{s}")))),
        op_type: Some(op.into()),
        input: inputs,
        output: vec![output],
        attribute,
        ..Default::default()
    };
    // Pad's inputs with the value dropped: data, pads, "", axes (opset 18)
    let pad_inputs = |data: String| {
        let mut v = vec![data, n.input[1].clone()];
        if let Some(axes) = n.input.get(3).filter(|a| !a.is_empty()) {
            v.extend([String::new(), axes.clone()]);
        }
        v
    };
    let x = n.input[0].clone();
    let out = n.output.first().cloned().unwrap_or_default();
    let one = TensorProto {
        dims: vec![1],
        data_type: Some(9), // BOOL
        int32_data: vec![1],
        ..Default::default()
    };
    let value_attr = AttributeProto {
        name: Some("value".into()),
        r#type: Some(attribute_proto::AttributeType::Tensor as i32),
        t: Some(one),
        ..Default::default()
    };
    vec![
        node("Shape", vec![x.clone()], name("shape"), vec![]),
        node("ConstantOfShape", vec![name("shape")], name("ones"), vec![value_attr]),
        node("Pad", pad_inputs(name("ones")), name("mask"), vec![]),
        node("Pad", pad_inputs(x), name("padded"), vec![]),
        NodeProto {
            name: Some(n.name().to_string()),
            op_type: Some("Where".into()),
            input: vec![name("mask"), name("padded"), n.input[2].clone()],
            output: vec![out],
            ..Default::default()
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use bident_onnx::{GraphProto, OperatorSetIdProto};

    fn model(nodes: Vec<NodeProto>, initializers: Vec<&str>) -> Vec<u8> {
        ModelProto {
            ir_version: Some(8),
            opset_import: vec![OperatorSetIdProto { domain: Some(String::new()), version: Some(18) }],
            graph: Some(GraphProto {
                node: nodes,
                initializer: initializers
                    .into_iter()
                    .map(|n| TensorProto {
                        name: Some(n.into()),
                        data_type: Some(7),
                        dims: vec![4],
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }),
            ..Default::default()
        }
        .encode_to_vec()
    }

    fn pad(inputs: &[&str]) -> NodeProto {
        NodeProto {
            op_type: Some("Pad".into()),
            name: Some("pad".into()),
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: vec!["y".into()],
            ..Default::default()
        }
    }

    fn ops(bytes: &[u8]) -> Vec<String> {
        let m = ModelProto::decode(bytes).expect("decodes");
        m.graph.expect("graph").node.iter().map(|n| n.op_type().to_string()).collect()
    }

    #[test]
    fn pad_with_constant_pads_and_runtime_value_becomes_where() {
        let bytes = model(vec![pad(&["x", "pads", "value"])], vec!["pads"]);
        let out = for_openvino(&bytes);
        assert_eq!(ops(&out), ["Shape", "ConstantOfShape", "Pad", "Pad", "Where"]);
        let m = ModelProto::decode(&out[..]).expect("decodes");
        let w = m.graph.expect("graph").node.pop().expect("where");
        assert_eq!(w.output, ["y"]);
        assert_eq!(w.input[2], "value");
    }

    #[test]
    fn other_pads_are_left_alone() {
        for (inputs, inits) in [
            (&["x", "pads", "value"][..], vec!["pads", "value"]), // both constant
            (&["x", "pads", "value"][..], vec![]),                // both run time
            (&["x", "pads"][..], vec!["pads"]),                   // no value: zeros
            (&["x", "pads", ""][..], vec!["pads"]),
        ] {
            let bytes = model(vec![pad(inputs)], inits);
            assert!(matches!(for_openvino(&bytes), Cow::Borrowed(_)), "{inputs:?}");
        }
        let mut reflect = pad(&["x", "pads", "value"]);
        reflect.attribute.push(AttributeProto {
            name: Some("mode".into()),
            s: Some(b"reflect".to_vec()),
            ..Default::default()
        });
        assert!(matches!(for_openvino(&model(vec![reflect], vec!["pads"])), Cow::Borrowed(_)));
    }
}
