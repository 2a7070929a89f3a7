//! Speed of the front end on a 70 MB BERT-style encoder (the zoo's `bert-encoder`, seq 128):
//! import (decode, fold, fuse, verify) and extraction of every fused op. Targets (issue 3):
//! each under 1 s here. Peak memory is measured on the command line:
//! `cargo xtask zoo bert-encoder && /usr/bin/time -v target/debug/xtask import
//! target/bident/zoo/bert-encoder.onnx --input-shape input_ids=1,128 --input-shape attention_mask=1,128`.
//!
//! `cargo bench -p bident-tests --bench import`

use bytes::Bytes;
use criterion::{Criterion, criterion_group, criterion_main};

fn front_end(c: &mut Criterion) {
    let bytes = Bytes::from(bident_zoo::build_bytes("bert-encoder", 0).expect("zoo model"));
    let opts = bident_ir::ImportOptions {
        input_shapes: [("input_ids".to_string(), vec![1, 128]), ("attention_mask".to_string(), vec![1, 128])]
            .into_iter()
            .collect(),
        ..Default::default()
    };
    let import = || bident_ir::import_shared(bytes.clone(), "bert-encoder.onnx", None, &opts).expect("imports");
    let mut g = c.benchmark_group(format!("bert_encoder_{}MB", bytes.len() >> 20));
    g.sample_size(10);
    g.bench_function("import", |b| b.iter(import));
    let graph = import();
    g.bench_function("extract_all_ops", |b| {
        b.iter(|| {
            let ex = bident_ir::Extractor::new(&graph).expect("extractor");
            (0..graph.ops.len() as u32).map(|op| ex.extract(op).expect("extracts").len()).sum::<usize>()
        })
    });
    g.finish();
}

criterion_group!(benches, front_end);
criterion_main!(benches);
