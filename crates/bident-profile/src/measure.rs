//! Measuring ops on a SoC's PUs through a backend (behind the `measure` feature): the cost
//! table's op and segment columns, and the backend's own fusion of a whole model.

use bident_backend::{Backend, BackendError, PuSpec, SocSpec, deadline};
use bident_ir::{BackendLayer, Extractor, FusedGraph, OpId, TensorId};
use bident_tensor::HostTensor;

use crate::timing::{BATCH, Batch, Clock, profile_pu};
use crate::*;

/// The backend's own grouping of `g`'s lowered model: compile it whole on `pu` with per-layer
/// profiling, run it once, and return the layers with the nodes fused into each (the input of
/// backend-true fusion, `bident_ir::Fusion::Backend`).
pub fn backend_layers(backend: &dyn Backend, g: &FusedGraph, pu: &PuSpec) -> Result<Vec<BackendLayer>, ProfileError> {
    let fail = |source| ProfileError::Reference { pu: pu.name.clone(), source };
    let mut exe = backend.compile_profiled(&g.lowered_model()?, pu).map_err(fail)?;
    let inputs = g.example_inputs(0);
    let named: Vec<(&str, &HostTensor)> = g.inputs.iter().map(|&t| g.tensor(t).name.as_str()).zip(&inputs).collect();
    let fed = bident_backend::feed_order(exe.inputs(), &named).ok_or_else(|| {
        fail(BackendError::BadInput {
            pu: pu.name.clone(),
            index: 0,
            name: exe.inputs().iter().map(|p| p.name.as_str()).collect::<Vec<_>>().join(", "),
            reason: format!("the compiled model's inputs do not match the graph's {}", inputs.len()),
        })
    })?;
    deadline::guard_exe(exe.as_mut(), &pu.name, "the model's profiled run", |e| e.run(&fed)).map_err(fail)?;
    Ok(exe
        .layers()
        .map_err(fail)?
        .into_iter()
        .map(|l| BackendLayer { name: l.name, layer_type: l.layer_type, fused: l.fused })
        .collect())
}

/// Progress of a profiling run, for the caller to display.
pub struct Progress<'a> {
    pub pu: &'a str,
    /// What is happening: `measuring` (`done` of `total` units compiled and timed), `cached`
    /// (`done` of `total` entries from the cache), `spot` or `stale` (`note` says what the spot
    /// check of the PU's cached entries found; `stale` when its sample grew), `same` (`done` of
    /// `total` units copied from a unit with the same timing identity), `slow` (`done` of
    /// `total` rounds measured in a slow state) or `again` (entries measured in a slow state
    /// measured once more, `done` of `total` faster; [`measure_segments`] only).
    pub phase: &'static str,
    pub done: usize,
    pub total: usize,
    pub note: Option<String>,
}

