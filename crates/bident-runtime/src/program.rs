//! What a session runs: tasks (one compiled sub-model each) on PUs, the order each PU runs
//! them in, and the tensor slots that connect them. Built from a plan, a concurrent plan or a
//! whole model, and checked before anything is compiled.

use bident_backend::{DType, SocSpec};
use bident_ir::{Extractor, FusedGraph};
use bident_search::Plan;
use bident_search::concurrent::ConcurrentPlan;

use crate::RuntimeError;

/// One compiled sub-model on one PU.
#[derive(Clone, Debug)]
pub struct Task {
    /// Which model (stream) the task belongs to.
    pub stream: usize,
    /// The fused ops it runs, in graph order (empty for a whole-model task).
    pub ops: Vec<u32>,
    pub name: String,
    /// Index into the SoC's PUs.
    pub pu: usize,
    /// Slots read, in the order of the sub-model's inputs, with their tensor names.
    pub inputs: Vec<usize>,
    pub input_names: Vec<String>,
    /// Slots written, in the order of the sub-model's outputs, with name and type.
    pub outputs: Vec<usize>,
    pub output_names: Vec<String>,
    pub output_types: Vec<(DType, Vec<u64>)>,
    /// What the plan predicted: start and finish (µs from the inference's start).
    pub predicted: (f64, f64),
}

impl Task {
    /// `op 3`, `ops 3..7` or `the whole model`, for messages.
    pub fn label(&self) -> String {
        match self.ops[..] {
            [] => "the whole model".into(),
            [op] => format!("op {op}"),
            [first, .., last] => format!("ops {first}..{last}"),
        }
    }
}

/// Tasks, per-PU queues and slots of one session.
#[derive(Clone, Debug)]
pub struct Program {
    pub tasks: Vec<Task>,
    /// Per PU (indexed like the SoC's PUs): its tasks in the order it runs them.
    pub queues: Vec<Vec<usize>>,
    pub slots: usize,
    /// Per stream: the model's name, its input slots (graph input order) and output slots.
    pub streams: Vec<Stream>,
    /// What the program was built from: `sequential`, `parallel`, `concurrent` or `whole`.
    pub schedule: String,
    pub predicted_us: f64,
}

#[derive(Clone, Debug)]
pub struct Stream {
    pub model: String,
    pub inputs: Vec<usize>,
    pub outputs: Vec<usize>,
}

/// A program and the ONNX bytes of each task (compiled at load, then dropped).
pub type Built = (Program, Vec<Vec<u8>>);

fn pu_index(soc: &SocSpec, name: &str, op: u32) -> Result<usize, RuntimeError> {
    soc.pus.iter().position(|p| p.name == name).ok_or_else(|| RuntimeError::UnknownPu {
        what: format!("op {op}"),
        pu: name.into(),
        soc: soc.name.clone(),
    })
}

/// Which planned ops run as one task: each op alone, or every run of neighbours in the plan's
/// order that it puts on one PU compiled as one sub-model, so the backend fuses across them and
/// keeps its own layouts between them, as it does for the whole model. The search counts on
/// the measured saving (`CostTable::segments`) under the same rule: in a parallel plan only
/// neighbours that overlap nothing else (same branch, or both in single-branch phases) join.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Grouping {
    PerOp,
    Merged,
}

/// One planned op, in plan order.
struct Planned {
    stream: usize,
    op: u32,
    pu: usize,
    /// May be compiled together with the planned op before it, when on the same PU.
    joins: bool,
    predicted: (f64, f64),
}

/// Tasks for `planned` (in plan order) with the ONNX bytes of each.
fn tasks_of(
    graphs: &[&FusedGraph],
    bases: &[usize],
    planned: &[Planned],
    grouping: Grouping,
) -> Result<(Vec<Task>, Vec<Vec<u8>>), RuntimeError> {
    let extractors = graphs.iter().map(|g| Extractor::new(g)).collect::<Result<Vec<_>, _>>()?;
    // an op joins its stream's last group when it may, that group is on its PU, and nothing
    // else was queued on that PU since
    let mut groups: Vec<Vec<&Planned>> = vec![];
    let mut open: Vec<Option<usize>> = vec![None; graphs.len()];
    let mut last_on_pu: std::collections::HashMap<usize, usize> = Default::default();
    for p in planned {
        let g = graphs[p.stream];
        if p.op as usize >= g.ops.len() {
            return Err(RuntimeError::Program(format!(
                "the plan names op {} of `{}`, which has {}",
                p.op,
                g.name,
                g.ops.len()
            )));
        }
        let target = open[p.stream].filter(|&k| {
            grouping == Grouping::Merged && p.joins && groups[k][0].pu == p.pu && last_on_pu.get(&p.pu) == Some(&k)
        });
        let k = match target {
            Some(k) => {
                groups[k].push(p);
                k
            }
            None => {
                groups.push(vec![p]);
                groups.len() - 1
            }
        };
        open[p.stream] = Some(k);
        last_on_pu.insert(p.pu, k);
    }
    let mut tasks = vec![];
    let mut bytes = vec![];
    for group in groups {
        let (first, last) = (group[0], group[group.len() - 1]);
        let (g, base) = (graphs[first.stream], bases[first.stream]);
        let ops: Vec<u32> = group.iter().map(|p| p.op).collect();
        let (onnx, ins, outs) = if let [op] = ops[..] {
            let o = &g.ops[op as usize];
            (extractors[first.stream].extract(op)?, o.inputs.clone(), o.outputs.clone())
        } else {
            extractors[first.stream].extract_group(&ops)?
        };
        let names = ops.iter().map(|&o| g.ops[o as usize].name.as_str()).collect::<Vec<_>>();
        let name = match names[..] {
            [one] => one.to_string(),
            _ => format!("{} .. {} ({} ops)", names[0], names[names.len() - 1], names.len()),
        };
        let slot = |t: &u32| base + *t as usize;
        let name_of = |t: &u32| g.tensor(*t).name.clone();
        tasks.push(Task {
            stream: first.stream,
            ops,
            name: if graphs.len() > 1 { format!("{}/{name}", g.name) } else { name },
            pu: first.pu,
            inputs: ins.iter().map(slot).collect(),
            input_names: ins.iter().map(name_of).collect(),
            outputs: outs.iter().map(slot).collect(),
            output_names: outs.iter().map(name_of).collect(),
            output_types: outs.iter().map(|&t| (g.tensor(t).dtype, g.tensor(t).shape.clone())).collect(),
            predicted: (first.predicted.0, last.predicted.1),
        });
        bytes.push(onnx);
    }
    Ok((tasks, bytes))
}

