//! `cargo xtask codegen`: ONNX protobuf bindings from the vendored `onnx.proto`, with protox
//! (no protoc) and prost-build; the output is committed.

use anyhow::{Context, Result, bail};

const PROTO_DIR: &str = "crates/bident-onnx/proto";
const OUT: &str = "crates/bident-onnx/src/onnx.rs";

pub fn codegen(check: bool) -> Result<()> {
    let root = crate::root();
    let proto_dir = root.join(PROTO_DIR);
    let fds = protox::compile([proto_dir.join("onnx.proto")], [&proto_dir]).context("compiling onnx.proto")?;
    let tmp = root.join("target/codegen");
    std::fs::create_dir_all(&tmp)?;
    prost_build::Config::new()
        .out_dir(&tmp)
        // weights stay slices of the model file's buffer (zero-copy decoding)
        .bytes([".onnx.TensorProto.raw_data"])
        .compile_fds(fds)
        .context("generating Rust from onnx.proto")?;
    let fresh = std::fs::read_to_string(tmp.join("onnx.rs"))?;
    let out = root.join(OUT);
    if check {
        let current = std::fs::read_to_string(&out).unwrap_or_default();
        if current != fresh {
            bail!("{OUT} is stale: run `cargo xtask codegen` and commit the result");
        }
        tracing::info!("codegen: {OUT} is up to date");
    } else {
        std::fs::write(&out, fresh)?;
        tracing::info!("codegen: wrote {OUT}");
    }
    Ok(())
}