/// Profile every op of `g` on every PU of `soc`.
///
/// Protocol, per PU in turn (never two PUs at once, so they do not disturb each other): on a
/// thread pinned to the PU's cores, compile every op, then run `warmup + runs` rounds, each
/// round executing every op once in the graph's order with seeded inputs. Timing ops in rounds
/// rather than each op back to back keeps caches and the backend's threads in the state the
/// runtime meets them in.
///
/// With a `cache`, an (op, PU) pair measured before under the same conditions (see
/// [`cache::CostCache::key`]) is taken from it and not measured; what is measured is stored.
pub fn profile(
    g: &FusedGraph,
    soc: &SocSpec,
    backend: &dyn Backend,
    cfg: &ProfileConfig,
    cache: Option<&cache::CostCache>,
    progress: &mut dyn FnMut(Progress),
) -> Result<CostTable, ProfileError> {
    let described = describe(backend, soc)?;
    // the units timed: every op, then every segment compiled together, on every PU
    let ex = Extractor::new(g)?;
    let mut units: Vec<Unit> = Vec::with_capacity(g.ops.len() + cfg.segments.len());
    for (i, op) in g.ops.iter().enumerate() {
        let model = ex.extract(i as OpId)?;
        units.push(Unit {
            what: format!("op {i} `{}` ({})", op.name, op.kind),
            identity: ContentHash::of(&bident_ir::timing_identity(&model)?),
            model,
            inputs: seeded_inputs(g, &op.inputs, cfg.seed, i),
            whole: g.ops.len() == 1,
            split: true,
        });
    }
    for (k, ops) in cfg.segments.iter().enumerate() {
        units.push(Unit::group(g, &ex, ops, cfg.seed, k)?);
    }
    let m = Measuring { backend, soc, units: &units, cfg, cache, again: false };
    // a whole-only PU is measured whole (by refine), never op by op
    let mut columns = measure_units(&m, &|i, j| !soc.pus[j].whole_only || units[i].whole, progress)?;
    let mut take = |i: usize| -> Vec<Result<Cost, String>> {
        columns.iter_mut().map(|col| col[i].take().unwrap_or_else(|| Err("not measured".into()))).collect()
    };
    let mut ops = Vec::with_capacity(g.ops.len());
    for i in 0..g.ops.len() {
        ops.push(OpCosts::from_results(g, i as OpId, soc, take(i).into_iter())?);
    }
    let segments = cfg
        .segments
        .iter()
        .enumerate()
        .map(|(k, ops)| SegmentCost {
            ops: ops.clone(),
            per_pu: take(g.ops.len() + k).into_iter().map(Result::ok).collect(),
        })
        .collect();
    Ok(CostTable {
        model: g.name.clone(),
        graph: g.content_hash()?,
        soc: soc.clone(),
        simulated: soc.simulated,
        backend: described,
        measured_on: host_description(),
        warmup: cfg.warmup,
        io_every_call: vec![true; soc.pus.len()],
        launch_us: vec![],
        segments,
        components: soc
            .pus
            .iter()
            .map(|pu| {
                format!(
                    "{}; dispatch = infer minus the sum of the backend's per-layer times (PERF_COUNT), exec = \
                     that sum (where the backend gives no layer times, and for ops compiled together: dispatch 0, \
                     exec = infer)",
                    backend.timing_meaning(pu)
                )
            })
            .collect(),
        contention: None,
        ops,
    })
}

/// What measured (or runs) `soc`'s PUs: each distinct backend's name and version in the order of
/// the PUs, e.g. `openvino 2026.4.1 + onnxruntime 1.32.0`; a PU naming a backend that `backend`
/// does not have is an error.
pub fn describe(backend: &dyn Backend, soc: &SocSpec) -> Result<String, ProfileError> {
    bident_backend::describe(backend, soc).map_err(|(pu, source)| ProfileError::WrongBackend {
        soc: soc.name.clone(),
        pu,
        source: Box::new(source),
    })
}

/// The name and version of `pu`'s own backend (adding a backend to a SoC keeps the other PUs'
/// cached costs).
fn backend_id(backend: &dyn Backend, soc: &SocSpec, pu: &PuSpec) -> Result<String, ProfileError> {
    backend.backend_id(&pu.backend).map_err(|source| ProfileError::WrongBackend {
        soc: soc.name.clone(),
        pu: pu.name.clone(),
        source: Box::new(source),
    })
}

/// A sub-model to time and the inputs to time it with.
struct Unit {
    /// What the unit is, for messages: ``op 3 `conv` (Conv)``, `the whole model`, ``4 ops from op 2 `mul` ``.
    what: String,
    model: Vec<u8>,
    /// What its time depends on ([`bident_ir::timing_identity`]): units with one identity and
    /// one input signature are timed once, and share a cache entry across models.
    identity: ContentHash,
    inputs: Vec<HostTensor>,
    /// Every op of the graph: timed on its PU as configured, as a session of the whole model
    /// alone runs it; any other unit on the PU made [`Backend::quiet`], as a multi-task
    /// session's tasks are (units are timed in rounds, each beside the others).
    whole: bool,
    /// One op: its call is split into dispatch and execution ([`timing::Batch`]).
    split: bool,
}

