//! bident-runtime: executes plans on real PUs, checks their outputs against the whole model run
//! monolithically, and measures both beside the baseline a user would otherwise pick.
//!
//! [`Program`] is what a plan asks for (tasks, per-PU order, tensor slots), checked before
//! anything is compiled; [`Session`] is a program loaded on its PUs (one pinned worker per PU,
//! every sub-model compiled at load) that runs inferences as dataflow; [`run`] and
//! [`run_concurrent`] measure a plan and write the [`RunReport`]; `trace` draws what ran where.
//!
//! Owns the `RunReport` artifact. Written against `bident_backend::Backend` only.
//!
//! Inside, besides the public modules: `report` (the artifact and [`RunConfig`]), `measure` (the
//! measurement's turns and its figures), `baselines` (what a plan is measured beside), `pacing`
//! (when a block runs), `compare` (the plan against its alternatives, block by block), `outputs`
//! (tolerances and output checks), `whole` (a model outside a plan), `error`.

pub mod drift;
pub mod program;
pub mod serve;
pub mod session;
pub mod trace;

mod baselines;
mod compare;
mod error;
mod measure;
mod outputs;
mod pacing;
mod report;
mod whole;

pub use baselines::{default_spec, reference_pu};
pub use compare::{FAST_BLOCKS_MIN, consistently_faster, faster_blocks};
pub use error::{RuntimeError, error_chain};
pub use measure::{TaskTimes, run, run_concurrent, task_times};
pub use outputs::check_plan_outputs;
pub use program::{Grouping, Program, Task};
pub use report::{BackendDefault, OpTiming, RunConfig, RunReport, WholeRun, input_hash};
pub use serve::{MOVE_MARGIN, Outcome, Planner, ServeConfig, Server, Switch, Via, worth_moving};
pub use session::{Inference, Session, Span};
pub use whole::{launch_us, model_inputs, run_op_by_op};
