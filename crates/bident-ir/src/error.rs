use std::path::PathBuf;

/// Everything that can be wrong with a model handed to bident-ir. Each message names the file,
/// node or tensor at fault.
#[derive(Debug, thiserror::Error)]
pub enum IrError {
    #[error("{path}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: not a valid ONNX model (protobuf decode failed: {reason}); is the file truncated or not ONNX?")]
    NotOnnx { path: PathBuf, reason: String },
    #[error("{path}: the ONNX model has no graph")]
    NoGraph { path: PathBuf },
    /// Refused unread: not a regular file, or over the size limit.
    #[error(transparent)]
    File(#[from] bident_artifact::ArtifactError),
    #[error("tensor `{tensor}`: external data location `{location}` escapes the model's folder {dir}")]
    ExternalDataEscapes { tensor: String, location: String, dir: PathBuf },
    #[error("tensor `{tensor}`: external data: {reason}")]
    ExternalData { tensor: String, reason: String },
    #[error("node `{node}` ({op}) reads tensor `{tensor}`, which no node, input or initializer produces")]
    DanglingInput { node: String, op: String, tensor: String },
    #[error("tensor `{tensor}` is produced twice (by `{first}` and `{second}`)")]
    DuplicateProducer { tensor: String, first: String, second: String },
    #[error("the graph has a cycle through node `{node}` ({op})")]
    Cycle { node: String, op: String },
    #[error("graph output `{tensor}` is produced by nothing")]
    DanglingOutput { tensor: String },
    #[error(
        "input `{input}`: dim {dim} is dynamic (`{symbol}`); pin it with --input-shape {input}={example} (each symbol replaced by a size)"
    )]
    DynamicInput { input: String, dim: usize, symbol: String, example: String },
    #[error("--input-shape {input}: {reason}")]
    BadInputShape { input: String, reason: String },
    #[error("{path}: OpenVINO IR: {reason}")]
    OpenVinoIr { path: PathBuf, reason: String },
    #[error("--input-value {input}: {reason}")]
    BadInputValue { input: String, reason: String },
    #[error("input `{input}`: {reason}")]
    BadInput { input: String, reason: String },
    #[error("node `{node}` ({op}): {reason}")]
    Shape { node: String, op: String, reason: String },
    #[error("node `{node}` ({op}): needs the value of `{tensor}` to infer shapes, and {hint}")]
    NeedsValue { node: String, op: String, tensor: String, hint: String },
    #[error(
        "node `{node}` ({domain}::{op}): unknown operator and its output `{tensor}` has no static shape in value_info; cannot infer it"
    )]
    UnknownOp { node: String, domain: String, op: String, tensor: String },
    #[error("node `{node}` ({op}): {reason}")]
    Unsupported { node: String, op: String, reason: String },
    #[error("tensor `{tensor}`: {reason}")]
    BadTensor { tensor: String, reason: String },
    #[error("the model is malformed: {0}")]
    Malformed(String),
    #[error("fused graph is invalid: {0}")]
    Verify(String),
    /// A lowering sub-pass broke an invariant the next relies on (checked in debug builds).
    #[error("import: sub-pass `{pass}` broke an invariant: {reason}")]
    SubPass { pass: &'static str, reason: String },
    #[error("fused op {op} does not exist (graph has {count})")]
    NoSuchOp { op: usize, count: usize },
    #[error("the fused graph's stored model cannot be decoded: {0}")]
    StoredModel(String),
}