impl Unit {
    /// Segment `k`: `ops` compiled together, with inputs seeded after every op's.
    fn group(g: &FusedGraph, ex: &Extractor, ops: &[OpId], seed: u64, k: usize) -> Result<Self, ProfileError> {
        let (model, ins, _) = ex.extract_group(ops)?;
        let what = match ops {
            [one] => format!("op {one} `{}`", g.ops[*one as usize].name),
            _ if ops.len() == g.ops.len() => "the whole model".into(),
            _ => format!("{} ops from op {} `{}`", ops.len(), ops[0], g.ops[ops[0] as usize].name),
        };
        let identity = ContentHash::of(&bident_ir::timing_identity(&model)?);
        let inputs = seeded_inputs(g, &ins, seed, g.ops.len() + k);
        Ok(Unit { what, identity, model, inputs, whole: ops.len() == g.ops.len(), split: ops.len() == 1 })
    }
}

fn seeded_inputs(g: &FusedGraph, ins: &[TensorId], seed: u64, unit: usize) -> Vec<HostTensor> {
    ins.iter()
        .enumerate()
        .map(|(k, &t)| {
            let t = g.tensor(t);
            HostTensor::seeded(t.dtype, t.shape.clone(), seed ^ ((unit as u64) << 16) ^ k as u64)
        })
        .collect()
}

/// A unit's result on a PU: a cost or why not.
pub(crate) type Entry = Result<Cost, String>;

/// One PU's results per unit, None where not asked.
type Column = Vec<Option<Entry>>;

/// A PU's measurement: its entries and how many measured rounds ran in a slow state.
pub(crate) type Timed = (Vec<Entry>, usize);

/// How unit `i` is compiled on `pu` ([`Unit::whole`]): the PU as configured or its quiet variant.
fn unit_spec<'a>(units: &[Unit], i: usize, pu: &'a PuSpec, quiet: &'a PuSpec) -> &'a PuSpec {
    if units[i].whole { pu } else { quiet }
}

/// What a unit's cache key on one PU is made of besides the unit: the PU, its quiet variant, its
/// backend and the machine.
struct PuKey<'a> {
    pu: &'a PuSpec,
    quiet: PuSpec,
    backend: String,
    machine: &'a str,
}

impl<'a> PuKey<'a> {
    fn new(backend: &dyn Backend, soc: &SocSpec, pu: &'a PuSpec, machine: &'a str) -> Result<Self, ProfileError> {
        Ok(Self { pu, quiet: backend.quiet(pu), backend: backend_id(backend, soc, pu)?, machine })
    }

    /// Unit `i`'s cache key on the PU, None where it has none.
    fn of(&self, units: &[Unit], i: usize, cfg: &ProfileConfig) -> Option<ContentHash> {
        let spec = unit_spec(units, i, self.pu, &self.quiet);
        cache::CostCache::key(units[i].identity, &units[i].inputs, spec, &self.backend, self.machine, cfg)
    }
}

