//! Any bytes through the OpenVINO IR reader: the input is the XML text, a zero byte, then the
//! weights. It may refuse them, but must not panic; whatever it accepts must verify and extract.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let split = data.iter().position(|&b| b == 0).unwrap_or(data.len());
    let Ok(xml) = std::str::from_utf8(&data[..split]) else { return };
    let bin = bytes::Bytes::copy_from_slice(data.get(split + 1..).unwrap_or(&[]));
    let opts = bident_ir::ImportOptions::default();
    if let Ok(g) = bident_ir::import_openvino_ir_bytes(xml, bin, "fuzz.xml", &opts) {
        bident_ir::verify(&g).expect("an imported graph verifies");
        let ex = bident_ir::Extractor::new(&g).expect("extractor");
        for op in 0..g.ops.len() as u32 {
            ex.extract(op).expect("every op extracts");
        }
    }
});
