//! A model outside a plan: its inputs, a session running it whole on one PU, every fused op
//! run alone, and what a session adds to an inference.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bident_backend::{Backend, PuSpec, SocSpec};
use bident_ir::{Extractor, FusedGraph, TensorId};
use bident_tensor::HostTensor;

use crate::pacing::{BLOCK, warm_up};
use crate::{Program, RunConfig, RuntimeError, Session};

/// Run every fused op of `g` on its own, in graph order, on one PU on the calling thread: each
/// extracted, compiled and run once, fed by the ops before it. `inputs` are in the order of
/// `g.inputs`. The check that the fused ops compose back into the whole model (tests, the
/// conformance run); an op whose output type differs from the inferred one is an error.
pub fn run_op_by_op(
    g: &FusedGraph,
    backend: &dyn Backend,
    pu: &PuSpec,
    inputs: Vec<HostTensor>,
) -> Result<Vec<HostTensor>, RuntimeError> {
    let ex = Extractor::new(g)?;
    let mut env: HashMap<TensorId, HostTensor> = g.inputs.iter().copied().zip(inputs).collect();
    // one session per op, each run once: none may keep a core spinning for the next
    let pu = &backend.quiet(pu);
    for (i, op) in g.ops.iter().enumerate() {
        let fail = |source| RuntimeError::Op {
            what: format!("op {i}"),
            name: op.name.clone(),
            pu: pu.name.clone(),
            source: Box::new(source),
        };
        let mut exe = backend.compile(&ex.extract(i as u32)?, pu).map_err(fail)?;
        let ins: Vec<&HostTensor> = op.inputs.iter().map(|t| &env[t]).collect();
        let said = format!("op {i} `{}`", op.name);
        let outs = bident_backend::deadline::guard_exe(exe.as_mut(), &pu.name, &said, |e| e.run(&ins)).map_err(fail)?;
        for (&t, o) in op.outputs.iter().zip(outs) {
            let want = g.tensor(t);
            if o.shape != want.shape || o.dtype != want.dtype {
                return Err(RuntimeError::OpOutput {
                    what: format!("op {i}"),
                    name: op.kind.clone(),
                    why: format!(
                        "the backend gives {}{:?} for `{}`, bident inferred {}{:?}",
                        o.dtype, o.shape, want.name, want.dtype, want.shape
                    ),
                });
            }
            env.insert(t, o);
        }
    }
    Ok(g.outputs.iter().map(|t| env[t].clone()).collect())
}

/// The model's inputs: pinned values as imported, else seeded random tensors.
pub fn model_inputs(g: &FusedGraph, seed: u64) -> Vec<Arc<HostTensor>> {
    g.inputs
        .iter()
        .enumerate()
        .map(|(k, &t)| {
            let t = g.tensor(t);
            Arc::new(match g.input_values.get(&t.name) {
                Some(v) => v.to_host(),
                None => HostTensor::seeded(t.dtype, t.shape.clone(), seed.wrapping_add(k as u64)),
            })
        })
        .collect()
}

/// What an inference through a [`Session`] costs beyond its backend calls where the program
/// uses PU `pu` alone (µs): handing the worker its job and the inputs, waking it, collecting its
/// outputs. Measured on `g` (a one-op probe) in `blocks` blocks of `BLOCK` runs, each after
/// the session's threads went idle and a `warm_up`: the median of each run's time less its
/// one task's (the backend call). A plan's prediction adds it once per inference (the search
/// reads it from the cost table).
///
/// The task's own time is not compared with calls of the model compiled apart: on a thread of
/// its own, started for the purpose, those ran slower than the worker's, and OpenVINO's pinned
/// PUs were priced at 0-2 µs where a session added 4-5 µs around the KAN INT8's one task.
pub fn launch_us(
    g: &FusedGraph,
    soc: &SocSpec,
    pu: usize,
    backend: Arc<dyn Backend>,
    blocks: usize,
) -> Result<f64, RuntimeError> {
    let spec = soc.pus.get(pu).ok_or_else(|| RuntimeError::Program(format!("no PU {pu} in `{}`", soc.name)))?;
    let session = whole(g, spec, &soc.name, &backend, &RunConfig::default())?;
    let inputs = model_inputs(g, 0);
    let mut beyond = vec![];
    // longer than a worker polls for its next job
    let idle = || std::thread::sleep(Duration::from_millis(1));
    let run = || session.run(std::slice::from_ref(&inputs));
    for _ in 0..blocks {
        idle();
        warm_up(RunConfig::default().warmup, || run().map(drop))?;
        for _ in 0..BLOCK {
            let inf = run()?;
            let ops: f64 = inf.spans.iter().map(|s| s.finish_us - s.start_us).sum();
            beyond.push((inf.total_us - ops).max(0.0));
        }
    }
    Ok(bident_stats::quantile(&mut beyond, 0.5))
}

/// A session running model `g` whole on `pu` (alone in a one-PU SoC).
pub(crate) fn whole(
    g: &FusedGraph,
    pu: &PuSpec,
    soc: &str,
    be: &Arc<dyn Backend>,
    cfg: &RunConfig,
) -> Result<Session, RuntimeError> {
    let one = SocSpec { name: soc.into(), backend: pu.backend.clone(), simulated: false, pus: vec![pu.clone()] };
    Session::load(Program::whole(g, &one, 0, g.reference_model()?)?, &one, be.clone(), cfg.op_timeout).map_err(|e| {
        match e {
            RuntimeError::Op { pu, source, .. } => {
                RuntimeError::Load { what: format!("whole model `{}`", g.name), pu, source }
            }
            e => e,
        }
    })
}
