//! The profile stage ([`Driver::profile`]) and what it measures beside the cost table: the
//! contention matrix and the runtime's launch cost per PU.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bident_artifact::ContentHash;
use bident_backend::{Backend, Backends, SocSpec};
use bident_ir::{FusedGraph, OpId};
use bident_profile::{CostTable, ProfileConfig};
use bident_runtime::error_chain;

use crate::folder::{COSTS, PLAN, REPORT};
use crate::{Driver, DriverError, Event, Folder, Measuring, Result, Soc, Stage};

/// Representative ops for the contention co-runs: compute-bound (MatMul, Conv) and
/// memory-bound (a 2 MB-per-operand Add), in f32 like the measured PUs.
const CONTENTION_PROBES: &[(&str, u64)] = &[("matmul", 256), ("conv", 32), ("add", 512)];
/// The runtime's launch cost is measured on an Add of this size, in this many blocks per PU.
const LAUNCH_PROBE: u64 = 16;
/// Other processes' average CPU use (cores) while profiling above which the run says so.
const BUSY_CORES: f64 = 0.25;
const LAUNCH_BLOCKS: usize = 40;
/// A launch cost above this is measured again, at most [`LAUNCH_AGAIN`] times, and the lowest
/// counts; one still above it is counted and the run says so. An inference through the runtime
/// costs 1-5 µs beyond its ops on this VM, 20-30 µs where a worker must be woken; a launch of
/// 3.9 ms (a scheduler tick: the session's threads stalled beside busy ones) was once counted
/// silently and made every plan using that PU look slower.
const LAUNCH_SUSPECT_US: f64 = 100.0;
const LAUNCH_AGAIN: usize = 2;

/// The launch cost of one PU from `measure`: measured again while above [`LAUNCH_SUSPECT_US`]
/// (at most [`LAUNCH_AGAIN`] times), the lowest kept; with what the run should say where the
/// kept one is still above it.
fn settle_launch<E>(mut measure: impl FnMut() -> Result<f64, E>) -> Result<(f64, Option<String>), E> {
    // a non-finite value is as suspect as a large one, and never kept
    let mut seen = vec![measure()?];
    while seen.len() <= LAUNCH_AGAIN && seen.iter().all(|&us| !us.is_finite() || us > LAUNCH_SUSPECT_US) {
        seen.push(measure()?);
    }
    let kept = seen.iter().copied().filter(|us| us.is_finite()).fold(f64::INFINITY, f64::min);
    if !kept.is_finite() {
        return Ok((0.0, Some(format!("no finite launch cost in {} tries; counting 0", seen.len()))));
    }
    let note = (kept > LAUNCH_SUSPECT_US).then(|| {
        let each: Vec<String> = seen.iter().map(|us| format!("{us:.0}")).collect();
        format!(
            "measured {} µs beyond its ops in {} tries, against 1-30 µs on a quiet machine: other threads may hold its \
             cores; counting {kept:.0} µs, which prices every plan using it that much higher",
            each.join(", "),
            seen.len()
        )
    });
    Ok((kept, note))
}

