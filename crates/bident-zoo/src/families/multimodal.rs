//! Models over two modalities: LAVISH (visual and audio towers with cross-modal adapters) and
//! pi0.5 (a vision-language prefix, then an action expert denoising over its cache).

use bident_tensor::DType;

use super::{Net, Precision};

pub(super) fn lavish(n: &mut Net, full: bool) {
    let (s, p, d, h, mlp, layers) = if full { (224, 16, 768, 12, 3072, 4) } else { (32, 8, 64, 4, 128, 2) };
    let (mel, frames) = if full { (128u64, 224u64) } else { (16, 32) };
    let img = n.input("frame", &[1, 3, s, s]);
    let audio = n.input("spectrogram", &[1, 1, mel, frames]);
    let mut v = n.patch_embed(&img, (3, s, p, d));
    let tv = (s / p) * (s / p);
    // audio patches: p x p over the mel x time image
    let mut a = {
        let e = n.conv(&audio, 1, d, p, p as i64, 0);
        let g = (mel / p) * (frames / p);
        let r = n.reshape(&e, &[1, d as i64, g as i64]);
        let t = n.transpose(&r, &[0, 2, 1]);
        let pos = n.bias(&[1, g, d]);
        n.op("Add", &[&t, &pos], &[])
    };
    let ta = (mel / p) * (frames / p);
    for layer in 0..layers {
        v = n.encoder_layer(&v, (tv, d, h, mlp));
        a = n.encoder_layer(&a, (ta, d, h, mlp));
        // cross-modal adapters every other layer: each tower attends to the other
        if layer % 2 == 1 {
            let nv = n.layer_norm(&v, d);
            let na = n.layer_norm(&a, d);
            let va = n.attention(&nv, &na, (tv, ta, d, h));
            let av = n.attention(&na, &nv, (ta, tv, d, h));
            v = n.op("Add", &[&v, &va], &[]);
            a = n.op("Add", &[&a, &av], &[]);
        }
    }
    let mv = n.op("ReduceMean", &[&v], &[("axes", vec![1i64].into()), ("keepdims", 0i64.into())]);
    let ma = n.op("ReduceMean", &[&a], &[("axes", vec![1i64].into()), ("keepdims", 0i64.into())]);
    let f = n.concat(&[&mv, &ma], -1);
    let y = n.linear(&f, 2 * d, 309, true);
    n.output(&y);
}

/// GeGLU: down(gelu(gate(x)) * up(x)), Gemma's MLP.
fn geglu(n: &mut Net, x: &str, d: u64, mlp: u64) -> String {
    let g = n.linear(x, d, mlp, false);
    let g = n.gelu(&g);
    let u = n.linear(x, d, mlp, false);
    let m = n.op("Mul", &[&g, &u], &[]);
    n.linear(&m, mlp, d, false)
}

/// A Gemma layer over x [1,t,d]: RMSNorm, attention of `h` heads of `dh` over its own keys and
/// values (after `cache`'s, a prefix's, when given), RMSNorm, GeGLU. Returns x and its own keys
/// and values [1,h,t,dh] (what a prefix cache keeps).
fn gemma_layer(
    n: &mut Net,
    x: &str,
    (t, d, h, dh, mlp): (u64, u64, u64, u64, u64),
    cache: Option<&(String, String)>,
) -> (String, String, String) {
    let r = n.rms_norm(x, d);
    let q = n.linear(&r, d, h * dh, false);
    let k = n.linear(&r, d, h * dh, false);
    let v = n.linear(&r, d, h * dh, false);
    let (q, k, v) = (n.heads(&q, t, h, dh), n.heads(&k, t, h, dh), n.heads(&v, t, h, dh));
    let (keys, values) = match cache {
        Some((pk, pv)) => (n.concat(&[pk, &k], 2), n.concat(&[pv, &v], 2)),
        None => (k.clone(), v.clone()),
    };
    let o = n.sdpa(&q, &keys, &values, (h, t, dh));
    let o = n.linear(&o, h * dh, d, false);
    let x = n.op("Add", &[x, &o], &[]);
    let r = n.rms_norm(&x, d);
    let m = geglu(n, &r, d, mlp);
    (n.op("Add", &[&x, &m], &[]), k, v)
}

