//! Sequence mixers without attention: Mamba's selective scan (a CumSum form) and Hyena's long
//! convolution (FFT as full complex DFTs).

use super::Net;

pub(super) fn mamba(n: &mut Net, full: bool) {
    let (d, di, ds, rank, l, blocks) = if full { (1024, 2048, 16, 64, 64, 48) } else { (32, 64, 4, 4, 16, 2) };
    let mut x = n.input("hidden", &[1, l, d]);
    let mut block = |n: &mut Net, _: usize| {
        let r = n.rms_norm(&x, d);
        let xz = n.linear(&r, d, 2 * di, false);
        let xs = n.slice(&xz, -1, 0, di as i64);
        let z = n.slice(&xz, -1, di as i64, 2 * di as i64);
        // causal depthwise conv over time, width 4
        let t = n.transpose(&xs, &[0, 2, 1]);
        let w = n.w(&[di, 1, 4]);
        let cb = n.bias(&[di]);
        let tq = n.qdq(&t);
        let cv = n.op(
            "Conv",
            &[&tq, &w, &cb],
            &[("kernel_shape", vec![4].into()), ("pads", vec![3, 0].into()), ("group", (di as i64).into())],
        );
        let cv = n.transpose(&cv, &[0, 2, 1]);
        let u = n.silu(&cv);
        // input-dependent dt, B, C
        let p = n.linear(&u, di, rank + 2 * ds, false);
        let dt = n.slice(&p, -1, 0, rank as i64);
        let bm = n.slice(&p, -1, rank as i64, (rank + ds) as i64);
        let cm = n.slice(&p, -1, (rank + ds) as i64, (rank + 2 * ds) as i64);
        let dt = n.linear(&dt, rank, di, false);
        let shift = n.c(-4.0);
        let dt = n.op("Add", &[&dt, &shift], &[]);
        let dt = n.op("Softplus", &[&dt], &[]);
        // selective scan, CumSum form: h_t = exp(S_t) * sum_{s<=t} exp(-S_s) dt_s B_s x_s
        let a: Vec<f32> = (0..di * ds).map(|i| -(0.05 + 0.45 * ((i % ds) as f32 / ds as f32))).collect();
        let a = n.consts(&[di, ds], &a);
        let axes = n.ints(&[-1]);
        let dt4 = n.op("Unsqueeze", &[&dt, &axes], &[]);
        let da = n.op("Mul", &[&dt4, &a], &[]);
        let name = n.id("axis");
        let time = n.b.const_i64(&name, &[], &[1]);
        let s = n.op("CumSum", &[&da, &time], &[]);
        let dtx = n.op("Mul", &[&dt, &u], &[]);
        let dtx4 = n.op("Unsqueeze", &[&dtx, &axes], &[]);
        let axes2 = n.ints(&[2]);
        let b4 = n.op("Unsqueeze", &[&bm, &axes2], &[]);
        let dbx = n.op("Mul", &[&dtx4, &b4], &[]);
        let ns = n.op("Neg", &[&s], &[]);
        let e_neg = n.op("Exp", &[&ns], &[]);
        let weighted = n.op("Mul", &[&e_neg, &dbx], &[]);
        let acc = n.op("CumSum", &[&weighted, &time], &[]);
        let e_pos = n.op("Exp", &[&s], &[]);
        let hs = n.op("Mul", &[&e_pos, &acc], &[]);
        let c4 = n.op("Unsqueeze", &[&cm, &axes2], &[]);
        let yc = n.op("Mul", &[&hs, &c4], &[]);
        let y = n.op("ReduceSum", &[&yc, &axes], &[("keepdims", 0i64.into())]);
        let dskip = n.bias(&[di]);
        let ud = n.op("Mul", &[&u, &dskip], &[]);
        let y = n.op("Add", &[&y, &ud], &[]);
        let gate = n.silu(&z);
        let y = n.op("Mul", &[&y, &gate], &[]);
        let o = n.linear(&y, di, d, false);
        x = n.op("Add", &[&x, &o], &[]);
    };
    if full {
        // 48 blocks of distinct weights would be 0.6 GB in f16
        n.shared("block", blocks, block);
    } else {
        (0..blocks).for_each(|i| block(n, i));
    }
    n.output(&x);
}