/// Time `todo` (units) on `pu`, the units compiled alike together (one group unless the PU has
/// a quiet variant): per unit its result and whether a round of it ran in a slow state of the
/// PU's cores (the wait for their fast state ran out).
///
/// A group is compiled, timed and dropped in batches of [`BATCH`] units in the graph's order:
/// memory grows with the largest batch, not with the model's op count (every unit of a 659-op
/// CRNN compiled at once held 5.5 GB).
fn time_units(
    backend: &dyn Backend,
    pu: &PuSpec,
    units: &[Unit],
    todo: &[usize],
    cfg: &ProfileConfig,
    progress: &mut dyn FnMut(Progress),
) -> Result<Vec<(usize, Entry, bool)>, ProfileError> {
    let quiet = backend.quiet(pu);
    let (reps, copies) = same_as(units, todo);
    let (whole, rest): (Vec<usize>, Vec<usize>) = reps.iter().copied().partition(|&i| units[i].whole && quiet != *pu);
    let mut out = Vec::with_capacity(todo.len());
    let mut clock = Clock::new(reps.len());
    for group in [rest, whole].iter().filter(|g| !g.is_empty()) {
        let spec = unit_spec(units, group[0], pu, &quiet);
        let mut batches = group.chunks(BATCH);
        while let Some(batch) = batches.next() {
            let models: Vec<&[u8]> = batch.iter().map(|&i| units[i].model.as_slice()).collect();
            let inputs: Vec<&[HostTensor]> = batch.iter().map(|&i| units[i].inputs.as_slice()).collect();
            let what: Vec<&str> = batch.iter().map(|&i| units[i].what.as_str()).collect();
            let split: Vec<bool> = batch.iter().map(|&i| units[i].split).collect();
            let batch_of = Batch { models: &models, inputs: &inputs, what: &what, split: &split };
            match profile_pu(backend, spec, batch_of, cfg, &mut clock, progress)? {
                Ok((measured, slow)) => out.extend(batch.iter().zip(measured).map(|(&i, r)| (i, r, slow > 0))),
                // the PU itself is unusable (e.g. cannot pin): every unit fails there with that
                // reason, and nothing is cached
                Err(reason) => {
                    out.extend(batch.iter().chain(batches.by_ref().flatten()).map(|&i| (i, Err(reason.clone()), false)))
                }
            }
        }
    }
    clock.say_slow(&pu.name, progress);
    if !copies.is_empty() {
        let note = format!(
            "{} of {} units have the ops, attributes and shapes of another: timed once",
            copies.len(),
            todo.len()
        );
        progress(Progress { pu: &pu.name, phase: "same", done: copies.len(), total: todo.len(), note: Some(note) });
    }
    for (copy, of) in copies {
        let measured = out.iter().find(|(i, ..)| *i == of).map(|(_, r, slow)| (r.clone(), *slow));
        out.extend(measured.map(|(r, slow)| (copy, r, slow)));
    }
    Ok(out)
}

/// `todo` split into the units to time and the copies of one of them (copy, the unit timed):
/// units with one timing identity and input signature ([`Unit::identity`]) cost the same.
fn same_as(units: &[Unit], todo: &[usize]) -> (Vec<usize>, Vec<(usize, usize)>) {
    let mut first: std::collections::HashMap<_, usize> = std::collections::HashMap::new();
    let (mut reps, mut copies) = (vec![], vec![]);
    for &i in todo {
        let inputs: Vec<_> = units[i].inputs.iter().map(|t| (t.dtype, t.shape.as_slice())).collect();
        match first.entry((units[i].identity, inputs, units[i].whole)) {
            std::collections::hash_map::Entry::Occupied(e) => copies.push((i, *e.get())),
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(i);
                reps.push(i);
            }
        }
    }
    (reps, copies)
}

/// What measuring units on every PU of a SoC shares: the units, the protocol and the cache.
struct Measuring<'a> {
    backend: &'a dyn Backend,
    soc: &'a SocSpec,
    units: &'a [Unit],
    cfg: &'a ProfileConfig,
    cache: Option<&'a cache::CostCache>,
    /// A unit measured in a slow state of its PU's cores, and a whole model, is measured once
    /// more after every PU's turn, and the faster of the two kept ([`measure_again`]).
    again: bool,
}

