//! Any bytes as a phased-graph artifact: decoding may fail, but must not panic; whatever
//! `bident_partition::verify` accepts against the example's fused graph must be searchable
//! (the search may refuse it, but must not panic).
#![no_main]

use bident_search::{Mode, SearchConfig};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let cx = bident_fuzz::context();
    if let Some(p) = bident_fuzz::decode::<bident_partition::PhasedGraph>(data)
        && bident_partition::verify(&cx.graph, &p).is_ok()
    {
        for mode in [Mode::Sequential, Mode::Parallel] {
            let _ = bident_search::search(&p, &cx.costs, &SearchConfig { mode, ..Default::default() });
        }
    }
});
