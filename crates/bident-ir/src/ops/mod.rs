//! Op knowledge: for each `(domain, op_type)` the rules bident needs: output dtype and shape
//! inference, optional constant evaluation, and the op's role in fusion. One file per op family;
//! each family registers its ops in [`registry`].
//!
//! Opset differences are handled inside each rule (`Ctx::opset`), e.g. Unsqueeze's axes moving
//! from an attribute to an input at opset 13.

pub(crate) mod control;
mod elementwise;
mod nn;
mod reduce;
mod shape;
pub(crate) mod work;

use std::collections::HashMap;
use std::sync::OnceLock;

use bident_tensor::{DType, HostTensor};

use crate::consts;
use crate::proto::{AttributeProto, NodeProto};
pub use crate::work::OpClass;

/// Static type of a tensor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Fact {
    pub dtype: DType,
    pub shape: Vec<u64>,
}

impl Fact {
    pub fn new(dtype: DType, shape: Vec<u64>) -> Self {
        Self { dtype, shape }
    }
}

/// What a rule sees of one node.
pub(crate) struct Ctx<'a> {
    pub node: &'a NodeProto,
    pub opset: i64,
    /// Type of each input; `None` for an omitted optional input.
    pub inputs: Vec<Option<&'a Fact>>,
    /// Value of each input when it is a known constant.
    pub consts: Vec<Option<&'a HostTensor>>,
    /// Set by a rule that needed the value of an input that is not constant.
    pub missing_const: std::cell::Cell<Option<usize>>,
}

pub(crate) type Rule<T> = fn(&Ctx) -> Result<T, String>;

/// How an op takes part in fusion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// Heavy op that starts a fused group (Conv, MatMul, Gemm, ...).
    Anchor,
    /// May be absorbed after an anchor when its other operands are constants (bias, scale,
    /// BatchNorm parameters).
    Affine,
    /// Activation: absorbed after an anchor, ends the group.
    Activation,
    /// Stands alone.
    Plain,
}

pub(crate) struct OpDef {
    pub infer: Rule<Vec<Fact>>,
    pub eval: Option<Rule<Vec<HostTensor>>>,
    pub role: Role,
    pub class: OpClass,
}

pub(crate) struct Registry(HashMap<&'static str, OpDef>);

impl Registry {
    fn add(
        &mut self,
        ops: &[&'static str],
        (role, class): (Role, OpClass),
        infer: Rule<Vec<Fact>>,
        eval: Option<Rule<Vec<HostTensor>>>,
    ) {
        for op in ops {
            self.0.insert(op, OpDef { infer, eval, role, class });
        }
    }
}

/// The op registry (ONNX default domain only, so far).
pub(crate) fn registry() -> &'static Registry {
    static R: OnceLock<Registry> = OnceLock::new();
    R.get_or_init(|| {
        let mut r = Registry(HashMap::new());
        control::register(&mut r);
        elementwise::register(&mut r);
        nn::register(&mut r);
        reduce::register(&mut r);
        shape::register(&mut r);
        r
    })
}

pub(crate) fn lookup(domain: &str, op_type: &str) -> Option<&'static OpDef> {
    if domain.is_empty() || domain == "ai.onnx" { registry().0.get(op_type) } else { None }
}

// ---- helpers shared by the rule files ----

impl<'a> Ctx<'a> {
    pub fn attr(&self, name: &str) -> Option<&'a AttributeProto> {
        self.node.attribute.iter().find(|a| a.name() == name)
    }

    pub fn attr_i(&self, name: &str, default: i64) -> i64 {
        self.attr(name).and_then(|a| a.i).unwrap_or(default)
    }

    pub fn attr_ints(&self, name: &str) -> Option<Vec<i64>> {
        self.attr(name).map(|a| a.ints.clone())
    }

    pub fn attr_s(&self, name: &str) -> Option<String> {
        self.attr(name).and_then(|a| a.s.as_ref()).map(|s| String::from_utf8_lossy(s).into_owned())
    }

    /// Type of required input `i`.
    pub fn input(&self, i: usize) -> Result<&'a Fact, String> {
        self.inputs.get(i).copied().flatten().ok_or_else(|| format!("missing input {i}"))
    }

    pub fn has_input(&self, i: usize) -> bool {
        self.inputs.get(i).is_some_and(Option::is_some)
    }

    pub fn shape(&self, i: usize) -> Result<&'a [u64], String> {
        Ok(&self.input(i)?.shape)
    }

    pub fn dtype(&self, i: usize) -> Result<DType, String> {
        Ok(self.input(i)?.dtype)
    }

    fn required_const(&self, i: usize, what: &str) -> Result<&'a HostTensor, String> {
        self.const_at(i).ok_or_else(|| {
            self.missing_const.set(Some(i));
            format!("{what} (input {i}) must be a constant to infer shapes")
        })
    }

    /// Value of input `i` as integers (exact for integer tensors); it must be a constant.
    pub fn const_ints(&self, i: usize, what: &str) -> Result<Vec<i64>, String> {
        Ok(consts::to_i64(self.required_const(i, what)?))
    }

    pub fn const_f64(&self, i: usize, what: &str) -> Result<Vec<f64>, String> {
        Ok(consts::to_f64(self.required_const(i, what)?))
    }

    pub fn const_at(&self, i: usize) -> Option<&'a HostTensor> {
        self.consts.get(i).copied().flatten()
    }

    pub fn n_outputs(&self) -> usize {
        self.node.output.len()
    }
}

/// Inputs an op reads only for their type: it folds once its other inputs are constant.
pub(crate) fn type_only_inputs(op_type: &str) -> &'static [usize] {
    match op_type {
        "Shape" | "Size" => &[0],
        "CastLike" => &[1],
        _ => &[],
    }
}

/// Normalise a possibly negative axis against a rank.
pub(crate) fn axis(a: i64, rank: usize) -> Result<usize, String> {
    let r = rank as i64;
    let v = if a < 0 { a + r } else { a };
    if (0..r).contains(&v) { Ok(v as usize) } else { Err(format!("axis {a} out of range for rank {rank}")) }
}

/// Numpy-style broadcast of several shapes.
pub(crate) fn broadcast(shapes: &[&[u64]]) -> Result<Vec<u64>, String> {
    let rank = shapes.iter().map(|s| s.len()).max().unwrap_or(0);
    let mut out = vec![1u64; rank];
    for s in shapes {
        let off = rank - s.len();
        for (i, &d) in s.iter().enumerate() {
            let o = &mut out[off + i];
            if *o == 1 {
                *o = d;
            } else if d != 1 && d != *o {
                return Err(format!("shapes {shapes:?} do not broadcast"));
            }
        }
    }
    Ok(out)
}

/// Output of the same type as input 0, for every output.
pub(crate) fn same_as_input0(c: &Ctx) -> Result<Vec<Fact>, String> {
    let f = c.input(0)?.clone();
    Ok(vec![f; c.n_outputs().max(1)])
}

/// Product of dims, or an error when it overflows (dims may come straight from a file).
pub(crate) fn checked_numel(dims: &[u64]) -> Result<u64, String> {
    dims.iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| format!("element count of {dims:?} overflows"))
}