/// Time the units on the PUs of the SoC (`on(unit, pu)`: whether to), PU by PU, through the
/// cache: `columns[pu][unit]`, None where not asked.
fn measure_units(
    m: &Measuring,
    on: &dyn Fn(usize, usize) -> bool,
    progress: &mut dyn FnMut(Progress),
) -> Result<Vec<Column>, ProfileError> {
    let machine = host_description();
    let mut columns = Vec::with_capacity(m.soc.pus.len());
    let mut second: Vec<SecondLook> = vec![];
    for (j, pu) in m.soc.pus.iter().enumerate() {
        let asked: Vec<usize> = (0..m.units.len()).filter(|&i| on(i, j)).collect();
        let key = PuKey::new(m.backend, m.soc, pu, &machine)?;
        let mut run = PuRun { m, key, column: vec![None; m.units.len()], again: vec![] };
        let cached = run.take_cached(&asked, progress);
        let todo: Vec<usize> = asked.iter().copied().filter(|&i| run.column[i].is_none()).collect();
        run.spot_check(todo, cached, progress)?;
        columns.push(run.column);
        if !run.again.is_empty() {
            second.push(SecondLook { pu: j, key: run.key, units: run.again });
        }
    }
    measure_again(m, second, &mut columns, progress)?;
    Ok(columns)
}

/// One PU's turn in [`measure_units`].
struct PuRun<'a, 'm> {
    m: &'m Measuring<'a>,
    key: PuKey<'m>,
    column: Column,
    /// Units to measure once more ([`SecondLook`]), with whether they ran in a slow state.
    again: Vec<(usize, bool)>,
}

impl PuRun<'_, '_> {
    /// Take `asked`'s cached entries: each unit's index and entry.
    fn take_cached(&mut self, asked: &[usize], progress: &mut dyn FnMut(Progress)) -> Vec<(usize, cache::CachedCost)> {
        let Some(c) = self.m.cache else { return vec![] };
        let mut cached = vec![];
        for &i in asked {
            if let Some(entry) = self.key.of(self.m.units, i, self.m.cfg).and_then(|k| c.get(k)) {
                self.column[i] = Some(entry.result.clone());
                cached.push((i, entry));
            }
        }
        let pu = &self.key.pu.name;
        progress(Progress { pu, phase: "cached", done: cached.len(), total: asked.len(), note: None });
        cached
    }