fn stream(g: &FusedGraph, base: usize) -> Stream {
    Stream {
        model: g.name.clone(),
        inputs: g.inputs.iter().map(|&t| base + t as usize).collect(),
        outputs: g.outputs.iter().map(|&t| base + t as usize).collect(),
    }
}

fn check_graph(g: &FusedGraph, want: &bident_artifact::ContentHash) -> Result<(), RuntimeError> {
    let h = g.content_hash()?;
    if &h != want {
        return Err(RuntimeError::Mismatch { plan: want.short(), graph: h.short() });
    }
    Ok(())
}

/// Model `g` whole as one task on PU `pu` (stream 0), fed and read under its graph's names.
fn whole_task(g: &FusedGraph, pu: usize, ops: Vec<u32>, predicted: (f64, f64)) -> Task {
    let s = stream(g, 0);
    let name_of = |t: &u32| g.tensor(*t).name.clone();
    Task {
        stream: 0,
        ops,
        name: g.name.clone(),
        pu,
        inputs: s.inputs,
        input_names: g.inputs.iter().map(name_of).collect(),
        outputs: s.outputs,
        output_names: g.outputs.iter().map(name_of).collect(),
        output_types: g.outputs.iter().map(|&t| (g.tensor(t).dtype, g.tensor(t).shape.clone())).collect(),
        predicted,
    }
}

impl Program {
    /// A single model's plan: each PU runs its tasks in the order of their predicted start.
    pub fn from_plan(g: &FusedGraph, plan: &Plan, soc: &SocSpec, grouping: Grouping) -> Result<Built, RuntimeError> {
        check_graph(g, &plan.graph)?;
        let planned = plan
            .steps
            .iter()
            .enumerate()
            .map(|(k, s)| {
                let joins = plan.joins_previous(k);
                Ok(Planned {
                    stream: 0,
                    op: s.op,
                    pu: pu_index(soc, &s.pu, s.op)?,
                    joins,
                    predicted: (s.start_us, s.finish_us),
                })
            })
            .collect::<Result<Vec<_>, RuntimeError>>()?;
        let (mut tasks, mut bytes) = tasks_of(&[g], &[0], &planned, grouping)?;
        // the whole model on one PU runs the model itself, as the baselines do (not its ops
        // extracted and put back together, which an engine may optimise differently, under
        // port names the source model need not have)
        if let [t] = &tasks[..]
            && t.ops.len() == g.ops.len()
        {
            tasks = vec![Task { name: t.name.clone(), ..whole_task(g, t.pu, t.ops.clone(), t.predicted) }];
            bytes = vec![g.reference_model()?];
        }
        let p =
            Self::assemble(tasks, soc, vec![stream(g, 0)], g.tensors.len(), plan.schedule.name(), plan.predicted_us)?;
        Ok((p, bytes))
    }

