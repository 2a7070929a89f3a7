//! Models bident builds itself, so nothing has to be downloaded: the pipeline's example model,
//! the models tests import, and deliberately broken models for the bad-input tests. Weights are
//! seeded pseudo-random numbers: scheduling depends on shapes, not on weight values.
//!
//! Must not: depend on any backend or on stages after bident-ir.

mod broken;
mod builder;
mod control;
pub mod families;
mod nets;
mod probe;
mod wide;

use bident_ir::proto::{ModelProto, tensor_proto::DataLocation};
use bident_tensor::DType;
use prost::Message;

pub use broken::{ExternalPlace, external_ref};
pub use builder::Builder;
pub use nets::{Bert, bert};
pub use probe::{PROBE_OPS, probe};

/// Names of the models [`build`] knows, with one line each.
pub const MODELS: &[(&str, &str)] = &[
    ("example", "small CNN with a fork/join (stem, two branches, add, head): the pipeline's default"),
    ("example-edited", "the example with a 12-class head: every op before the head unchanged (a small model edit)"),
    ("mlp", "three MatMul+Add+Relu layers: a plain chain"),
    (
        "resnet50",
        "ResNet-50 v1.5 at 224x224 (torchvision layout: bottlenecks [3, 4, 6, 3], stride on the 3x3, \
         ~25.6M f32 parameters), seeded weights",
    ),
    (
        "attention",
        "single-head self-attention block with LayerNorm and GELU (Erf), shape arithmetic via Shape/Gather/Concat",
    ),
    (
        "bert-encoder",
        "BERT-style encoder as PyTorch exports it (8 layers, hidden 384, 6 heads, ~70 MB of f32 weights): int64 \
         token ids and mask with a symbolic `seq` dim, embeddings, multi-head attention reshaped through \
         Shape/Gather/Concat, GELU (Erf), LayerNorm",
    ),
    ("dynamic-batch", "the mlp with a symbolic batch dim `N`"),
    ("recurrent", "a bidirectional GRU (linear before reset) feeding an RNN, sequence first"),
    (
        "control-loop",
        "a `for` Loop as exporters write it: constant trip count, a body that sets its condition to a constant \
         true, reads a weight of the enclosing graph and declares no types",
    ),
    ("loop-endless", "a Loop with a constant trip count of 10^12 carrying one value: valid, and never ends when run"),
    ("control-if", "an If whose branches read a tensor of the enclosing graph (outer scope), between two ops"),
    (
        "control-if-untyped",
        "control-if with branches that declare no output types, one computing a Reshape target from Shape",
    ),
    (
        "control-scan-untyped",
        "a Scan (running sum over the rows) whose body declares no output types, its stacked output reshaped \
         to a target that Split and Concat compute from its Shape",
    ),
    ("bad-dangling-input", "a node reads a tensor nothing produces"),
    ("bad-cycle", "two nodes feed each other"),
    ("bad-unknown-op", "an op bident does not know, with no value_info for its output"),
    ("bad-external-escape", "an initializer whose external data location is ../outside.bin"),
    ("bad-conv-kernel-zero", "a Conv whose kernel_shape is [0, 0]"),
    ("bad-pool-rank", "a MaxPool on a 1-d tensor"),
    ("bad-slice-lengths", "a Slice whose ends are shorter than its starts"),
    ("bad-concat-dtypes", "a Concat of an i64 and an i32 constant"),
    ("bad-range-huge", "a Range of 2^34 elements"),
    ("bad-gather-scalar", "a Gather on a scalar"),
    ("bad-split-negative", "a Split with a negative part"),
    ("bad-duplicate-output", "two nodes write the same tensor"),
    ("bad-if-missing-output", "an If whose then-branch declares no outputs"),
    ("bad-negative-dim", "an initializer with a negative dim"),
    ("bad-overflow-dims", "an initializer whose dims multiply past 2^64"),
    ("bad-initializer-size", "an f32[2] initializer holding 3 bytes"),
    ("bad-matmul-inner", "a MatMul of [1, 8] by [4, 4]"),
    ("bad-add-dtypes", "an Add of an f32 input and an i64 constant"),
    ("bad-if-branch-shapes", "an If on a run-time condition whose untyped branches give [16] and [1, 16]"),
    ("bad-external-absolute", "an initializer whose external data location is the absolute path /etc/passwd"),
    ("bad-external-if", "an If-branch initializer whose external data location is ../outside.bin"),
    ("bad-external-loop-constant", "a Constant inside a Loop body whose tensor's external data is /etc/passwd"),
    ("bad-duplicate-initializer", "two initializers named `w` with different values"),
    ("bad-nul-name", "an Add whose output tensor's name holds a NUL"),
    ("bad-escape-name", "a node whose name holds a terminal escape"),
    ("bad-sparse-initializer", "an Add of an input and a sparse initializer (valid ONNX bident does not read)"),
    ("bad-duplicate-input", "the graph input `x` listed twice"),
    ("bad-duplicate-graph-output", "the graph output `y` listed twice"),
    ("bad-opset-zero", "opset_import says the default domain is at version 0"),
    ("bad-no-opset", "no opset_import at all"),
    ("bad-future-ir", "ir_version 99"),
    ("bad-negative-input-dim", "an input whose dim 1 is -3"),
    (
        "const-transpose-pad",
        "a Pad whose pads come from Constant -> Transpose -> Reshape (an STFT front end's framing), reflect mode",
    ),
];