    /// Measure `todo` with the spot check's first sample of the `cached` entries, and grow the
    /// sample while it says the cache was slower ([`cache::spot_more`]); say what it found.
    fn spot_check(
        &mut self,
        todo: Vec<usize>,
        cached: Vec<(usize, cache::CachedCost)>,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<(), ProfileError> {
        let (units, cfg) = (self.m.units, self.m.cfg);
        let checkable: Vec<(usize, ContentHash)> = cached
            .iter()
            .filter(|(_, e)| e.result.is_ok())
            .filter_map(|(i, _)| Some((*i, self.key.of(units, *i, cfg)?)))
            .collect();
        let order = cache::spot_order(checkable);
        let (mut done, mut rounds, mut pairs) = (cfg.recheck.min(order.len()), vec![], vec![]);
        let mut round = self.time([todo.as_slice(), &order[..done]].concat(), &cached, progress)?;
        while let Some(more) = cache::spot_more(&round, done, order.len() - done, cfg.drift) {
            rounds.push(done);
            pairs.append(&mut round);
            round = self.time(order[done..done + more].to_vec(), &cached, progress)?;
            done += more;
        }
        pairs.append(&mut round);
        if done == 0 {
            return Ok(());
        }
        let grew = !rounds.is_empty();
        let note = spot_note(&pairs, (done, order.len()), grew, cached.iter().map(|(_, e)| e.measured), cfg.drift);
        let pu = &self.key.pu.name;
        progress(Progress {
            pu,
            phase: if grew { "stale" } else { "spot" },
            done,
            total: order.len(),
            note: Some(note),
        });
        Ok(())
    }

    /// Time `todo` on the PU and store what it measured; a unit among `cached` keeps the faster
    /// of its two figures. Returns each cached unit's (cached, now) figures.
    fn time(
        &mut self,
        todo: Vec<usize>,
        cached: &[(usize, cache::CachedCost)],
        progress: &mut dyn FnMut(Progress),
    ) -> Result<Vec<(f64, f64)>, ProfileError> {
        let (m, pu) = (self.m, self.key.pu);
        let (mut pairs, mut stored) = (vec![], std::collections::HashSet::new());
        for (i, r, slow) in time_units(m.backend, pu, m.units, &todo, m.cfg, progress)? {
            match &r {
                Ok(c) => tracing::debug!(
                    "profile: {} on {}: {:.1} µs ({} runs{})",
                    m.units[i].what,
                    pu.name,
                    c.weight_us(),
                    c.runs,
                    if slow { ", in a slow state" } else { "" }
                ),
                Err(e) => tracing::debug!("profile: {} on {}: {e}", m.units[i].what, pu.name),
            }
            if m.again && (slow || m.units[i].whole) {
                match self.again.iter_mut().find(|(u, _)| *u == i) {
                    Some((_, was_slow)) => *was_slow |= slow,
                    None => self.again.push((i, slow)),
                }
            }
            let was =
                cached.iter().find(|(u, _)| *u == i).and_then(|(_, e)| e.result.as_ref().ok()).map(Cost::weight_us);
            let now = r.as_ref().ok().map(Cost::weight_us);
            if let (Some(was), Some(now)) = (was, now) {
                pairs.push((was, now));
                if now >= was {
                    continue;
                }
            }
            // running out of time says how long the limit was, not what the op costs; a copy of
            // a unit timed once ([`same_as`]) has that unit's key, stored once
            let timed_out = r.as_ref().is_err_and(|e| deadline::is_timed_out(e));
            if let (Some(c), Some(k), false) = (m.cache, self.key.of(m.units, i, m.cfg), timed_out)
                && stored.insert(k)
            {
                c.put(k, &r);
            }
            self.column[i] = Some(r);
        }
        Ok(pairs)
    }
}

/// What a PU's spot check found, for the log: how many of its cached entries were re-timed,
/// by how much they moved, how old they were, and what was kept.
fn spot_note(
    pairs: &[(f64, f64)],
    (done, of): (usize, usize),
    grew: bool,
    measured: impl Iterator<Item = cache::Conditions>,
    drift: f64,
) -> String {
    let oldest =
        measured.min_by_key(|c| c.at_unix_s).map_or(String::new(), |c| format!(" (the oldest {})", c.describe()));
    let faster = pairs.iter().filter(|(was, now)| now < was).count();
    let by = cache::spot_move(pairs).map_or(String::new(), |m| format!("median {:+.0}%, ", m * 100.0));
    let verdict = match cache::spot_move(pairs) {
        _ if grew && done == of => {
            "the cache was measured in a slower state: every entry re-timed, the faster figures kept"
        }
        _ if grew => {
            "the cache was measured in a slower state: re-timed until the sample held, the faster figures kept"
        }
        Some(m) if m > drift => "the machine is slower now: the cache holds",
        _ => "within the noise: the cache holds, the faster figures kept",
    };
    format!("spot check re-timed {done} of {of} cached entries{oldest}: {by}{faster} faster; {verdict}")
}

/// With [`Measuring::again`], one PU's units to measure once more ([`measure_again`]):
/// those measured (not taken from the cache, or re-timed by the drift check) in a slow state of
/// its cores, and its whole models measured so. A whole model thus gets the faster of two
/// measurements where other segments get one: the search leans a little towards whole models.
struct SecondLook<'a> {
    /// The PU's index in the SoC.
    pu: usize,
    key: PuKey<'a>,
    /// Each unit, with whether it ran in a slow state.
    units: Vec<(usize, bool)>,
}

