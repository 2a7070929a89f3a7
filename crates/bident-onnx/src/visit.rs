//! One walk over every tensor a model holds: what decides whether a model names a file (external
//! data may sit in any of them, not only the main graph's initializers).

use crate::{AttributeProto, GraphProto, ModelProto, TensorProto};

/// Call `f` on every tensor of the model: initializers, sparse initializers and attribute
/// tensors of the main graph, of every subgraph (If/Loop/Scan bodies, at any depth), of the
/// model's functions and of its training graphs. Stops at the first error.
pub fn tensors_mut<E>(model: &mut ModelProto, f: &mut dyn FnMut(&mut TensorProto) -> Result<(), E>) -> Result<(), E> {
    if let Some(g) = model.graph.as_mut() {
        graph(g, f)?;
    }
    for func in &mut model.functions {
        for n in &mut func.node {
            n.attribute.iter_mut().try_for_each(|a| attribute(a, f))?;
        }
        func.attribute_proto.iter_mut().try_for_each(|a| attribute(a, f))?;
    }
    for t in &mut model.training_info {
        for g in t.initialization.iter_mut().chain(t.algorithm.iter_mut()) {
            graph(g, f)?;
        }
    }
    Ok(())
}

/// True when some tensor of the model keeps its data in a file (`data_location: EXTERNAL`, or
/// any `external_data` entry).
pub fn names_a_file(model: &mut ModelProto) -> bool {
    let external = crate::tensor_proto::DataLocation::External as i32;
    tensors_mut(model, &mut |t| {
        if t.data_location == Some(external) || !t.external_data.is_empty() { Err(()) } else { Ok(()) }
    })
    .is_err()
}

fn graph<E>(g: &mut GraphProto, f: &mut dyn FnMut(&mut TensorProto) -> Result<(), E>) -> Result<(), E> {
    g.initializer.iter_mut().try_for_each(&mut *f)?;
    for s in &mut g.sparse_initializer {
        s.values.iter_mut().chain(s.indices.iter_mut()).try_for_each(&mut *f)?;
    }
    for n in &mut g.node {
        n.attribute.iter_mut().try_for_each(|a| attribute(a, f))?;
    }
    Ok(())
}

fn attribute<E>(a: &mut AttributeProto, f: &mut dyn FnMut(&mut TensorProto) -> Result<(), E>) -> Result<(), E> {
    a.t.iter_mut().chain(a.tensors.iter_mut()).try_for_each(&mut *f)?;
    for s in a.sparse_tensor.iter_mut().chain(a.sparse_tensors.iter_mut()) {
        s.values.iter_mut().chain(s.indices.iter_mut()).try_for_each(&mut *f)?;
    }
    a.g.iter_mut().chain(a.graphs.iter_mut()).try_for_each(|g| graph(g, f))
}
