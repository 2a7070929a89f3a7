//! Placement snapshots: plans on the virtual `lunar-lake` SoC (deterministic) one line per op,
//! `op name kind -> PU (why)`, under rounded totals, for the models listed in
//! `tests/data/placement/models.txt`. A change in the search (a tie broken otherwise, a weaker
//! local improvement) shows as the few lines of the ops it moved.

use bident_search::{Mode, Objective, Problem, SearchConfig};
use bident_tests::{ModelCase, declared_cost, import, placement, root};

/// The listed models: one name a line, `#` comments.
fn listed() -> Vec<String> {
    let path = root().join("tests/data/placement/models.txt");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines().map(|l| l.split('#').next().unwrap_or("").trim()).filter(|l| !l.is_empty()).map(String::from).collect()
}

/// Every tiny family in every precision is listed, so a new family gets a snapshot too.
#[test]
fn every_tiny_family_is_listed() {
    let models = listed();
    for (family, _) in bident_zoo::families::FAMILIES {
        for prec in ["fp32", "fp16", "int8"] {
            let name = format!("{family}-tiny-{prec}");
            assert!(models.contains(&name), "{name} is missing from tests/data/placement/models.txt");
        }
    }
    assert!(models.iter().any(|m| m == "example"));
}

/// The sequential and parallel latency plans and the sequential energy plan, each as its
/// placement after a blank line.
fn three_plans(phased: &bident_partition::PhasedGraph, costs: &bident_profile::CostTable) -> String {
    let mut text = String::new();
    for (mode, objective) in [
        (Mode::Sequential, Objective::Latency),
        (Mode::Parallel, Objective::Latency),
        (Mode::Sequential, Objective::Energy),
    ] {
        let plan = bident_search::search(phased, costs, &SearchConfig { objective, mode, ..Default::default() })
            .expect("search");
        text.push('\n');
        text.push_str(&placement(&plan, phased, costs));
    }
    text
}

/// Sequential and parallel latency plans and the sequential energy plan of every listed model,
/// as placement snapshots. The families are above the exhaustive limit, so their plans are the
/// heuristics' (the example, 3^10 assignments, is solved exhaustively).
#[test]
fn placements_on_lunar_lake() {
    let soc = bident_profile::simulate::VirtualSoc::preset("lunar-lake").expect("lunar-lake");
    let case_file = root().join("tests/data/placement/models.txt");
    for name in listed() {
        let case = ModelCase { model: format!("zoo:{name}"), input_shape: Default::default(), fusion: None };
        let g = import(&case, &case_file);
        let phased = bident_partition::partition(&g).expect("partition");
        let costs = bident_profile::simulate::simulate(&g, &soc).expect("simulate");
        let exhaustive = Problem::new(&phased, &costs).small_enough_for_exhaustive();
        assert!(name == "example" || !exhaustive, "{name}: solved exhaustively, so no heuristic shows here");
        let mut text = format!(
            "{name}: {} fused ops, {} phases on {} ({}); {}^{} assignments: {}\n",
            g.ops.len(),
            phased.phases.len(),
            costs.soc.name,
            costs.soc.pus.iter().map(|p| p.name.as_str()).collect::<Vec<_>>().join(", "),
            costs.soc.pus.len(),
            g.ops.len(),
            if exhaustive { "solved exhaustively" } else { "above the exhaustive limit, heuristic" }
        );
        text.push_str(&three_plans(&phased, &costs));
        insta::assert_snapshot!(format!("placement-{name}"), text);
    }
}

/// A pipeline of 75 ops on lunar-lake's three PUs whose costs are small multiples of 5 µs, so
/// that many choices tie exactly (simulated costs of real models almost never do): phases of a
/// chain of 6 ops alternating with 3 branches of 3 ops, each op priced from a seeded generator.
/// Above the exhaustive limit, so the plans are the heuristics'; which of two equal choices the
/// DP takes, and what each local move finds, shows here as the few ops it moved.
#[test]
fn placements_where_costs_tie() {
    use bident_partition::{Branch, Phase, PhasedGraph};
    use bident_profile::OpCosts;
    let soc = bident_profile::simulate::VirtualSoc::preset("lunar-lake").expect("lunar-lake");
    let case_file = root().join("tests/data/placement/models.txt");
    let example = ModelCase { model: "zoo:example".into(), input_shape: Default::default(), fusion: None };
    // the example's simulated table gives the SoC and the table's other fields
    let template = bident_profile::simulate::simulate(&import(&example, &case_file), &soc).expect("simulate");
    let mut s = 0x2545_F491_4F6C_DD1Du64;
    let mut draw = |n: u64| {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 11) % n
    };
    let (mut phases, mut edges, mut next) = (vec![], vec![], 0u32);
    let mut last: Vec<u32> = vec![];
    for p in 0..10 {
        let shape: &[u32] = if p % 2 == 0 { &[6] } else { &[3, 3, 3] };
        let mut ends = vec![];
        let branches = shape
            .iter()
            .map(|&len| {
                let ops: Vec<u32> = (next..next + len).collect();
                next += len;
                edges.extend(ops.windows(2).map(|w| (w[0], w[1])));
                edges.extend(last.iter().map(|&l| (l, ops[0])));
                ends.push(ops[ops.len() - 1]);
                Branch { ops }
            })
            .collect();
        phases.push(Phase { branches });
        last = ends;
    }
    edges.sort_unstable();
    let graph = bident_artifact::ContentHash([9; 32]);
    let phased = PhasedGraph {
        model: "ties".into(),
        graph,
        op_count: next,
        phases,
        edges,
        reads_input: vec![0],
        writes_output: vec![next - 1],
    };
    let ops = (0..next)
        .map(|op| OpCosts {
            op,
            name: format!("op{op}"),
            kind: "MatMul".into(),
            per_pu: (0..3u64)
                .map(|pu| {
                    let (exec, move_us) =
                        (5.0 * (1 + draw(10)) as f64, if pu == 0 { 0.0 } else { 5.0 * draw(3) as f64 });
                    Some(declared_cost(exec, move_us, move_us, [10.0, 15.0, 5.0][pu as usize]))
                })
                .collect(),
            failures: vec![],
        })
        .collect();
    let costs = bident_profile::CostTable { model: "ties".into(), graph, ops, segments: vec![], ..template };
    assert!(!Problem::new(&phased, &costs).small_enough_for_exhaustive());
    let mut text = String::from("75 ops in 10 phases on lunar-lake, costs multiples of 5 µs (synthetic, simulated)\n");
    text.push_str(&three_plans(&phased, &costs));
    insta::assert_snapshot!("placement-ties", text);
}

