//! Any bytes as a cost-table artifact: decoding may fail, but must not panic; whatever
//! `CostTable::check` accepts against the example's fused graph must be searchable with the
//! example's phases (the search may refuse it, but must not panic or hang).
#![no_main]

use bident_search::{Mode, Objective, SearchConfig};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let cx = bident_fuzz::context();
    if let Some(c) = bident_fuzz::decode::<bident_profile::CostTable>(data)
        && c.check(&cx.graph).is_ok()
    {
        for (mode, objective) in [(Mode::Sequential, Objective::Latency), (Mode::Parallel, Objective::Energy)] {
            let cfg = SearchConfig { mode, objective, ..Default::default() };
            let _ = bident_search::search(&cx.phased, &c, &cfg);
        }
    }
});