    /// Two models' concurrent plan: each PU runs its tasks in step order (A's before B's within
    /// a step). Two ops of one step on the same PU run one after the other on its worker: a
    /// single-threaded PU time-slices them anyway. A stream's op joins its previous one when
    /// both are on one PU and nothing of the other stream ran there between (the concurrent
    /// search's rule).
    pub fn from_concurrent(
        (ga, gb): (&FusedGraph, &FusedGraph),
        plan: &ConcurrentPlan,
        soc: &SocSpec,
        grouping: Grouping,
    ) -> Result<Built, RuntimeError> {
        check_graph(ga, &plan.models[0].1)?;
        check_graph(gb, &plan.models[1].1)?;
        let bases = [0, ga.tensors.len()];
        let mut planned = vec![];
        for s in &plan.steps {
            for (k, side) in [&s.a, &s.b].into_iter().enumerate() {
                let Some((op, pu)) = side else { continue };
                let predicted = (s.start_us, s.start_us + s.duration_us);
                planned.push(Planned { stream: k, op: *op, pu: pu_index(soc, pu, *op)?, joins: true, predicted });
            }
        }
        let (tasks, bytes) = tasks_of(&[ga, gb], &bases, &planned, grouping)?;
        let streams = vec![stream(ga, bases[0]), stream(gb, bases[1])];
        let p = Self::assemble(tasks, soc, streams, bases[1] + gb.tensors.len(), "concurrent", plan.predicted_us)?;
        Ok((p, bytes))
    }

    /// The whole model as one task on PU `pu` of `soc` (`bytes`: the model to compile).
    pub fn whole(g: &FusedGraph, soc: &SocSpec, pu: usize, bytes: Vec<u8>) -> Result<Built, RuntimeError> {
        let task = whole_task(g, pu, vec![], (0.0, 0.0));
        let p = Self::assemble(vec![task], soc, vec![stream(g, 0)], g.tensors.len(), "whole", 0.0)?;
        Ok((p, vec![bytes]))
    }

    fn assemble(
        mut tasks: Vec<Task>,
        soc: &SocSpec,
        streams: Vec<Stream>,
        slots: usize,
        schedule: &str,
        predicted_us: f64,
    ) -> Result<Self, RuntimeError> {
        // each PU in order of predicted start; ties keep the plan's (topological) order
        let mut order: Vec<usize> = (0..tasks.len()).collect();
        order.sort_by(|&x, &y| tasks[x].predicted.0.total_cmp(&tasks[y].predicted.0).then(x.cmp(&y)));
        let mut queues = vec![vec![]; soc.pus.len()];
        for &t in &order {
            queues[tasks[t].pu].push(t);
        }
        for t in &mut tasks {
            t.predicted = (t.predicted.0.max(0.0), t.predicted.1.max(t.predicted.0));
        }
        let p = Self { tasks, queues, slots, streams, schedule: schedule.into(), predicted_us };
        p.check()?;
        Ok(p)
    }

    /// Verifier: slots in range, one producer per slot, every read slot an input or produced,
    /// every output produced, and the per-PU orders run to the end without deadlock (each PU
    /// waits only for tensors some other PU can still produce).
    pub fn check(&self) -> Result<(), RuntimeError> {
        let bad = |m: String| Err(RuntimeError::Program(m));
        let mut producer = vec![None; self.slots];
        let mut available = vec![false; self.slots];
        for s in &self.streams {
            for &i in &s.inputs {
                if i >= self.slots {
                    return bad(format!("input slot {i} out of range"));
                }
                available[i] = true;
            }
        }
        for (k, t) in self.tasks.iter().enumerate() {
            if t.inputs.len() != t.input_names.len()
                || t.outputs.len() != t.output_names.len()
                || t.outputs.len() != t.output_types.len()
            {
                return bad(format!("task {k} `{}`: names and slots disagree", t.name));
            }
            for &o in &t.outputs {
                if o >= self.slots || available[o] {
                    return bad(format!("task {k} `{}` writes slot {o}, a graph input or out of range", t.name));
                }
                if let Some(p) = producer[o].replace(k) {
                    return bad(format!("slot {o} written by tasks {p} and {k}"));
                }
            }
        }
        for (k, t) in self.tasks.iter().enumerate() {
            if let Some(&i) = t.inputs.iter().find(|&&i| i >= self.slots || !(available[i] || producer[i].is_some())) {
                return bad(format!("task {k} `{}` reads slot {i}, which nothing produces", t.name));
            }
        }
        let mut head = vec![0; self.queues.len()];
        let mut left: usize = self.queues.iter().map(Vec::len).sum();
        if left != self.tasks.len() {
            return bad(format!("{} tasks, {left} queued", self.tasks.len()));
        }
        while left > 0 {
            let mut moved = false;
            for (pu, q) in self.queues.iter().enumerate() {
                while let Some(&t) = q.get(head[pu]) {
                    if !self.tasks[t].inputs.iter().all(|&i| available[i]) {
                        break;
                    }
                    self.tasks[t].outputs.iter().for_each(|&o| available[o] = true);
                    head[pu] += 1;
                    left -= 1;
                    moved = true;
                }
            }
            if !moved {
                let stuck: Vec<String> = (0..self.queues.len())
                    .filter_map(|pu| {
                        self.queues[pu].get(head[pu]).map(|&t| format!("`{}` on PU {pu}", self.tasks[t].name))
                    })
                    .collect();
                return bad(format!("the PUs' orders deadlock: {} wait for each other", stuck.join(", ")));
            }
        }
        for s in &self.streams {
            if let Some(&o) = s.outputs.iter().find(|&&o| o >= self.slots || !available[o]) {
                return bad(format!("output slot {o} of `{}` is never produced", s.model));
            }
        }
        Ok(())
    }
}
