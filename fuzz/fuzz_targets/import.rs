//! Any bytes through the importer: it may refuse them, but must not panic, hang or run out of
//! memory; whatever it accepts must verify and extract.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let opts = bident_ir::ImportOptions::default();
    if let Ok(g) = bident_ir::import_bytes(data, "fuzz.onnx", None, &opts) {
        bident_ir::verify(&g).expect("an imported graph verifies");
        let ex = bident_ir::Extractor::new(&g).expect("extractor");
        for op in 0..g.ops.len() as u32 {
            ex.extract(op).expect("every op extracts");
        }
    }
});
