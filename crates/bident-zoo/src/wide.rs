//! Wide models, `fork-join-<n>`: one op forking into `n` branches joined by one `Sum`, the shape
//! of a model of many parallel heads (the search's widest phases).

use bident_ir::proto::ModelProto;

use crate::builder::Builder;

/// The most branches [`fork_join`] builds.
pub const MAX_BRANCHES: u64 = 20_000;

/// A `Relu` on the input forking into `n` branches (MatMul by a 16x16 weight, Tanh, Mul by a
/// 16-vector), all joined by one `Sum`; None for 0 or more than [`MAX_BRANCHES`] branches.
pub fn fork_join(seed: u64, n: u64) -> Option<ModelProto> {
    if n == 0 || n > MAX_BRANCHES {
        return None;
    }
    let mut b = Builder::new(seed);
    let x = b.input("x", &[1, 16]);
    let fork = b.node("Relu", &[&x], &[]);
    let tails: Vec<String> = (0..n)
        .map(|i| {
            let w = b.weight(&format!("b{i}.w"), &[16, 16]);
            let m = b.node("MatMul", &[&fork, &w], &[]);
            let t = b.node("Tanh", &[&m], &[]);
            let s = b.weight(&format!("b{i}.s"), &[16]);
            b.node("Mul", &[&t, &s], &[])
        })
        .collect();
    let refs: Vec<&str> = tails.iter().map(String::as_str).collect();
    let sum = b.node("Sum", &refs, &[]);
    b.output(&sum);
    Some(b.finish(&format!("fork_join_{n}")))
}