/// pi0.5 at the paper's depth: PaliGemma's SigLIP So400m/14 vision encoder (27 layers, width
/// 1152, 16 heads, MLP 4304; 256 patch tokens of a 224x224 image; INT8 in every precision) and
/// a projector to Gemma 2B's prefix decoder (18 layers, width 2048, 8 heads of 256, GeGLU 16384)
/// over the 256 image and 32 text tokens (the text embedder: a Gather from a 16384-token table,
/// not Gemma's 257k), keeping each layer's keys and values (the prefix cache); then 10 Euler
/// steps of flow matching by the action expert (Gemma 300M: 18 layers, width 1024, GeGLU 4096,
/// the same 8 heads of 256), its 50 action tokens attending to each decoder layer's cache and
/// to themselves, timestep-conditioned. Multi-head keys (Gemma 2B's are multi-query). Each
/// stack's layers share one weight set (and the expert's ten steps, as in the real model) so
/// the file stays ~0.5 GB in f16; the ops, shapes and work are the full model's.
fn pi05_full(n: &mut Net) {
    let (s, p, dv, hv, mlpv, vis_layers) = (224u64, 14u64, 1152u64, 16u64, 4304u64, 27);
    let (d, h, dh, mlp, dec_layers, text, vocab) = (2048u64, 8u64, 256u64, 16384u64, 18, 32u64, 16384u64);
    let (da, mlpa, act_layers, act_dim, horizon, steps) = (1024u64, 4096u64, 18, 32u64, 50u64, 10);
    let ids = n.b.input_typed("tokens", DType::I64, &[Some(1), Some(text)], "");
    let img = n.input("image", &[1, 3, s, s]);
    let noise = n.input("noise", &[1, horizon, act_dim]);
    let table = n.bias(&[vocab, d]);
    let txt = n.op("Gather", &[&table, &ids], &[("axis", 0i64.into())]);
    // vision encoder, INT8 in every configuration (the paper's mixed precision)
    let outer = n.prec;
    n.prec = Precision::Int8;
    let mut v = if outer == Precision::Fp16 {
        let f = n.op("Cast", &[&img], &[("to", (DType::F32.onnx_code() as i64).into())]);
        n.patch_embed(&f, (3, s, p, dv))
    } else {
        n.patch_embed(&img, (3, s, p, dv))
    };
    let tv = (s / p) * (s / p);
    n.shared("vision", vis_layers, |n, _| v = n.encoder_layer(&v, (tv, dv, hv, mlpv)));
    let v = n.layer_norm(&v, dv);
    let v = n.linear(&v, dv, d, true);
    n.prec = outer;
    let v = if outer == Precision::Fp16 {
        n.op("Cast", &[&v], &[("to", (DType::F16.onnx_code() as i64).into())])
    } else {
        v
    };
    // prefix decoder over image and text tokens, its keys and values kept per layer
    let mut prefix = n.concat(&[&v, &txt], 1);
    let tp = tv + text;
    let mut cache = vec![];
    n.shared("decoder", dec_layers, |n, _| {
        let (x, k, v) = gemma_layer(n, &prefix, (tp, d, h, dh, mlp), None);
        prefix = x;
        cache.push((k, v));
    });
    let prefix = n.rms_norm(&prefix, d);
    n.output(&prefix);
    // action expert: 10 Euler steps, every layer attending to its decoder layer's cache
    let mut x = noise;
    let dt = n.c(1.0 / steps as f32);
    n.shared("step", steps, |n, step| {
        // the timestep's embedding added to the projected action tokens
        let temb: Vec<f32> = (0..da).map(|i| ((step as f32 / steps as f32) * (i as f32 + 1.0)).sin()).collect();
        let temb = n.consts(&[da], &temb);
        let a = n.linear(&x, act_dim, da, true);
        let mut a = n.op("Add", &[&a, &temb], &[]);
        n.shared("expert", act_layers, |n, l| {
            a = gemma_layer(n, &a, (horizon, da, h, dh, mlpa), cache.get(l)).0;
        });
        let a = n.rms_norm(&a, da);
        let vel = n.linear(&a, da, act_dim, true);
        let step_v = n.op("Mul", &[&vel, &dt], &[]);
        x = n.op("Add", &[&x, &step_v], &[]);
    });
    n.output(&x);
}

pub(super) fn pi05(n: &mut Net, full: bool) {
    if full {
        return pi05_full(n);
    }
    // the tiny shapes (the paper-size model is `pi05_full`)
    let (s, p, d, h, mlp, vis_layers, dec_layers, text) = (28, 14, 64, 4, 128, 1, 1, 8);
    let (act_d, horizon, steps, vocab) = (32u64, 8u64, 10, 256u64);
    let ids = n.b.input_typed("tokens", DType::I64, &[Some(1), Some(text)], "");
    let img = n.input("image", &[1, 3, s, s]);
    let noise = n.input("noise", &[1, horizon, act_d]);
    // text embedder
    let table = n.bias(&[vocab, d]);
    let txt = n.op("Gather", &[&table, &ids], &[("axis", 0i64.into())]);
    // vision encoder: INT8 in every configuration (the paper's mixed precision)
    let outer = n.prec;
    n.prec = Precision::Int8;
    let mut v = if outer == Precision::Fp16 {
        let f = n.op("Cast", &[&img], &[("to", (DType::F32.onnx_code() as i64).into())]);
        n.patch_embed(&f, (3, s, p, d))
    } else {
        n.patch_embed(&img, (3, s, p, d))
    };
    let tv = (s / p) * (s / p);
    for _ in 0..vis_layers {
        v = n.encoder_layer(&v, (tv, d, h, mlp));
    }
    n.prec = outer;
    if outer == Precision::Fp16 {
        v = n.op("Cast", &[&v], &[("to", (DType::F16.onnx_code() as i64).into())]);
    }
    // prefix decoder over image and text tokens
    let mut prefix = n.concat(&[&v, &txt], 1);
    let tp = tv + text;
    for _ in 0..dec_layers {
        prefix = n.encoder_layer(&prefix, (tp, d, h, mlp));
    }
    let memory = n.linear(&prefix, d, act_d, false);
    // action expert: 10 Euler steps of flow matching, each attending to the prefix
    let mut x = noise;
    let dt = n.c(1.0 / steps as f32);
    for step in 0..steps {
        let temb: Vec<f32> = (0..act_d).map(|i| ((step as f32 / steps as f32) * (i as f32 + 1.0)).sin()).collect();
        let temb = n.consts(&[act_d], &temb);
        let xt = n.op("Add", &[&x, &temb], &[]);
        let sa = n.encoder_layer(&xt, (horizon, act_d, 4, 2 * act_d));
        let na = n.layer_norm(&sa, act_d);
        let ca = n.attention(&na, &memory, (horizon, tp, act_d, 4));
        let u = n.op("Add", &[&sa, &ca], &[]);
        let vel = n.linear(&u, act_d, act_d, true);
        let step_v = n.op("Mul", &[&vel, &dt], &[]);
        x = n.op("Add", &[&x, &step_v], &[]);
    }
    n.output(&x);
}
