//! The hand-written networks: the pipeline's example, an MLP, ResNet-50, an attention block, a
//! BERT encoder, a recurrent model, and exporter patterns the import must fold.

use bident_ir::proto::ModelProto;
use bident_tensor::DType;

use crate::builder::{self, Builder};

pub(crate) fn example(seed: u64, classes: u64) -> ModelProto {
    let mut b = Builder::new(seed);
    let x = b.input("image", &[1, 3, 32, 32]);
    let stem = b.conv_bn_relu(&x, 3, 16, 3, 1);
    // two branches from the stem
    let a1 = b.conv_bn_relu(&stem, 16, 16, 3, 1);
    let a2 = b.conv(&a1, 16, 16, 3, 1);
    let b1 = b.conv(&stem, 16, 16, 1, 0);
    let b2 = b.node("Sigmoid", &[&b1], &[]);
    let j = b.node("Add", &[&a2, &b2], &[]);
    let r = b.node("Relu", &[&j], &[]);
    let p = b.node("GlobalAveragePool", &[&r], &[]);
    let f = b.node("Flatten", &[&p], &[("axis", 1i64.into())]);
    let w = b.weight("head.w", &[16, classes]);
    let bias = b.weight("head.b", &[classes]);
    let g = b.node("Gemm", &[&f, &w, &bias], &[]);
    let s = b.node("Softmax", &[&g], &[("axis", 1i64.into())]);
    b.output(&s);
    b.finish(if classes == 10 { "example" } else { "example_edited" })
}

pub(crate) fn resnet50(seed: u64) -> ModelProto {
    let mut b = Builder::new(seed);
    let x = b.input("image", &[1, 3, 224, 224]);
    let stem = b.conv_bn(&x, 3, 64, (7, 3, 2), true);
    let mut h = b.node(
        "MaxPool",
        &[&stem],
        &[("kernel_shape", vec![3, 3].into()), ("strides", vec![2, 2].into()), ("pads", vec![1; 4].into())],
    );
    let mut cin = 64;
    for (stage, (blocks, mid)) in [(3, 64), (4, 128), (6, 256), (3, 512)].into_iter().enumerate() {
        for i in 0..blocks {
            let stride = if i == 0 && stage > 0 { 2 } else { 1 };
            let out = mid * 4;
            let a = b.conv_bn(&h, cin, mid, (1, 0, 1), true);
            let c = b.conv_bn(&a, mid, mid, (3, 1, stride), true);
            let d = b.conv_bn(&c, mid, out, (1, 0, 1), false);
            let shortcut = if i == 0 { b.conv_bn(&h, cin, out, (1, 0, stride), false) } else { h.clone() };
            let sum = b.node("Add", &[&d, &shortcut], &[]);
            h = b.node("Relu", &[&sum], &[]);
            cin = out;
        }
    }
    let p = b.node("GlobalAveragePool", &[&h], &[]);
    let f = b.node("Flatten", &[&p], &[("axis", 1i64.into())]);
    let w = b.weight("fc.w", &[2048, 1000]);
    let bias = b.weight("fc.b", &[1000]);
    let logits = b.node("Gemm", &[&f, &w, &bias], &[]);
    b.output(&logits);
    b.finish("resnet50")
}

pub(crate) fn mlp_builder(seed: u64, batch: Option<u64>) -> Builder {
    let mut b = Builder::new(seed);
    let mut h = match batch {
        Some(n) => b.input("x", &[n, 64]),
        None => b.input_dyn("x", &[None, Some(64)], "N"),
    };
    for (i, (k, n)) in [(64u64, 128u64), (128, 128), (128, 32)].into_iter().enumerate() {
        let w = b.weight(&format!("fc{i}.w"), &[k, n]);
        let bias = b.weight(&format!("fc{i}.b"), &[n]);
        let m = b.node("MatMul", &[&h, &w], &[]);
        let a = b.node("Add", &[&m, &bias], &[]);
        h = b.node("Relu", &[&a], &[]);
    }
    b.output(&h);
    b
}

pub(crate) fn mlp(seed: u64, batch: u64) -> ModelProto {
    mlp_builder(seed, Some(batch)).finish("mlp")
}

