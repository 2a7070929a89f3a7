//! `RuntimeError`: every way loading, running or measuring a plan fails.

use bident_backend::BackendError;

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("plan is for graph {plan} but the fused graph is {graph}; rerun the search")]
    Mismatch { plan: String, graph: String },
    #[error("plan maps {what} to PU `{pu}`, which SoC `{soc}` does not have")]
    UnknownPu { what: String, pu: String, soc: String },
    #[error("the plan cannot be executed: {0}")]
    Program(String),
    #[error("{what} `{name}` on PU `{pu}`")]
    Op {
        what: String,
        name: String,
        pu: String,
        #[source]
        source: Box<BackendError>,
    },
    #[error("{what} on PU `{pu}`")]
    Load {
        what: String,
        pu: String,
        #[source]
        source: Box<BackendError>,
    },
    #[error("PU `{pu}`: worker {why}")]
    Worker { pu: String, why: String },
    #[error("inference abandoned: {0}")]
    Timeout(String),
    #[error("the session stopped after an earlier fault ({0}); load it again")]
    Broken(String),
    #[error("inputs: {0}")]
    Inputs(String),
    #[error("plan has no best single PU (every PU lacks some op)")]
    NoBaseline,
    #[error("outputs differ from the monolithic run: {0}")]
    Outputs(String),
    #[error("{what} `{name}`: {why}")]
    OpOutput { what: String, name: String, why: String },
    #[error(transparent)]
    Ir(#[from] bident_ir::IrError),
}

impl RuntimeError {
    /// The PU a fault is on, when it is one PU's (for re-planning without it).
    pub fn faulty_pu(&self) -> Option<&str> {
        match self {
            RuntimeError::Op { pu, .. } | RuntimeError::Load { pu, .. } => Some(pu),
            RuntimeError::Worker { pu, .. } if pu != "?" => Some(pu),
            _ => None,
        }
    }
}

/// An error and its causes on one line.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(s) = next {
        out.push_str(": ");
        out.push_str(&s.to_string());
        next = s.source();
    }
    out
}
