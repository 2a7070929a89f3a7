//! Networks whose neuron is not a weighted sum and an activation: KAN (learned B-spline edges)
//! and a spiking VGG9 (leaky integrate-and-fire over unrolled time steps).

use super::Net;

/// One KAN layer: B-spline bases of x [b, din] on a uniform grid over [-1, 1] (order-0 bases
/// from comparisons, then Cox-de Boor), times coefficients, plus a SiLU base path.
fn kan_layer(n: &mut Net, x: &str, b: u64, din: u64, dout: u64) -> String {
    const GRID: usize = 5;
    const ORDER: usize = 3;
    let h = 2.0 / GRID as f32;
    let knots: Vec<f32> = (0..GRID + 2 * ORDER + 1).map(|i| -1.0 + (i as f32 - ORDER as f32) * h).collect();
    let axes = n.ints(&[-1]);
    let xe = n.op("Unsqueeze", &[x, &axes], &[]);
    // order 0: t_i <= x < t_{i+1}
    let m = knots.len() - 1;
    let lo = n.consts(&[m as u64], &knots[..m]);
    let hi = n.consts(&[m as u64], &knots[1..]);
    let ge = n.op("GreaterOrEqual", &[&xe, &lo], &[]);
    let lt = n.op("Less", &[&xe, &hi], &[]);
    let both = n.op("And", &[&ge, &lt], &[]);
    let to = n.dt().onnx_code() as i64;
    let mut basis = n.op("Cast", &[&both], &[("to", to.into())]);
    let mut count = m;
    for p in 1..=ORDER {
        count -= 1;
        let left_t = n.consts(&[count as u64], &knots[..count]);
        let left_d = n.consts(&[count as u64], &vec![1.0 / (p as f32 * h); count]);
        let right_t = n.consts(&[count as u64], &knots[p + 1..p + 1 + count]);
        let b_lo = n.slice(&basis, -1, 0, count as i64);
        let b_hi = n.slice(&basis, -1, 1, count as i64 + 1);
        let a = n.op("Sub", &[&xe, &left_t], &[]);
        let a = n.op("Mul", &[&a, &left_d], &[]);
        let a = n.op("Mul", &[&a, &b_lo], &[]);
        let c = n.op("Sub", &[&right_t, &xe], &[]);
        let c = n.op("Mul", &[&c, &left_d], &[]);
        let c = n.op("Mul", &[&c, &b_hi], &[]);
        basis = n.op("Add", &[&a, &c], &[]);
    }
    let flat = n.reshape(&basis, &[b as i64, (din * count as u64) as i64]);
    let spline = n.linear(&flat, din * count as u64, dout, false);
    let base = n.silu(x);
    let base = n.linear(&base, din, dout, false);
    n.op("Add", &[&spline, &base], &[])
}

pub(super) fn kan(n: &mut Net, full: bool) {
    let (b, widths): (u64, &[u64]) = if full { (64, &[64, 128, 64, 10]) } else { (4, &[8, 8, 4]) };
    let mut x = n.input("x", &[b, widths[0]]);
    for w in widths.windows(2) {
        x = kan_layer(n, &x, b, w[0], w[1]);
        // keep the next layer's input on the grid
        x = n.op("Tanh", &[&x], &[]);
    }
    n.output(&x);
}

pub(super) fn snn(n: &mut Net, full: bool) {
    let (s, div, steps) = if full { (32u64, 1u64, 4) } else { (16, 8, 2) };
    let plan: &[(u64, bool)] =
        &[(64, false), (64, true), (128, false), (128, true), (256, false), (256, false), (256, true)];
    let img = n.input("image", &[1, 3, s, s]);
    // weights shared across time steps: one set per layer
    let mut layers = vec![];
    let mut cin = 3;
    for &(c, pool) in plan {
        let c = (c / div).max(4);
        let w = n.w(&[c, cin, 3, 3]);
        layers.push((w, pool));
        cin = c;
    }
    let side = s / 8;
    let fc_in = cin * side * side;
    let hidden = 1024 / div;
    let fc1 = n.w(&[fc_in, hidden]);
    let fc2 = n.w(&[hidden, 10]);
    // a low threshold keeps every layer spiking with the seeded weights (~1/sqrt(fan-in))
    let decay = n.c(0.5);
    let thr = n.c(0.05);
    let to = n.dt().onnx_code() as i64;
    let mut v: Vec<Option<String>> = vec![None; layers.len() + 1];
    let mut total: Option<String> = None;
    // leaky integrate-and-fire with soft reset: v = decay*v + I; s = v >= thr; v -= s*thr
    let lif = |n: &mut Net, v: &mut Option<String>, input: &str| -> String {
        let vin = match v.as_ref() {
            Some(prev) => {
                let leak = n.op("Mul", &[prev, &decay], &[]);
                n.op("Add", &[&leak, input], &[])
            }
            None => input.to_string(),
        };
        let fire = n.op("GreaterOrEqual", &[&vin, &thr], &[]);
        let spike = n.op("Cast", &[&fire], &[("to", to.into())]);
        let reset = n.op("Mul", &[&spike, &thr], &[]);
        *v = Some(n.op("Sub", &[&vin, &reset], &[]));
        spike
    };
    for _ in 0..steps {
        let mut x = img.clone();
        for (k, (w, pool)) in layers.iter().enumerate() {
            let xq = n.qdq(&x);
            let cur = n.op("Conv", &[&xq, w], &[("kernel_shape", vec![3, 3].into()), ("pads", vec![1; 4].into())]);
            x = lif(n, &mut v[k], &cur);
            if *pool {
                x = n.op("AveragePool", &[&x], &[("kernel_shape", vec![2, 2].into()), ("strides", vec![2, 2].into())]);
            }
        }
        let f = n.reshape(&x, &[1, fc_in as i64]);
        let fq = n.qdq(&f);
        let h = n.op("MatMul", &[&fq, &fc1], &[]);
        let sp = lif(n, &mut v[layers.len()], &h);
        let sq = n.qdq(&sp);
        let out = n.op("MatMul", &[&sq, &fc2], &[]);
        total = Some(match total {
            Some(t) => n.op("Add", &[&t, &out], &[]),
            None => out,
        });
    }
    let scale = n.c(1.0 / steps as f32);
    let t = total.unwrap_or_default();
    let y = n.op("Mul", &[&t, &scale], &[]);
    n.output(&y);
}