pub(crate) fn recurrent(seed: u64) -> ModelProto {
    use builder::Attr;
    let (t, batch, i, h) = (6u64, 2u64, 8u64, 8u64);
    let mut b = Builder::new(seed);
    let x = b.input("x", &[t, batch, i]);
    let (w, r, bias) =
        (b.weight("gru.w", &[2, 3 * h, i]), b.weight("gru.r", &[2, 3 * h, h]), b.weight("gru.b", &[2, 6 * h]));
    let attrs = [
        ("hidden_size", Attr::Int(h as i64)),
        ("direction", Attr::Str("bidirectional")),
        ("linear_before_reset", Attr::Int(1)),
    ];
    b.node_named("gru", "GRU", &[&x, &w, &r, &bias], &["gru_y", "gru_h"], &attrs);
    // [T, 2, B, H] -> [T, B, 2H]
    let y = b.node("Transpose", &["gru_y"], &[("perm", vec![0i64, 2, 1, 3].into())]);
    let shape = b.const_i64("seq_shape", &[3], &[t as i64, batch as i64, 2 * h as i64]);
    let y = b.node("Reshape", &[&y, &shape], &[]);
    let (w, r, bias) =
        (b.weight("rnn.w", &[1, h, 2 * h]), b.weight("rnn.r", &[1, h, h]), b.weight("rnn.b", &[1, 2 * h]));
    b.node_named("rnn", "RNN", &[&y, &w, &r, &bias], &["rnn_y", "rnn_h"], &[("hidden_size", Attr::Int(h as i64))]);
    b.output("rnn_y");
    b.output("gru_h");
    b.finish("recurrent")
}

pub(crate) fn attention(seed: u64) -> ModelProto {
    let (t, d) = (16u64, 32u64);
    let mut b = Builder::new(seed);
    let x = b.input("tokens", &[1, t, d]);
    let gamma = b.weight("ln.g", &[d]);
    let beta = b.weight("ln.b", &[d]);
    let ln = b.node("LayerNormalization", &[&x, &gamma, &beta], &[("axis", (-1i64).into())]);
    let proj = |b: &mut Builder, name: &str| {
        let w = b.weight(&format!("{name}.w"), &[d, d]);
        let bias = b.weight(&format!("{name}.b"), &[d]);
        let m = b.node("MatMul", &[&ln, &w], &[]);
        b.node("Add", &[&m, &bias], &[])
    };
    let q = proj(&mut b, "q");
    let k = proj(&mut b, "k");
    let v = proj(&mut b, "v");
    let kt = b.node("Transpose", &[&k], &[("perm", vec![0i64, 2, 1].into())]);
    let s = b.node("MatMul", &[&q, &kt], &[]);
    let scale = b.scalar_f32("scale", 1.0 / (d as f32).sqrt());
    let s = b.node("Mul", &[&s, &scale], &[]);
    let p = b.node("Softmax", &[&s], &[("axis", (-1i64).into())]);
    let o = b.node("MatMul", &[&p, &v], &[]);
    // shape arithmetic as exporters write it: reshape back through Shape -> Gather -> Concat
    let shp = b.node("Shape", &[&x], &[]);
    let i0 = b.const_i64("i0", &[], &[0]);
    let i1 = b.const_i64("i1", &[], &[1]);
    let n0 = b.node("Gather", &[&shp, &i0], &[("axis", 0i64.into())]);
    let n1 = b.node("Gather", &[&shp, &i1], &[("axis", 0i64.into())]);
    let ax = b.const_i64("ax0", &[1], &[0]);
    let u0 = b.node("Unsqueeze", &[&n0, &ax], &[]);
    let u1 = b.node("Unsqueeze", &[&n1, &ax], &[]);
    let minus1 = b.const_i64("minus1", &[1], &[-1]);
    let target = b.node("Concat", &[&u0, &u1, &minus1], &[("axis", 0i64.into())]);
    let o = b.node("Reshape", &[&o, &target], &[]);
    let res = b.node("Add", &[&o, &x], &[]);
    // GELU as exported: x * 0.5 * (1 + erf(x / sqrt 2))
    let sqrt2 = b.scalar_f32("sqrt2", std::f32::consts::SQRT_2);
    let half = b.scalar_f32("half", 0.5);
    let one = b.scalar_f32("one", 1.0);
    let dv = b.node("Div", &[&res, &sqrt2], &[]);
    let e = b.node("Erf", &[&dv], &[]);
    let e1 = b.node("Add", &[&e, &one], &[]);
    let m = b.node("Mul", &[&res, &e1], &[]);
    let g = b.node("Mul", &[&m, &half], &[]);
    b.output(&g);
    b.finish("attention")
}