impl Driver<'_> {
    /// The cost table of one small model (a probe: one op of one size) on `soc`, measured with
    /// `runs` fixed runs or simulated; nothing is written.
    pub fn probe_costs(
        &self,
        soc: &Soc,
        name: &str,
        model: &bident_ir::proto::ModelProto,
        runs: u32,
    ) -> Result<CostTable> {
        let bytes = prost::Message::encode_to_vec(model);
        let g = bident_ir::import_bytes(&bytes, &format!("{name}.onnx"), None, &Default::default())?;
        Ok(match soc {
            Soc::Virtual(v) => bident_profile::simulate::simulate(&g, v)?,
            Soc::Measured(spec, be) => {
                let cfg = ProfileConfig { warmup: 2, runs, adaptive: false, ..Default::default() };
                bident_profile::profile(&g, spec, be.as_ref(), &cfg, None, &mut |_| {})?
            }
        })
    }

    /// Stage 3: the cost table of `g` on `soc`, measured (with the contention matrix where some
    /// PUs may run at once) or simulated. `pairs`: neighbours in the execution order to measure
    /// compiled together as well.
    pub fn profile(
        &self,
        folder: &Folder,
        (g, gh): (&FusedGraph, ContentHash),
        soc: &Soc,
        m: Measuring,
        pairs: Vec<(OpId, OpId)>,
        contention: Option<&bident_profile::Contention>,
    ) -> Result<(CostTable, ContentHash)> {
        let t0 = Instant::now();
        folder.clear(&[COSTS, PLAN, REPORT])?;
        let cfg = ProfileConfig {
            runs: m.runs,
            adaptive: m.adaptive,
            segments: pairs.into_iter().map(|(a, b)| vec![a, b]).collect(),
            ..Default::default()
        };
        let (soc, be) = match soc {
            Soc::Measured(spec, be) => (spec, be),
            Soc::Virtual(v) => {
                let table = bident_profile::simulate::simulate(g, v)?;
                let h = folder.write(COSTS, &table, bident_profile::simulate::input_hash(gh, v)?)?;
                self.note(
                    Stage::Profile,
                    format!(
                        "{} ops x {} PUs SIMULATED on virtual SoC {} (analytic model; nothing was measured) in {:.2} s",
                        table.ops.len(),
                        v.spec.pus.len(),
                        v.spec.name,
                        t0.elapsed().as_secs_f64()
                    ),
                );
                self.emit(Event::Profiled { table: &table, cfg: &cfg });
                return Ok((table, h));
            }
        };
        let cache = self.cache(m);
        let others = bident_backend::others_cpu_seconds();
        let mut bar = WholeBar { pus: soc.pus.len(), ..Default::default() };
        let mut table = bident_profile::profile(g, soc, be.as_ref(), &cfg, cache.as_ref(), &mut |p| {
            if p.phase == "cached" {
                self.note(Stage::Profile, format!("{}: {} of {} units from the profile cache", p.pu, p.done, p.total));
            } else if let Some(why) = &p.note {
                self.note(Stage::Profile, format!("{}: {why}", p.pu));
            } else if p.phase == "measuring" {
                let (done, total) = bar.at(p.pu, p.done, p.total);
                self.emit(Event::Progress { stage: Stage::Profile, what: "measuring".into(), done, total });
            } else {
                self.emit(Event::Progress {
                    stage: Stage::Profile,
                    what: format!("{} {}", p.pu, p.phase),
                    done: p.done,
                    total: p.total,
                });
            }
        })?;
        if independent_pus(soc) {
            table.contention = Some(match contention {
                Some(c) => c.clone(),
                None => self.measure_contention(soc, be.as_ref())?,
            });
        }
        table.launch_us = self.measure_launch(soc, be)?;
        self.note_busy(others, t0.elapsed());
        let h = folder.write(COSTS, &table, bident_profile::input_hash(gh, soc, &cfg)?)?;
        let failed: usize = table.ops.iter().map(|o| o.failures.len()).sum();
        let entries: Vec<u32> = table.ops.iter().flat_map(|o| o.per_pu.iter().flatten().map(|c| c.runs)).collect();
        let mean_runs = entries.iter().sum::<u32>() as f64 / entries.len().max(1) as f64;
        self.note(
            Stage::Profile,
            format!(
                "{} ops x {} PUs in {:.1} s on {} ({}), {failed} (op, PU) pairs without an entry; {mean_runs:.0} timed \
                 runs per entry on average ({})",
                table.ops.len(),
                soc.pus.len(),
                t0.elapsed().as_secs_f64(),
                table.measured_on,
                if table.simulated { "simulated" } else { "measured" },
                if cfg.adaptive {
                    format!("stopped within {:.0}% at 95% confidence, cap {}", cfg.rel_ci * 100.0, cfg.runs)
                } else {
                    "fixed".to_string()
                }
            ),
        );
        self.emit(Event::Profiled { table: &table, cfg: &cfg });
        Ok((table, h))
    }

    /// A note where other processes kept more than [`BUSY_CORES`] cores busy over the `took`
    /// since their CPU time was `others` s ([`bident_backend::others_cpu_seconds`]): costs measured
    /// beside them hold only while they run (two busy processes beside the pipeline moved KAN
    /// INT8's plan from one core to the unpinned `CPU`, whose two threads then measured faster).
    fn note_busy(&self, others: Option<f64>, took: Duration) {
        let Some(used) = others.zip(bident_backend::others_cpu_seconds()).map(|(a, b)| b - a) else { return };
        let cores = used / took.as_secs_f64().max(1e-3);
        if cores > BUSY_CORES {
            self.note(
                Stage::Profile,
                format!(
                    "other processes kept {cores:.1} cores busy on average while profiling ({used:.1} s of CPU in {:.1} s): \
                     the costs hold only while they run (the cache keeps them; --no-cache measures again)",
                    took.as_secs_f64()
                ),
            );
        }
    }

    /// The measured SF matrix of `soc` (paper 3.2.2).
    pub fn measure_contention(&self, soc: &SocSpec, be: &dyn Backend) -> Result<bident_profile::Contention> {
        let probes = CONTENTION_PROBES
            .iter()
            .map(|&(op, n)| {
                let model = bident_zoo::probe(op, bident_tensor::DType::F32, n)
                    .ok_or_else(|| DriverError::Invalid(format!("no contention probe `{op}`")))?;
                Ok(bident_profile::contention::Probe {
                    name: format!("{op}-f32-{n}"),
                    onnx: prost::Message::encode_to_vec(&model),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let t0 = Instant::now();
        let c = bident_profile::contention::measure(be, soc, &probes, Default::default())?;
        self.note(Stage::Contention, format!("measured in {:.1} s", t0.elapsed().as_secs_f64()));
        let names: Vec<String> = probes.iter().map(|p| p.name.clone()).collect();
        self.emit(Event::Contention { soc, contention: &c, probes: &names });
        Ok(c)
    }

    /// What an inference through bident's runtime costs beyond its ops on each PU of `soc`
    /// used alone (µs), measured on a one-op probe: a plan's prediction adds it.
    pub fn measure_launch(&self, soc: &SocSpec, be: &Arc<Backends>) -> Result<Vec<f64>> {
        let model = bident_zoo::probe("add", bident_tensor::DType::F32, LAUNCH_PROBE)
            .ok_or_else(|| DriverError::Invalid("no launch probe".into()))?;
        let probe = bident_ir::import_bytes(
            &prost::Message::encode_to_vec(&model),
            "launch-probe.onnx",
            None,
            &Default::default(),
        )?;
        let t0 = Instant::now();
        // a PU that cannot run the probe is priced without it, and the run says so
        let launch: Vec<f64> = (0..soc.pus.len())
            .map(|pu| {
                let name = &soc.pus[pu].name;
                match settle_launch(|| bident_runtime::launch_us(&probe, soc, pu, be.clone(), LAUNCH_BLOCKS)) {
                    Ok((us, note)) => {
                        if let Some(n) = note {
                            self.note(Stage::Profile, format!("{name}: {n}"));
                        }
                        us
                    }
                    Err(e) => {
                        self.note(
                            Stage::Profile,
                            format!("{name}: no launch cost measured ({}); counting 0", error_chain(&e)),
                        );
                        0.0
                    }
                }
            })
            .collect();
        let each: Vec<String> = soc.pus.iter().zip(&launch).map(|(p, us)| format!("{} {us:.1}", p.name)).collect();
        self.note(
            Stage::Profile,
            format!(
                "an inference through the runtime costs beyond its ops (µs, where the plan uses that PU alone): {} \
                 (measured on a one-op probe in {:.2} s)",
                each.join(", "),
                t0.elapsed().as_secs_f64()
            ),
        );
        Ok(launch)
    }
}

/// One progress bar for the whole profile: PU by PU, each PU's units to measure, the PUs not yet
/// begun estimated at the current PU's count.
#[derive(Default)]
struct WholeBar {
    pus: usize,
    /// The PU being measured and the units of the PUs finished before it.
    current: Option<String>,
    begun: usize,
    finished: usize,
    last_total: usize,
}

impl WholeBar {
    /// The whole profile's (done, total) when `pu` has measured `done` of its `total` units.
    fn at(&mut self, pu: &str, done: usize, total: usize) -> (usize, usize) {
        if self.current.as_deref() != Some(pu) {
            self.finished += self.last_total;
            self.begun += 1;
            self.current = Some(pu.to_string());
        }
        self.last_total = total;
        let left = self.pus.saturating_sub(self.begun);
        (self.finished + done, self.finished + total * (1 + left))
    }
}

/// Whether some two PUs of `soc` may run at once (so their contention is worth measuring).
pub fn independent_pus(soc: &SocSpec) -> bool {
    let x = soc.exclusive();
    (0..x.len()).any(|i| (0..x.len()).any(|j| i != j && !x[i][j]))
}

#[cfg(test)]
mod tests {
    use super::{LAUNCH_AGAIN, LAUNCH_SUSPECT_US, WholeBar, settle_launch};

    /// One bar over every PU: the PUs not yet begun counted at the current PU's units.
    #[test]
    fn one_bar_for_the_whole_profile() {
        let mut bar = WholeBar { pus: 3, ..Default::default() };
        assert_eq!(bar.at("a", 0, 10), (0, 30));
        assert_eq!(bar.at("a", 10, 10), (10, 30));
        assert_eq!(bar.at("b", 4, 8), (14, 26));
        assert_eq!(bar.at("c", 8, 8), (26, 26));
    }

    /// A launch cost above the suspect line is measured again, the lowest kept, and one that
    /// stays above it is said; a plausible first one is measured once.
    #[test]
    fn an_implausible_launch_cost_is_measured_again_and_said() {
        let hi = LAUNCH_SUSPECT_US * 40.0;
        // (what each measurement gives, measurements taken, kept, said)
        let cases: [(&[f64], usize, f64, bool); 6] = [
            (&[3.0, hi], 1, 3.0, false),
            (&[f64::NAN, 5.0], 2, 5.0, false),
            (&[f64::NAN, f64::INFINITY, f64::NAN], LAUNCH_AGAIN + 1, 0.0, true),
            (&[hi, 4.0, hi], 2, 4.0, false),
            (&[hi, hi * 2.0, hi / 2.0, 1.0], LAUNCH_AGAIN + 1, hi / 2.0, true),
            (&[LAUNCH_SUSPECT_US, hi], 1, LAUNCH_SUSPECT_US, false),
        ];
        for (given, taken, kept, said) in cases {
            let mut k = 0;
            let (us, note) = settle_launch(|| {
                k += 1;
                Ok::<f64, ()>(given[k - 1])
            })
            .expect("measured");
            assert_eq!((k, us, note.is_some()), (taken, kept, said), "{given:?}");
        }
        let mut k = 0;
        let failed = settle_launch(|| {
            k += 1;
            if k == 1 { Ok(LAUNCH_SUSPECT_US * 2.0) } else { Err("stopped") }
        });
        assert_eq!(failed, Err("stopped"), "a failed measurement is the error");
    }
}
