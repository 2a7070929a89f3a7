//! Reductions: the same ONNX ops (opset 18 takes the axes as an input, as OpenVINO does).

use super::{A, Args, Converter, Registry};

pub(super) fn register(r: &mut Registry) {
    r.add(&["ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL2"], reduce);
}

/// `keep_dims` is `keepdims`; an empty axes list reduces nothing in OpenVINO (the identity),
/// all axes in ONNX.
fn reduce(c: &mut Converter, a: &Args) -> Result<(), String> {
    let (name, i) = (a.name, &a.i);
    a.need(2)?;
    let keep = i64::from(a.l.flag("keep_dims"));
    let outs = c.name_outputs(a.id);
    if c.ints_of(i[1]).is_some_and(|axes| axes.is_empty()) {
        c.node("Identity", name, &i[..1], &[&outs[0]], vec![]);
    } else {
        c.node(&a.l.ty, name, &i[..2], &[&outs[0]], vec![("keepdims", A::I(keep))]);
    }
    Ok(())
}