/// Sizes of [`bert`].
pub struct Bert {
    pub layers: usize,
    pub hidden: u64,
    pub heads: u64,
    pub ffn: u64,
    pub vocab: u64,
    pub positions: u64,
}

/// A BERT-style encoder with the node patterns PyTorch's exporter writes.
pub fn bert(seed: u64, c: &Bert) -> ModelProto {
    let (h, heads) = (c.hidden, c.heads);
    let dh = h / heads;
    let mut b = Builder::new(seed);
    let ids = b.input_typed("input_ids", DType::I64, &[Some(1), None], "seq");
    let mask = b.input_typed("attention_mask", DType::I64, &[Some(1), None], "seq");
    // embeddings: token + position (positions 0..seq from the ids' shape), then LayerNorm
    let tok_table = b.weight("embeddings.word", &[c.vocab, h]);
    let pos_table = b.weight("embeddings.position", &[c.positions, h]);
    let tok = b.node("Gather", &[&tok_table, &ids], &[("axis", 0i64.into())]);
    let shp = b.node("Shape", &[&ids], &[]);
    let one = b.const_i64("one_i", &[], &[1]);
    let zero = b.const_i64("zero_i", &[], &[0]);
    let seq = b.node("Gather", &[&shp, &one], &[("axis", 0i64.into())]);
    let range = b.node("Range", &[&zero, &seq, &one], &[]);
    let pos = b.node("Gather", &[&pos_table, &range], &[("axis", 0i64.into())]);
    let x = b.node("Add", &[&tok, &pos], &[]);
    let mut x = layer_norm(&mut b, &x, h, "embeddings.ln");
    // additive mask: (1 - mask) * -10000, shaped [1, 1, 1, seq]
    let ax12 = b.const_i64("axes12", &[2], &[1, 2]);
    let m = b.node("Unsqueeze", &[&mask, &ax12], &[]);
    let m = b.node("Cast", &[&m], &[("to", (DType::F32.onnx_code() as i64).into())]);
    let onef = b.scalar_f32("one_f", 1.0);
    let m = b.node("Sub", &[&onef, &m], &[]);
    let big = b.scalar_f32("neg_big", -10000.0);
    let mask_add = b.node("Mul", &[&m, &big], &[]);
    let scale = b.scalar_f32("scale", 1.0 / (dh as f32).sqrt());
    let heads_c = b.const_i64("heads", &[1], &[heads as i64]);
    let dh_c = b.const_i64("head_dim", &[1], &[dh as i64]);
    let h_c = b.const_i64("hidden", &[1], &[h as i64]);
    let ax0 = b.const_i64("ax0", &[1], &[0]);
    for l in 0..c.layers {
        let p = format!("layer{l}");
        let linear = |b: &mut Builder, x: &str, name: &str, i: u64, o: u64| {
            let w = b.weight(&format!("{p}.{name}.w"), &[i, o]);
            let bias = b.weight(&format!("{p}.{name}.b"), &[o]);
            let y = b.node("MatMul", &[x, &w], &[]);
            b.node("Add", &[&y, &bias], &[])
        };
        // [1, seq, h] -> [1, heads, seq, dh], the target shape computed from the input's shape
        let split_heads = |b: &mut Builder, t: &str| {
            let s = b.node("Shape", &[t], &[]);
            let n = b.node("Gather", &[&s, &zero], &[("axis", 0i64.into())]);
            let q = b.node("Gather", &[&s, &one], &[("axis", 0i64.into())]);
            let n = b.node("Unsqueeze", &[&n, &ax0], &[]);
            let q = b.node("Unsqueeze", &[&q, &ax0], &[]);
            let target = b.node("Concat", &[&n, &q, &heads_c, &dh_c], &[("axis", 0i64.into())]);
            let r = b.node("Reshape", &[t, &target], &[]);
            b.node("Transpose", &[&r], &[("perm", vec![0i64, 2, 1, 3].into())])
        };
        let q = linear(&mut b, &x, "q", h, h);
        let k = linear(&mut b, &x, "k", h, h);
        let v = linear(&mut b, &x, "v", h, h);
        let (q, k, v) = (split_heads(&mut b, &q), split_heads(&mut b, &k), split_heads(&mut b, &v));
        let kt = b.node("Transpose", &[&k], &[("perm", vec![0i64, 1, 3, 2].into())]);
        let s = b.node("MatMul", &[&q, &kt], &[]);
        let s = b.node("Mul", &[&s, &scale], &[]);
        let s = b.node("Add", &[&s, &mask_add], &[]);
        let pr = b.node("Softmax", &[&s], &[("axis", (-1i64).into())]);
        let o = b.node("MatMul", &[&pr, &v], &[]);
        let o = b.node("Transpose", &[&o], &[("perm", vec![0i64, 2, 1, 3].into())]);
        let so = b.node("Shape", &[&x], &[]);
        let n = b.node("Gather", &[&so, &zero], &[("axis", 0i64.into())]);
        let sq = b.node("Gather", &[&so, &one], &[("axis", 0i64.into())]);
        let n = b.node("Unsqueeze", &[&n, &ax0], &[]);
        let sq = b.node("Unsqueeze", &[&sq, &ax0], &[]);
        let target = b.node("Concat", &[&n, &sq, &h_c], &[("axis", 0i64.into())]);
        let o = b.node("Reshape", &[&o, &target], &[]);
        let o = linear(&mut b, &o, "o", h, h);
        let r = b.node("Add", &[&o, &x], &[]);
        let a = layer_norm(&mut b, &r, h, &format!("{p}.ln1"));
        let f = linear(&mut b, &a, "ffn1", h, c.ffn);
        let f = gelu(&mut b, &f);
        let f = linear(&mut b, &f, "ffn2", c.ffn, h);
        let r = b.node("Add", &[&f, &a], &[]);
        x = layer_norm(&mut b, &r, h, &format!("{p}.ln2"));
    }
    b.output(&x);
    b.finish("bert_encoder")
}

