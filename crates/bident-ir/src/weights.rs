//! Zero-copy weights. A fused graph keeps its model's weights once, in `FusedGraph::reference`
//! (the source model's bytes). The lowered model refers to them instead of holding a copy: an
//! original initializer is stored as ONNX external data with location [`REFERENCE`], an offset
//! and a length into the reference. They are copied only when a model is serialised for a
//! backend ([`crate::FusedGraph::lowered_model`], [`crate::Extractor::extract`]).

use bytes::Bytes;

use crate::proto::tensor_proto::DataLocation;
use crate::proto::{ModelProto, StringStringEntryProto, TensorProto};

/// The external-data location that means "the fused graph's reference bytes".
pub(crate) const REFERENCE: &str = "bident:reference";

/// `t` as the lowered model stores it: a reference into `reference` when its raw data is a
/// slice of it, else a copy.
pub(crate) fn stored(t: &TensorProto, reference: &Bytes) -> TensorProto {
    let Some(raw) = t.raw_data.as_ref().filter(|r| !r.is_empty()) else { return t.clone() };
    let (start, inner) = (reference.as_ptr() as usize, raw.as_ptr() as usize);
    if inner < start || inner + raw.len() > start + reference.len() {
        return t.clone();
    }
    let entry = |k: &str, v: String| StringStringEntryProto { key: Some(k.into()), value: Some(v) };
    TensorProto {
        raw_data: None,
        data_location: Some(DataLocation::External as i32),
        external_data: vec![
            entry("location", REFERENCE.into()),
            entry("offset", (inner - start).to_string()),
            entry("length", raw.len().to_string()),
        ],
        ..t.clone()
    }
}

/// Put the referenced weights back into `model`'s initializers (slices of `reference`, no copy).
pub(crate) fn resolve(model: &mut ModelProto, reference: &Bytes) -> Result<(), String> {
    let Some(g) = model.graph.as_mut() else { return Ok(()) };
    for t in &mut g.initializer {
        let kv = |k: &str| t.external_data.iter().find(|e| e.key() == k).map(|e| e.value().to_string());
        if t.data_location != Some(DataLocation::External as i32) || kv("location").as_deref() != Some(REFERENCE) {
            continue;
        }
        let num = |k: &str| {
            kv(k).and_then(|v| v.parse::<usize>().ok()).ok_or_else(|| format!("initializer `{}`: bad {k}", t.name()))
        };
        let (offset, length) = (num("offset")?, num("length")?);
        let end = offset.checked_add(length).filter(|&e| e <= reference.len()).ok_or_else(|| {
            format!("initializer `{}`: bytes {offset}+{length} beyond the reference's {}", t.name(), reference.len())
        })?;
        t.raw_data = Some(reference.slice(offset..end));
        t.external_data.clear();
        t.data_location = Some(DataLocation::Default as i32);
    }
    Ok(())
}
