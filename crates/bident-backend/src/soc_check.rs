//! What a SoC spec may say of a PU, wherever the spec comes from (a spec file, a preset, the
//! SoC a cost table carries): its name, and the compile properties an engine is given.

use crate::soc::{PRECISION_KEY, PuSpec};

/// The compile properties a PU may carry, by backend: the ones that choose how a device
/// computes (threads, streams, pinning, precision, scheduling). None names a file, a folder or
/// a library: a SoC spec or a cost table read from disk must never make an engine write or load
/// anything (OpenVINO's `CACHE_DIR` would write compiled blobs wherever it points).
pub const ALLOWED_PROPERTIES: &[(&str, &[&str])] = &[
    (
        "openvino",
        &[
            "INFERENCE_NUM_THREADS",
            "ENABLE_CPU_PINNING",
            "NUM_STREAMS",
            PRECISION_KEY,
            "PERFORMANCE_HINT",
            "PERFORMANCE_HINT_NUM_REQUESTS",
            "EXECUTION_MODE_HINT",
            "SCHEDULING_CORE_TYPE",
            "ENABLE_HYPER_THREADING",
        ],
    ),
    (
        "onnxruntime",
        &[
            "INTRA_OP_NUM_THREADS",
            "SPIN_BETWEEN_RUNS",
            "GRAPH_OPTIMIZATION_LEVEL",
            PRECISION_KEY,
            // execution provider options that pick a device or a precision, never a path
            "EP.device_id",
            "EP.device_type",
            "EP.backend_type",
            "EP.MLComputeUnits",
            "EP.precision",
            "EP.trt_fp16_enable",
            "EP.trt_int8_enable",
            "EP.num_of_threads",
        ],
    ),
];

/// A PU's name: letters, digits, `.`, `_` and `-`, so it never clashes with the syntax of
/// `--pin OP=PU`, `--inject-fault PU:FAULT@N` or a path.
pub fn check_pu_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("a PU has an empty name".into());
    }
    if name.len() > 64 || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b)) {
        return Err(format!(
            "PU name {name:?}: use at most 64 letters, digits, `.`, `_` and `-` (`:`, `=`, `@` and `/` belong to \
             --pin and --inject-fault)"
        ));
    }
    Ok(())
}

/// Every property of `pu` is one its backend may be given ([`ALLOWED_PROPERTIES`]), with a
/// plain value (no path, no spaces).
pub fn check_properties(pu: &PuSpec) -> Result<(), String> {
    let allowed = ALLOWED_PROPERTIES.iter().find(|(b, _)| *b == pu.backend).map_or(&[][..], |(_, keys)| keys);
    for (key, value) in &pu.properties {
        if !allowed.contains(&key.as_str()) {
            return Err(format!(
                "PU `{}`: property `{key}` is not one a SoC may set for {} (allowed: {})",
                pu.name,
                pu.backend,
                if allowed.is_empty() { "none".to_string() } else { allowed.join(", ") }
            ));
        }
        if value.is_empty()
            || value.len() > 64
            || !value.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-:,".contains(&b))
        {
            return Err(format!("PU `{}`: property `{key}` = {value:?} is not a plain value", pu.name));
        }
    }
    Ok(())
}
