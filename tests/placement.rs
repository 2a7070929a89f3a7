//! Placement snapshots: plans on the virtual `lunar-lake` SoC (deterministic) one line per op,
//! `op name kind -> PU (why)`, under rounded totals, for the models listed in
//! `tests/data/placement/models.txt`. A change in the search (a tie broken otherwise, a weaker
//! local improvement) shows as the few lines of the ops it moved.

use bident_search::{Mode, Objective, Problem, SearchConfig};
use bident_tests::{ModelCase, import, placement, root};

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
        for (mode, objective) in [
            (Mode::Sequential, Objective::Latency),
            (Mode::Parallel, Objective::Latency),
            (Mode::Sequential, Objective::Energy),
        ] {
            let plan = bident_search::search(&phased, &costs, &SearchConfig { objective, mode, ..Default::default() })
                .expect("search");
            text.push('\n');
            text.push_str(&placement(&plan, &phased, &costs));
        }
        insta::assert_snapshot!(format!("placement-{name}"), text);
    }
}
