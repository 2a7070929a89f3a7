//! What a node computes: its op class (from the registry) and its arithmetic (from its static
//! types). Analytic cost models (virtual SoCs) and reports read this; nothing here is measured.

use bident_tensor::{DType, numel};

use super::{Fact, OpDef};
use crate::proto::NodeProto;
use crate::work::{OpClass, Work};

/// What one node contributes to its group's [`Work`].
pub(crate) struct NodeWork {
    pub class: OpClass,
    pub dtype: DType,
    pub flops: u64,
}

/// The work of `node` given its input and output types. `operand_dtype(i)` is input i's
/// element type as computed in (see [`Work::dtype`]).
pub(crate) fn node_work(
    node: &NodeProto,
    def: Option<&OpDef>,
    inputs: &[Option<&Fact>],
    outputs: &[Option<&Fact>],
    operand_dtype: &dyn Fn(usize) -> Option<DType>,
) -> NodeWork {
    let shape = |i: usize| inputs.get(i).copied().flatten().map(|f| f.shape.as_slice());
    let out_numel = outputs.iter().flatten().fold(0u64, |a, f| a.saturating_add(numel(&f.shape)));
    let in0_numel = shape(0).map_or(0, numel);
    let mut class = def.map_or(OpClass::Other, |d| d.class);
    let int_attr = |name: &str| node.attribute.iter().find(|a| a.name() == name).and_then(|a| a.i);
    let weight_at = if matches!(node.op_type(), "QLinearConv" | "QLinearMatMul") { 3 } else { 1 };
    let flops = match class {
        OpClass::Matmul => match node.op_type() {
            "Gemm" => {
                let a = shape(0).unwrap_or(&[]);
                let k = if int_attr("transA") == Some(1) { a.first() } else { a.get(1) };
                prod(&[2, out_numel, k.copied().unwrap_or(1)])
            }
            "Einsum" => prod(&[2, einsum_points(node, inputs)]),
            _ => prod(&[2, out_numel, shape(0).and_then(|a| a.last()).copied().unwrap_or(1)]),
        },
        OpClass::Conv => {
            let w = shape(weight_at).unwrap_or(&[]);
            let per_out = if w.is_empty() { 1 } else { numel(w) / w[0].max(1) };
            if int_attr("group").unwrap_or(1) > 1 && w.get(1) == Some(&1) {
                class = OpClass::DepthwiseConv;
            }
            // ConvTranspose: every input element scatters into per_out outputs
            let points = if node.op_type() == "ConvTranspose" { in0_numel } else { out_numel };
            prod(&[2, points, per_out])
        }
        OpClass::Recurrent => {
            // W [dirs, gates*H, I], R [dirs, gates*H, H]: (I + H) MACs per gate unit and step
            let input = shape(2).and_then(|w| w.get(2)).copied().unwrap_or(1).max(1);
            let steps = in0_numel / input;
            prod(&[2, steps, shape(1).map_or(0, numel).saturating_add(shape(2).map_or(0, numel))])
        }
        OpClass::Fft => {
            let complex = out_numel / 2;
            let n = outputs.first().copied().flatten().and_then(|f| f.shape.iter().rev().nth(1)).copied().unwrap_or(1);
            prod(&[5, complex, 64 - n.max(1).leading_zeros() as u64])
        }
        OpClass::Normalization => prod(&[5, out_numel]),
        OpClass::Reduction => in0_numel.max(out_numel),
        // Gather: one element moved per output element
        OpClass::Elementwise | OpClass::Scan | OpClass::Gather | OpClass::Other => out_numel,
        OpClass::Movement | OpClass::Control | OpClass::DepthwiseConv => 0,
    };
    let dtype = match class {
        OpClass::Matmul | OpClass::Conv | OpClass::DepthwiseConv => {
            // the narrower operand decides (int8 weights against f32 activations run as int8)
            [operand_dtype(0), operand_dtype(weight_at)].into_iter().flatten().min_by_key(|d| d.size())
        }
        // If and Loop read a condition or a trip count first: the data is what they output
        OpClass::Control => None,
        _ => operand_dtype(0),
    }
    .or_else(|| outputs.first().copied().flatten().map(|f| f.dtype))
    .unwrap_or(DType::F32);
    NodeWork { class, dtype, flops }
}

/// Iteration-space size of an Einsum: the product of every index letter's extent.
fn einsum_points(node: &NodeProto, inputs: &[Option<&Fact>]) -> u64 {
    let eq = node
        .attribute
        .iter()
        .find(|a| a.name() == "equation")
        .and_then(|a| a.s.as_ref())
        .map(|s| String::from_utf8_lossy(s).replace(' ', ""))
        .unwrap_or_default();
    let lhs = eq.split("->").next().unwrap_or("");
    let mut extent = std::collections::BTreeMap::new();
    for (term, fact) in lhs.split(',').zip(inputs) {
        let Some(fact) = fact else { continue };
        // letters after an ellipsis align to the end of the shape
        let letters: Vec<char> = term.chars().filter(char::is_ascii_alphabetic).collect();
        let skip = fact.shape.len().saturating_sub(letters.len());
        for (c, &d) in letters.iter().zip(&fact.shape[skip..]) {
            extent.insert(*c, d.max(1));
        }
    }
    prod(&extent.values().copied().collect::<Vec<_>>()).max(1)
}

/// Saturating product (dims may come straight from a file).
fn prod(xs: &[u64]) -> u64 {
    xs.iter().fold(1u64, |a, &x| a.saturating_mul(x))
}

/// Combine the work of a group's compute nodes.
pub(crate) fn group_work(nodes: &[(NodeWork, String)], bytes_in: u64, weight_bytes: u64, bytes_out: u64) -> Work {
    let main = nodes.iter().map(|(w, _)| w).max_by_key(|w| (rank(w.class), w.flops));
    let mut op_types: Vec<String> = nodes.iter().map(|(_, t)| t.clone()).collect();
    op_types.sort();
    op_types.dedup();
    Work {
        class: main.map_or(OpClass::Other, |w| w.class),
        dtype: main.map_or(DType::F32, |w| w.dtype),
        flops: nodes.iter().map(|(w, _)| w.flops).fold(0u64, u64::saturating_add),
        bytes_in,
        weight_bytes,
        bytes_out,
        op_types,
    }
}

/// Which of a fused group's classes names the group: the heaviest kind of work.
fn rank(class: OpClass) -> u8 {
    match class {
        OpClass::Other => 0,
        OpClass::Movement => 1,
        OpClass::Elementwise => 2,
        OpClass::Reduction => 3,
        OpClass::Normalization => 4,
        OpClass::Gather => 5,
        OpClass::Scan => 6,
        OpClass::Fft => 7,
        OpClass::Recurrent => 8,
        OpClass::DepthwiseConv => 9,
        OpClass::Conv => 10,
        OpClass::Matmul => 11,
        OpClass::Control => 12,
    }
}
