//! Placement constraints: what a user pins, forbids or excludes, checked by name and applied to
//! a problem before the search.

use bident_ir::OpId;
use bident_profile::CostTable;
use serde::{Deserialize, Serialize};

use crate::{Problem, SearchError};

/// Placement constraints. Ops are named by index or by name, PUs by name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Constraints {
    /// `(op, pu)`: the op runs on this PU.
    pub pin: Vec<(String, String)>,
    /// `(op, pu)`: the op does not run on this PU.
    pub forbid: Vec<(String, String)>,
    /// PUs no op may use.
    pub exclude: Vec<String>,
    /// PUs that may run the whole model but no part of it: cut into sub-models, their reduced
    /// precision gave outputs beyond the tolerance (OpenVINO's bf16 on MiniLM's attention). The
    /// search weighs the whole model on each against its best plan on the other PUs.
    #[serde(default)]
    pub whole_only: Vec<String>,
    /// Every op on this PU: the model whole there, because a measured run gave way to it (not a
    /// user's pin: a later run or a serving session may plan away from it again).
    #[serde(default)]
    pub whole: Option<String>,
}

impl Constraints {
    /// What can be checked without the graph (before a pipeline touches its folder): every PU
    /// named is one of `pus`, and no op is pinned twice under one name. Ops are checked by the
    /// search.
    pub fn check_names(&self, pus: &[&str]) -> Result<(), SearchError> {
        let named = self
            .pin
            .iter()
            .chain(&self.forbid)
            .map(|(_, pu)| pu)
            .chain(&self.exclude)
            .chain(&self.whole_only)
            .chain(&self.whole);
        if let Some(pu) = named.into_iter().find(|pu| !pus.contains(&pu.as_str())) {
            return Err(SearchError::Constraint(format!("no PU named `{pu}` (the SoC has {})", pus.join(", "))));
        }
        for (k, (op, pu)) in self.pin.iter().enumerate() {
            if let Some((_, other)) = self.pin[..k].iter().find(|(o, p)| o == op && p != pu) {
                return Err(SearchError::Constraint(format!("op `{op}` is pinned twice, to {other} and to {pu}")));
            }
        }
        Ok(())
    }

    /// The PUs that may run the whole model but no part of it: [`Constraints::whole_only`] and
    /// the SoC's whole-model configurations (`PuSpec::whole_only`).
    pub fn whole_only_on<'a>(&'a self, costs: &'a CostTable) -> impl Iterator<Item = &'a String> + 'a {
        let of_soc =
            costs.soc.pus.iter().filter(|p| p.whole_only && !self.whole_only.contains(&p.name)).map(|p| &p.name);
        self.whole_only.iter().chain(of_soc)
    }

    pub fn is_empty(&self) -> bool {
        self.pin.is_empty()
            && self.forbid.is_empty()
            && self.exclude.is_empty()
            && self.whole_only.is_empty()
            && self.whole.is_none()
    }

    /// Remove from `p` every (op, PU) the constraints rule out; returns the pinned ops.
    pub(crate) fn apply(&self, p: &mut Problem, costs: &CostTable) -> Result<Vec<bool>, SearchError> {
        let bad = |m: String| SearchError::Constraint(m);
        let n = p.ops();
        let op = |s: &str| -> Result<usize, SearchError> {
            let c = bident_ir::resolve_op(costs.ops.iter().map(|o| o.name.as_str()), s).map_err(bad)?;
            if c < n { Ok(c) } else { Err(bad(format!("op {c} is out of range: the graph has {n} ops"))) }
        };
        let pu = |s: &str| {
            costs.soc.pus.iter().position(|q| q.name == s).ok_or_else(|| {
                let known: Vec<&str> = costs.soc.pus.iter().map(|q| q.name.as_str()).collect();
                bad(format!("no PU named `{s}` (the SoC has {})", known.join(", ")))
            })
        };
        let mut why: Vec<Vec<String>> = vec![vec![]; p.ops()];
        for name in &self.exclude {
            let j = pu(name)?;
            for (c, row) in p.w.iter_mut().enumerate() {
                if row[j].take().is_some() {
                    why[c].push(format!("{name} is excluded"));
                }
            }
        }
        // a whole-only PU stays open where the whole model is placed on it
        for name in self.whole_only_on(costs).filter(|&pu| self.whole.as_ref() != Some(pu)) {
            let j = pu(name)?;
            for (c, row) in p.w.iter_mut().enumerate() {
                if row[j].take().is_some() {
                    why[c].push(format!("{name} may run only the whole model"));
                }
            }
        }
        for (o, name) in &self.forbid {
            let (c, j) = (op(o)?, pu(name)?);
            if p.w[c][j].take().is_some() {
                why[c].push(format!("{name} is forbidden"));
            }
        }
        let mut pinned = vec![false; p.ops()];
        let mut pinned_to: Vec<Option<&str>> = vec![None; p.ops()];
        // the user's pins, then every op on the PU a run gave way to
        let mut pins: Vec<(usize, &str)> =
            self.pin.iter().map(|(o, name)| Ok((op(o)?, name.as_str()))).collect::<Result<_, _>>()?;
        if let Some(name) = &self.whole {
            pins.extend((0..n).map(|c| (c, name.as_str())));
        }
        for (c, name) in pins {
            let j = pu(name)?;
            match pinned_to[c].replace(name) {
                Some(first) if first != name => {
                    return Err(bad(format!(
                        "op {c} `{}` is pinned twice, to {first} and to {name}",
                        costs.ops[c].name
                    )));
                }
                _ => {}
            }
            let reason = match (p.w[c][j], costs.cost(c as OpId, j)) {
                (Some(_), _) => None,
                (None, None) => Some(format!("{name} cannot run it")),
                (None, Some(_)) => Some(format!("{name} is excluded or forbidden for it")),
            };
            if let Some(r) = reason {
                return Err(bad(format!("op {c} `{}` is pinned to {name}, but {r}", costs.ops[c].name)));
            }
            for (k, w) in p.w[c].iter_mut().enumerate() {
                if k != j {
                    *w = None;
                }
            }
            pinned[c] = true;
        }
        if let Some(c) = (0..p.ops()).find(|&c| p.w[c].iter().all(Option::is_none)) {
            return Err(bad(format!(
                "op {c} `{}` can run on no PU under the constraints ({})",
                costs.ops[c].name,
                why[c].join(", ")
            )));
        }
        Ok(pinned)
    }
}
