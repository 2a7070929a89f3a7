//! A mapping search written outside bident: implement `MappingSearch`, register it with the
//! driver (`Passes::add_search`), select it with `--search cheapest-run`. bident builds the plan
//! from its mapping with the evaluator and checks it, as for its own searches.

use bident_search::{Mapping, MappingSearch, Mode, Objective, Problem, Schedule, SearchConfig};

/// Walk the ops in execution order; put each on the PU where it costs least, counting what
/// compiling it with the op before it saves when both share a PU.
pub struct CheapestRun;

impl MappingSearch for CheapestRun {
    fn name(&self) -> &str {
        "cheapest-run"
    }

    fn about(&self) -> &str {
        "example crate: each op in order on its cheapest PU, counting the saving of joining the op before it"
    }

    fn map(&self, p: &Problem, cfg: &SearchConfig) -> Option<Mapping> {
        let mut assign = vec![0; p.ops()];
        let mut estimate = 0.0;
        for c in p.order() {
            let cost = |j: usize| {
                let w = p.w[c][j]?;
                let w = if cfg.objective == Objective::Energy { w * p.power[c][j] } else { w };
                // `prev[c]` is the op before `c` in the execution order: already placed
                let joins = p.prev[c].is_some_and(|b| assign[b] == j);
                Some(if joins { w - p.saving[c][j] } else { w })
            };
            let (j, w) = (0..p.pus()).filter_map(|j| Some((j, cost(j)?))).min_by(|a, b| a.1.total_cmp(&b.1))?;
            assign[c] = j;
            estimate += w;
        }
        let schedule = if cfg.mode == Mode::Parallel { Schedule::Parallel } else { Schedule::Sequential };
        Some(Mapping { assign, schedule, estimate })
    }
}
