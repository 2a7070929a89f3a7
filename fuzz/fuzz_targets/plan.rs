//! Any bytes as a plan artifact: decoding may fail, but must not panic; whatever
//! `bident_search::check_plan` accepts against the example's phases and costs must diff against
//! the example's plan and split into segments without panicking.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let cx = bident_fuzz::context();
    if let Some(plan) = bident_fuzz::decode::<bident_search::Plan>(data)
        && bident_search::check_plan(&plan, &cx.phased, &cx.costs).is_ok()
    {
        let _ = bident_search::diff(&cx.plan, &plan);
        let _ = bident_search::diff(&plan, &cx.plan);
        let _ = plan.segments();
    }
});
