//! Decoder layers of language models: a LLaMA decode step over a KV cache (RoPE, SwiGLU) and a
//! BitNet b1.58 layer (ternary weights).

use bident_tensor::DType;

use super::Net;

/// Rotary embedding of x [1,h,1,dh] at a fixed position (cos and sin are constants).
fn rope(n: &mut Net, x: &str, dh: u64, pos: f32) -> String {
    let half = dh / 2;
    let freq = |i: u64| pos / 10000f32.powf(2.0 * (i % half) as f32 / dh as f32);
    let cos: Vec<f32> = (0..dh).map(|i| freq(i).cos()).collect();
    let sin: Vec<f32> = (0..dh).map(|i| freq(i).sin()).collect();
    let (cos, sin) = (n.consts(&[dh], &cos), n.consts(&[dh], &sin));
    let x1 = n.slice(x, -1, 0, half as i64);
    let x2 = n.slice(x, -1, half as i64, dh as i64);
    let neg = n.op("Neg", &[&x2], &[]);
    let rot = n.concat(&[&neg, &x1], -1);
    let a = n.op("Mul", &[x, &cos], &[]);
    let b = n.op("Mul", &[&rot, &sin], &[]);
    n.op("Add", &[&a, &b], &[])
}

fn swiglu(n: &mut Net, x: &str, d: u64, mlp: u64) -> String {
    let g = n.linear(x, d, mlp, false);
    let g = n.silu(&g);
    let u = n.linear(x, d, mlp, false);
    let m = n.op("Mul", &[&g, &u], &[]);
    n.linear(&m, mlp, d, false)
}

pub(super) fn llama(n: &mut Net, full: bool) {
    let (d, h, ctx, mlp) = if full { (4096, 32, 512, 11008) } else { (64, 4, 16, 160) };
    let dh = d / h;
    let x = n.input("hidden", &[1, 1, d]);
    let pk = n.input("past_key", &[1, h, ctx, dh]);
    let pv = n.input("past_value", &[1, h, ctx, dh]);
    let a = n.rms_norm(&x, d);
    let q = n.linear(&a, d, d, false);
    let k = n.linear(&a, d, d, false);
    let v = n.linear(&a, d, d, false);
    let (q, k, v) = (n.heads(&q, 1, h, dh), n.heads(&k, 1, h, dh), n.heads(&v, 1, h, dh));
    let q = rope(n, &q, dh, ctx as f32);
    let k = rope(n, &k, dh, ctx as f32);
    let keys = n.concat(&[&pk, &k], 2);
    let values = n.concat(&[&pv, &v], 2);
    let o = n.sdpa(&q, &keys, &values, (h, 1, dh));
    let o = n.linear(&o, d, d, false);
    let x = n.op("Add", &[&x, &o], &[]);
    let m = n.rms_norm(&x, d);
    let m = swiglu(n, &m, d, mlp);
    let y = n.op("Add", &[&x, &m], &[]);
    n.output(&y);
    n.output(&keys);
    n.output(&values);
}

/// A BitNet linear: ternary weights through DequantizeLinear, activations quantized.
fn bitlinear(n: &mut Net, x: &str, din: u64, dout: u64) -> String {
    let name = n.id("tern");
    let q = n.b.ternary(&name, &[din, dout]);
    let scale = n.b.scalar_f32(&format!("{name}.scale"), 1.0 / (din as f32).sqrt());
    let w = n.op("DequantizeLinear", &[&q, &scale], &[]);
    let w =
        if n.dt() == DType::F16 { n.op("Cast", &[&w], &[("to", (DType::F16.onnx_code() as i64).into())]) } else { w };
    let xq = n.qdq(x);
    n.op("MatMul", &[&xq, &w], &[])
}

pub(super) fn bitnet(n: &mut Net, full: bool) {
    let (d, h, mlp, t) = if full { (2048, 16, 5632, 128) } else { (64, 4, 176, 8) };
    let dh = d / h;
    let x = n.input("hidden", &[1, t, d]);
    let a = n.rms_norm(&x, d);
    let q = bitlinear(n, &a, d, d);
    let k = bitlinear(n, &a, d, d);
    let v = bitlinear(n, &a, d, d);
    let (q, k, v) = (n.heads(&q, t, h, dh), n.heads(&k, t, h, dh), n.heads(&v, t, h, dh));
    let o = n.sdpa(&q, &k, &v, (h, t, dh));
    let o = bitlinear(n, &o, d, d);
    let x = n.op("Add", &[&x, &o], &[]);
    let m = n.rms_norm(&x, d);
    let g = bitlinear(n, &m, d, mlp);
    let g = n.op("Relu", &[&g], &[]);
    let g = n.op("Mul", &[&g, &g], &[]);
    let u = bitlinear(n, &m, d, mlp);
    let gu = n.op("Mul", &[&g, &u], &[]);
    let dn = bitlinear(n, &gu, mlp, d);
    let y = n.op("Add", &[&x, &dn], &[]);
    n.output(&y);
}