fn layer_norm(b: &mut Builder, x: &str, h: u64, name: &str) -> String {
    let g = b.weight(&format!("{name}.g"), &[h]);
    let beta = b.weight(&format!("{name}.b"), &[h]);
    b.node("LayerNormalization", &[x, &g, &beta], &[("axis", (-1i64).into())])
}

/// GELU as exported: x * 0.5 * (1 + erf(x / sqrt 2)).
fn gelu(b: &mut Builder, x: &str) -> String {
    let sqrt2 = b.scalar_f32("gelu.sqrt2", std::f32::consts::SQRT_2);
    let half = b.scalar_f32("gelu.half", 0.5);
    let one = b.scalar_f32("gelu.one", 1.0);
    let d = b.node("Div", &[x, &sqrt2], &[]);
    let e = b.node("Erf", &[&d], &[]);
    let e = b.node("Add", &[&e, &one], &[]);
    let m = b.node("Mul", &[x, &e], &[]);
    b.node("Mul", &[&m, &half], &[])
}

/// A Pad whose pads come from Constant -> Transpose -> Reshape (an STFT front end's framing).
pub(crate) fn const_transpose_pad(seed: u64) -> ModelProto {
    let mut b = Builder::new(seed);
    let x = b.input("x", &[1, 2, 16]);
    // [[0, 0], [0, 0], [2, 3]] -> Transpose -> [[0, 0, 2], [0, 0, 3]] -> Reshape [6]: the pads
    let v =
        bident_tensor::HostTensor::from_f64("frame", DType::I64, vec![3, 2], &[0., 0., 0., 0., 2., 3.]).expect("valid");
    let c = b.node("Constant", &[], &[("value", builder::Attr::Tensor(v))]);
    let t = b.node("Transpose", &[&c], &[("perm", vec![1i64, 0].into())]);
    let flat = b.const_i64("flat", &[1], &[-1]);
    let pads = b.node("Reshape", &[&t, &flat], &[]);
    let p = b.node("Pad", &[&x, &pads], &[("mode", builder::Attr::Str("reflect"))]);
    let y = b.node("Relu", &[&p], &[]);
    b.output(&y);
    b.finish("const_transpose_pad")
}