/// Real [1,c,len] -> its full complex DFT [1,c,len,2] (zero-padded to `len` first).
fn dft(n: &mut Net, x: &str, pad_to: u64, have: u64) -> String {
    let pads = n.ints(&[0, 0, 0, 0, 0, (pad_to - have) as i64]);
    let p = n.op("Pad", &[x, &pads], &[]);
    let last = n.ints(&[-1]);
    let u = n.op("Unsqueeze", &[&p, &last], &[]);
    n.op("DFT", &[&u], &[("axis", 2i64.into())])
}

pub(super) fn hyena(n: &mut Net, full: bool) {
    let (d, l, layers) = if full { (768, 1024, 2) } else { (16, 32, 1) };
    let mut x = n.input("hidden", &[1, l, d]);
    // positional features for the implicit filter
    let feats = 8u64;
    let pos: Vec<f32> = (0..l * feats)
        .map(|i| {
            let (t, f) = ((i / feats) as f32 / l as f32, i % feats);
            if f.is_multiple_of(2) { (t * (f as f32 + 1.0) * 3.1).sin() } else { (t * f as f32 * 3.1).cos() }
        })
        .collect();
    for _ in 0..layers {
        let r = n.layer_norm(&x, d);
        let proj = n.linear(&r, d, 3 * d, true);
        let v = n.slice(&proj, -1, 0, d as i64);
        let x1 = n.slice(&proj, -1, d as i64, 2 * d as i64);
        let x2 = n.slice(&proj, -1, 2 * d as i64, 3 * d as i64);
        // implicit long filter h [1, d, l] from positions: a small MLP with sine activations
        let pos_c = n.consts(&[l, feats], &pos);
        let f = n.linear(&pos_c, feats, 16, true);
        let f = n.op("Sin", &[&f], &[]);
        let f = n.linear(&f, 16, d, true);
        let decay: Vec<f32> = (0..l).map(|t| (-(t as f32) / l as f32 * 4.0).exp()).collect();
        let decay = n.consts(&[l, 1], &decay);
        let f = n.op("Mul", &[&f, &decay], &[]);
        let h = n.transpose(&f, &[1, 0]);
        let h = n.reshape(&h, &[1, d as i64, l as i64]);
        // y = irfft(fft(v * x1) * fft(h))[:l], a causal long convolution, full complex DFTs
        let vx = n.op("Mul", &[&v, &x1], &[]);
        let vt = n.transpose(&vx, &[0, 2, 1]);
        let fv = dft(n, &vt, 2 * l, l);
        let fh = dft(n, &h, 2 * l, l);
        let (vr, vi) = (n.slice(&fv, -1, 0, 1), n.slice(&fv, -1, 1, 2));
        let (hr, hi) = (n.slice(&fh, -1, 0, 1), n.slice(&fh, -1, 1, 2));
        let rr = n.op("Mul", &[&vr, &hr], &[]);
        let ii = n.op("Mul", &[&vi, &hi], &[]);
        let re = n.op("Sub", &[&rr, &ii], &[]);
        let ri = n.op("Mul", &[&vr, &hi], &[]);
        let ir = n.op("Mul", &[&vi, &hr], &[]);
        let im = n.op("Add", &[&ri, &ir], &[]);
        let prod = n.concat(&[&re, &im], -1);
        let back = n.op("DFT", &[&prod], &[("axis", 2i64.into()), ("inverse", 1i64.into())]);
        let real = n.slice(&back, -1, 0, 1);
        let real = n.slice(&real, 2, 0, l as i64);
        let y = n.reshape(&real, &[1, d as i64, l as i64]);
        let y = n.transpose(&y, &[0, 2, 1]);
        let y = n.op("Mul", &[&y, &x2], &[]);
        let o = n.linear(&y, d, d, true);
        x = n.op("Add", &[&x, &o], &[]);
    }
    n.output(&x);
}