/// `costs` with a whole-model configuration beside its PUs: `tuned`, a whole-only copy of the
/// first PU with no entry of its own for any op, and, where `whole_us` is given, its whole run
/// along the phased order measured at that.
fn with_tuned_pu(
    costs: &bident_profile::CostTable,
    phased: &bident_partition::PhasedGraph,
    whole_us: Option<f64>,
) -> bident_profile::CostTable {
    let mut t = costs.clone();
    let mut tuned = t.soc.pus[0].clone();
    (tuned.name, tuned.whole_only) = ("tuned".into(), true);
    t.soc.pus.push(tuned);
    t.ops.iter_mut().for_each(|o| o.per_pu.push(None));
    t.segments.iter_mut().for_each(|s| s.per_pu.push(None));
    t.components.push("synthetic".into());
    t.io_every_call.push(false);
    if !t.launch_us.is_empty() {
        t.launch_us.push(0.0);
    }
    if let Some(c) = t.contention.as_mut() {
        c.sf.iter_mut().for_each(|row| row.push(1.0));
        c.sf.push(vec![1.0; c.sf.len() + 1]);
    }
    if let Some(us) = whole_us {
        let mut per_pu = vec![None; t.soc.pus.len()];
        per_pu[t.soc.pus.len() - 1] = Some(declared_cost(us, 0.0, 0.0, 10.0));
        t.segments.push(bident_profile::SegmentCost { ops: phased.order(), per_pu });
    }
    t
}

/// A whole-model configuration (a whole-only PU, `PuSpec::whole_only`: a tuned thread count or
/// precision) is priced by its whole run alone: unmeasured, no plan uses it; measured slower than
/// the plan, the plan is unchanged; measured faster, the plan is the whole model there at exactly
/// the measured figure, every op `whole-model`; and a plan that cuts it fails the plan check.
#[test]
fn a_whole_model_configuration_is_priced_by_its_whole_run_alone() {
    let soc = bident_profile::simulate::VirtualSoc::preset("lunar-lake").expect("lunar-lake");
    let case_file = root().join("tests/data/placement/models.txt");
    for name in ["example", "vit-tiny-fp32"] {
        let case = ModelCase { model: format!("zoo:{name}"), input_shape: Default::default(), fusion: None };
        let g = import(&case, &case_file);
        let phased = bident_partition::partition(&g).expect("partition");
        let costs = bident_profile::simulate::simulate(&g, &soc).expect("simulate");
        for mode in [Mode::Sequential, Mode::Parallel] {
            let cfg = SearchConfig { mode, ..Default::default() };
            let search = |t: &bident_profile::CostTable| bident_search::search(&phased, t, &cfg).expect("search");
            let free = search(&costs);
            let unmeasured = search(&with_tuned_pu(&costs, &phased, None));
            assert_eq!(
                (&unmeasured.ops_per_pu, unmeasured.predicted_us),
                (&free.ops_per_pu, free.predicted_us),
                "{name} {mode:?}: an unmeasured configuration"
            );
            assert_eq!(unmeasured.baselines.last().and_then(|b| b.predicted_us), None, "{name}");
            let slower = search(&with_tuned_pu(&costs, &phased, Some(free.predicted_us * 1.5)));
            assert_eq!(
                (&slower.ops_per_pu, slower.predicted_us),
                (&free.ops_per_pu, free.predicted_us),
                "{name} {mode:?}: a slower configuration"
            );
            let us = free.predicted_us * 0.5;
            let faster_costs = with_tuned_pu(&costs, &phased, Some(us));
            let faster = search(&faster_costs);
            assert_eq!(faster.ops_per_pu.get("tuned").copied(), Some(g.ops.len() as u32), "{name} {mode:?}");
            assert!((faster.predicted_us - us).abs() < 1e-9 * us, "{name}: {} vs {us}", faster.predicted_us);
            assert!(faster.steps.iter().all(|s| s.reason == bident_search::Reason::WholeModel), "{name}");
            let mut cut = faster.clone();
            cut.steps[0].pu = free.steps[0].pu.clone();
            cut.ops_per_pu = [("tuned".to_string(), g.ops.len() as u32 - 1), (cut.steps[0].pu.clone(), 1)].into();
            let err = bident_search::check_plan(&cut, &phased, &faster_costs).expect_err("a cut configuration");
            assert!(err.to_string().contains("may run only the whole model"), "{err}");
        }
    }
}