/// [`measure_units`]' second look: each PU's units measured in a slow state of its cores, and
/// its whole models ([`SecondLook`]), measured once more now that every PU has had its turn
/// (seconds later: a slow state lasts from milliseconds to minutes), the faster of the two kept
/// and cached. The
/// profile prices the machine's fast state, and a slow state only ever slows a run down: in one
/// `cores` eval (stop 49) refine priced SNN-VGG9 INT8 whole on core 0 at 151.4 µs, measured in
/// a slow state, and the run then measured it at 80.5 µs. A whole model is what a run gives
/// way to, and its price is then the plan's prediction; some have slow modes of their own that
/// the speed probe does not see: in the same eval refine priced Hyena FP16 whole on `CPU.bf16`
/// at 118.9 µs with every core fast, and both runs that gave way to it measured it at 54-55 µs
/// (from Python the model alternated between 82-89 µs and 124-167 µs from one round of runs to
/// the next).
fn measure_again(
    m: &Measuring,
    second: Vec<SecondLook>,
    columns: &mut [Column],
    progress: &mut dyn FnMut(Progress),
) -> Result<(), ProfileError> {
    let (backend, units, cfg, cache) = (m.backend, m.units, m.cfg, m.cache);
    for SecondLook { pu: j, key: pu_key, units: again } in second {
        let (pu, column) = (pu_key.pu, &mut columns[j]);
        let todo: Vec<usize> = again.iter().map(|&(i, _)| i).collect();
        let slow = again.iter().filter(|&&(_, slow)| slow).count();
        let (mut faster, mut gain) = (0, vec![]);
        for (i, r, _) in time_units(backend, pu, units, &todo, cfg, progress)? {
            let was = column[i].as_ref().and_then(|r| r.as_ref().ok()).map(Cost::weight_us);
            let now = r.as_ref().ok().map(Cost::weight_us);
            // kept: the faster, or the one that worked
            if now.is_some_and(|n| was.is_none_or(|w| n < w)) {
                faster += 1;
                gain.extend(now.zip(was).map(|(n, w)| 1.0 - n / w));
                if let (Some(c), Some(k)) = (cache, pu_key.of(units, i, cfg)) {
                    c.put(k, &r);
                }
                column[i] = Some(r);
            }
        }
        let by = (!gain.is_empty()).then(|| format!(", by {:.0}% (median)", quantile(&mut gain, 0.5) * 100.0));
        progress(Progress {
            pu: &pu.name,
            phase: "again",
            done: faster,
            total: todo.len(),
            note: Some(format!(
                "{}, measured again: {faster} of {} faster{}",
                match (slow, todo.len() - slow) {
                    (_, 0) => "entries measured in a slow state of its cores".to_string(),
                    (0, _) => "the whole model".to_string(),
                    (slow, _) => format!("the whole model and entries measured in a slow state of its cores ({slow})"),
                },
                todo.len(),
                by.unwrap_or_default()
            )),
        });
    }
    Ok(())
}

/// Measure runs of ops compiled together, each on one PU (`wanted`: ops in execution order,
/// PU index), under the profile's protocol and cache: what a plan's segments really cost. A
/// segment measured in a slow state of its PU's cores, and the whole model, is measured once
/// more after the others (`measure_again`).
pub fn measure_segments(
    g: &FusedGraph,
    soc: &SocSpec,
    backend: &dyn Backend,
    cfg: &ProfileConfig,
    cache: Option<&cache::CostCache>,
    wanted: &[(Vec<OpId>, usize)],
    progress: &mut dyn FnMut(Progress),
) -> Result<Vec<SegmentCost>, ProfileError> {
    let ex = Extractor::new(g)?;
    let mut units = Vec::with_capacity(wanted.len());
    for (k, (ops, _)) in wanted.iter().enumerate() {
        units.push(Unit::group(g, &ex, ops, cfg.seed, k)?);
    }
    let m = Measuring { backend, soc, units: &units, cfg, cache, again: true };
    let columns = measure_units(&m, &|i, j| wanted[i].1 == j, progress)?;
    Ok(wanted
        .iter()
        .enumerate()
        .map(|(k, (ops, _))| SegmentCost {
            ops: ops.clone(),
            per_pu: columns.iter().map(|col| col[k].clone().and_then(Result::ok)).collect(),
        })
        .collect())
}
