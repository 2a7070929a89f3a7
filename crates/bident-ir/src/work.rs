//! What a fused op computes, as data: its op class and its arithmetic. Analytic cost models
//! (virtual SoCs) and reports read this; `ops::work` derives it from the nodes.

use bident_tensor::DType;
use serde::{Deserialize, Serialize};

/// The kind of work an op does, as far as a cost model cares. Set per op in the registry
/// (the registry, `ops`); depthwise convolutions are told from others by their weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OpClass {
    /// Layout and data movement: Reshape, Transpose, Concat, Slice, Pad, Resize, ...
    Movement,
    /// One arithmetic operation per output element: activations, binary math, Cast, ...
    Elementwise,
    /// Reductions and pooling.
    Reduction,
    /// Softmax, LayerNorm, InstanceNorm and the like (several passes over the data).
    Normalization,
    /// Indexed reads and writes: Gather, GatherND, ScatterND, ...
    Gather,
    /// Prefix scans: CumSum.
    Scan,
    /// Discrete Fourier transforms.
    Fft,
    /// Recurrent cells (LSTM, GRU, RNN).
    Recurrent,
    /// Depthwise convolution (one input channel per group).
    DepthwiseConv,
    Conv,
    /// MatMul, Gemm, Einsum.
    Matmul,
    /// If, Loop, Scan: the work is in subgraphs a static model cannot see.
    Control,
    /// Not in the registry.
    Other,
}

impl OpClass {
    /// The name used in artifacts and reports (as serialized).
    pub fn name(self) -> &'static str {
        match self {
            OpClass::Movement => "movement",
            OpClass::Elementwise => "elementwise",
            OpClass::Reduction => "reduction",
            OpClass::Normalization => "normalization",
            OpClass::Gather => "gather",
            OpClass::Scan => "scan",
            OpClass::Fft => "fft",
            OpClass::Recurrent => "recurrent",
            OpClass::DepthwiseConv => "depthwise-conv",
            OpClass::Conv => "conv",
            OpClass::Matmul => "matmul",
            OpClass::Control => "control",
            OpClass::Other => "other",
        }
    }

    /// Multiply-accumulate ops: the ones matrix engines (GPU XMX, NPU MAC arrays) accelerate.
    pub fn is_mac(self) -> bool {
        matches!(self, OpClass::Matmul | OpClass::Conv | OpClass::DepthwiseConv | OpClass::Recurrent)
    }
}

/// Static work of a fused op: what an analytic cost model needs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Work {
    /// Class of the group's heaviest node.
    pub class: OpClass,
    /// Element type that node computes in; for an operand dequantized from an integer type
    /// (`DequantizeLinear`), that integer type (the backend runs such ops in integer).
    pub dtype: DType,
    /// Arithmetic operations (a multiply-accumulate counts 2; a Gather counts one per element
    /// moved), summed over the group.
    pub flops: u64,
    /// Bytes of the op's activation inputs (tensors from other ops or the graph's inputs).
    pub bytes_in: u64,
    /// Bytes of the constants the group reads (weights, biases, folded tables).
    pub weight_bytes: u64,
    /// Bytes of the op's outputs.
    pub bytes_out: u64,
    /// The group's compute op types, sorted and deduplicated (a cost model's support check).
    pub op_types: Vec<String>,
}