/// Build a model by name; `None` for an unknown name.
pub fn build(name: &str, seed: u64) -> Option<ModelProto> {
    if let Some(spec) = name.strip_prefix("probe-") {
        let mut parts = spec.rsplitn(3, '-');
        let (n, dtype, op) = (parts.next()?, parts.next()?, parts.next()?);
        let dtype = [DType::F32, DType::F16, DType::I8].into_iter().find(|d| d.name() == dtype)?;
        return probe(op, dtype, n.parse().ok()?);
    }
    if let Some(n) = name.strip_prefix("fork-join-") {
        return wide::fork_join(seed, n.parse().ok()?);
    }
    if let Some(m) = families::build(name, seed) {
        return Some(m);
    }
    if name.starts_with("bad-") {
        return broken::build(name, seed);
    }
    Some(match name {
        "example" => nets::example(seed, 10),
        "example-edited" => nets::example(seed, 12),
        "resnet50" => nets::resnet50(seed),
        "mlp" => nets::mlp(seed, 1),
        "attention" => nets::attention(seed),
        "bert-encoder" => {
            bert(seed, &Bert { layers: 8, hidden: 384, heads: 6, ffn: 1536, vocab: 8192, positions: 512 })
        }
        "dynamic-batch" => {
            let mut b = nets::mlp_builder(seed, None);
            b.finish("dynamic_batch")
        }
        "recurrent" => nets::recurrent(seed),
        "control-loop" => control::control_loop(seed, 3, true),
        "loop-endless" => control::control_loop(seed, 1_000_000_000_000, false),
        "control-if" => control::control_if(seed, true),
        "control-if-untyped" => control::control_if(seed, false),
        "control-scan-untyped" => control::control_scan(seed),
        "const-transpose-pad" => nets::const_transpose_pad(seed),
        _ => return None,
    })
}

/// Move every initializer's bytes into one external-data file named `location` (beside the
/// model), as exporters do for large models. Returns that file's contents.
pub fn externalize(model: &mut ModelProto, location: &str) -> Vec<u8> {
    let mut blob = vec![];
    let Some(graph) = model.graph.as_mut() else { return blob };
    for t in &mut graph.initializer {
        let Some(raw) = t.raw_data.take() else { continue };
        let entry =
            |k: &str, v: String| bident_ir::proto::StringStringEntryProto { key: Some(k.into()), value: Some(v) };
        t.external_data = vec![
            entry("location", location.to_string()),
            entry("offset", blob.len().to_string()),
            entry("length", raw.len().to_string()),
        ];
        t.data_location = Some(DataLocation::External as i32);
        blob.extend_from_slice(&raw);
    }
    blob
}

/// Serialized bytes of [`build`].
pub fn build_bytes(name: &str, seed: u64) -> Option<Vec<u8>> {
    build(name, seed).map(|m| m.encode_to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_model_builds_deterministically() {
        for (name, _) in MODELS {
            let a = build_bytes(name, 7).expect(name);
            assert_eq!(a, build_bytes(name, 7).expect(name), "{name}");
            assert!(!a.is_empty());
        }
        assert_ne!(build_bytes("example", 1), build_bytes("example", 2));
        assert!(build("nope", 0).is_none());
    }

    /// `fork-join-<n>`: one fork, `n` branches of three nodes, one `Sum` of them all; no model
    /// for 0 branches, too many, or a count that is not a number.
    #[test]
    fn fork_joins_have_the_width_asked_for() {
        let g = build("fork-join-40", 3).expect("builds").graph.expect("a graph");
        assert_eq!(g.node.len(), 1 + 3 * 40 + 1);
        let sum = g.node.iter().find(|n| n.op_type.as_deref() == Some("Sum")).expect("a Sum");
        assert_eq!(sum.input.len(), 40);
        assert_eq!(build_bytes("fork-join-40", 3), build_bytes("fork-join-40", 3));
        for bad in ["fork-join-0", "fork-join-20001", "fork-join-x"] {
            assert!(build(bad, 0).is_none(), "{bad}");
        }
    }

    #[test]
    fn externalize_moves_every_initializer() {
        let mut m = build("mlp", 0).unwrap();
        let inline: usize =
            m.graph.as_ref().unwrap().initializer.iter().map(|t| t.raw_data.as_ref().unwrap().len()).sum();
        let blob = externalize(&mut m, "w.bin");
        assert_eq!(blob.len(), inline);
        assert!(m.graph.unwrap().initializer.iter().all(|t| t.raw_data.is_none() && t.external_data.len() == 3));
    }
}
