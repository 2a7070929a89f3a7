//! A segment measured in a slow state of the machine: its own binary, because it holds every
//! speed probe of the process slow (`bident_profile::speed::pretend_slowness`).
//!
//! Refine prices a plan's segments whole; one measured while its cores ran slow was kept as it
//! was (SNN-VGG9 INT8 whole on core 0: 151.4 µs in refine, 80.5 µs in the run beside it, and the
//! plan that gave way to it was predicted from the 151.4). Such a segment is now measured once
//! more after every PU's turn, and the faster kept; so is every whole model, slow or not.

use bident_backend::Backend;
use bident_profile::ProfileConfig;

#[test]
fn a_segment_measured_in_a_slow_state_is_measured_once_more() {
    let be = bident_tests::backend();
    let soc = bident_backend::SocSpec::preset_with("local", be.as_ref(), bident_backend::soc::Precisions::Exact)
        .expect("local");
    let (g, _) = bident_tests::model("example");
    let whole: Vec<bident_ir::OpId> = (0..g.ops.len() as bident_ir::OpId).collect();
    let wanted = vec![(whole, 0)];
    let cfg = ProfileConfig { warmup: 2, runs: 10, adaptive: false, ..Default::default() };
    let measure = |notes: &mut Vec<(&'static str, String)>| {
        bident_profile::measure_segments(&g, &soc, be.as_ref() as &dyn Backend, &cfg, None, &wanted, &mut |p| {
            notes.extend(p.note.clone().map(|n| (p.phase, n)))
        })
        .expect("measures")
    };
    let again = |notes: &[(&'static str, String)]| -> Vec<String> {
        notes.iter().filter(|(phase, _)| *phase == "again").map(|(_, n)| n.clone()).collect()
    };
    // in the machine's fast state: the whole model, measured once more all the same (a real
    // slow state may say so too)
    bident_profile::speed::pretend_slowness(1.0);
    let mut notes = vec![];
    let fast = measure(&mut notes);
    assert!(fast[0].per_pu[0].is_some(), "a cost: {notes:?}");
    let looked = again(&notes);
    assert_eq!(looked.len(), 1, "one second look, at the one PU asked: {notes:?}");
    assert!(looked[0].contains(", measured again: ") && looked[0].contains(" of 1 faster"), "{looked:?}");
    // every probe slow: measured, found slow, measured once more
    bident_profile::speed::pretend_slowness(3.0);
    let mut notes = vec![];
    let slow = measure(&mut notes);
    bident_profile::speed::pretend_slowness(1.0);
    let again = again(&notes);
    assert_eq!(again.len(), 1, "one second look, at the one PU asked: {notes:?}");
    assert!(again[0].contains("in a slow state of its cores, measured again: "), "{again:?}");
    assert!(again[0].contains(" of 1 faster"), "{again:?}");
    assert!(notes.iter().any(|(phase, _)| *phase == "slow"), "the slow rounds are said: {notes:?}");
    let cost = slow[0].per_pu[0].as_ref().expect("a cost after the second look");
    assert!(cost.weight_us() > 0.0 && cost.runs >= cfg.runs, "{cost:?}");
}
