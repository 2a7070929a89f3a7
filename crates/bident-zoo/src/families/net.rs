//! `Net`, the builder every family is written with: a [`Builder`] that knows the precision, so
//! weights, constants and quantization follow it, and shares one weight set across a deep stack.

use std::collections::HashMap;

use bident_tensor::DType;

use super::Precision;
use crate::builder::{Attr, Builder};

/// A builder that knows the precision: weights, constants and quantization follow it.
pub(super) struct Net {
    pub(super) b: Builder,
    pub(super) prec: Precision,
    k: u64,
    /// The weights of each repeated layer ([`Net::shared`]), by stack, and the stack being built.
    shares: HashMap<&'static str, Share>,
    current: Option<&'static str>,
}

/// The weights (initializer names, with an int8 weight's scale, and shapes) one layer of a
/// repeated stack made, in the order it made them; the stack's next layers take them in the
/// same order instead of making their own.
#[derive(Default)]
struct Share {
    made: Vec<(Vec<u64>, String, Option<String>)>,
    next: usize,
    replay: bool,
}

impl Net {
    pub(super) fn new(seed: u64, prec: Precision) -> Self {
        Self { b: Builder::new(seed), prec, k: 0, shares: HashMap::new(), current: None }
    }

    /// `layers` layers by `layer`, all with the weights the first layer of stack `key` made
    /// (in this call or an earlier one): the graph, shapes and work of a deep stack without its
    /// weights times its depth in the file (each use of an int8 weight keeps its own
    /// DequantizeLinear, as a quantized model has). Stacks nest; weights made outside any stack
    /// are their own.
    pub(super) fn shared(&mut self, key: &'static str, layers: usize, mut layer: impl FnMut(&mut Net, usize)) {
        let outer = self.current.replace(key);
        for i in 0..layers {
            let s = self.shares.entry(key).or_default();
            s.next = 0;
            layer(self, i);
            if let Some(s) = self.shares.get_mut(key) {
                s.replay = true;
            }
        }
        self.current = outer;
    }

    /// The next weight of the layer being replayed, if it has this shape.
    pub(super) fn replayed(&mut self, shape: &[u64]) -> Option<(String, Option<String>)> {
        let s = self.shares.get_mut(self.current?).filter(|s| s.replay)?;
        let (have, name, scale) = s.made.get(s.next)?;
        s.next += 1;
        (have.as_slice() == shape).then(|| (name.clone(), scale.clone()))
    }

    pub(super) fn record(&mut self, shape: &[u64], name: &str, scale: Option<&str>) {
        if let Some(s) = self.current.and_then(|k| self.shares.get_mut(k)).filter(|s| !s.replay) {
            s.made.push((shape.to_vec(), name.to_string(), scale.map(str::to_string)));
        }
    }

    /// Element type of activations.
    pub(super) fn dt(&self) -> DType {
        if self.prec == Precision::Fp16 { DType::F16 } else { DType::F32 }
    }

    pub(super) fn id(&mut self, what: &str) -> String {
        self.k += 1;
        format!("{what}{}", self.k)
    }

    pub(super) fn input(&mut self, name: &str, shape: &[u64]) -> String {
        let dims: Vec<Option<u64>> = shape.iter().map(|&d| Some(d)).collect();
        let dt = self.dt();
        self.b.input_typed(name, dt, &dims, "")
    }

    pub(super) fn output(&mut self, name: &str) {
        let dt = self.dt();
        self.b.output_of(name, dt);
    }

    pub(super) fn op(&mut self, op: &str, inputs: &[&str], attrs: &[(&str, Attr)]) -> String {
        self.b.node(op, inputs, attrs)
    }

    /// A scalar constant in the activation type.
    pub(super) fn c(&mut self, v: f32) -> String {
        let (name, dt) = (self.id("c"), self.dt());
        self.b.const_float(&name, dt, &[], &[v])
    }

    pub(super) fn consts(&mut self, shape: &[u64], values: &[f32]) -> String {
        let (name, dt) = (self.id("k"), self.dt());
        self.b.const_float(&name, dt, shape, values)
    }

    pub(super) fn ints(&mut self, v: &[i64]) -> String {
        let name = self.id("i");
        self.b.const_i64(&name, &[v.len() as u64], v)
    }

    /// A weight in the activation type; for int8, int8 values through DequantizeLinear.
    pub(super) fn w(&mut self, shape: &[u64]) -> String {
        if let Some((w, scale)) = self.replayed(shape) {
            return match scale {
                Some(scale) => self.op("DequantizeLinear", &[&w, &scale], &[]),
                None => w,
            };
        }
        let name = self.id("w");
        match self.prec {
            Precision::Int8 => {
                let (q, scale) = self.b.weight_i8(&name, shape);
                let scale = self.b.scalar_f32(&format!("{name}.scale"), scale);
                self.record(shape, &q, Some(&scale));
                self.op("DequantizeLinear", &[&q, &scale], &[])
            }
            _ => {
                let dt = self.dt();
                let w = self.b.weight_typed(&name, dt, shape);
                self.record(shape, &w, None);
                w
            }
        }
    }

    /// A small bias-like weight (never quantized).
    pub(super) fn bias(&mut self, shape: &[u64]) -> String {
        if let Some((b, _)) = self.replayed(shape) {
            return b;
        }
        let (name, dt) = (self.id("b"), self.dt());
        let b = self.b.weight_typed(&name, dt, shape);
        self.record(shape, &b, None);
        b
    }

    /// Quantize and dequantize an activation (int8 only).
    pub(super) fn qdq(&mut self, x: &str) -> String {
        if self.prec != Precision::Int8 {
            return x.to_string();
        }
        let name = self.id("q");
        let scale = self.b.scalar_f32(&format!("{name}.scale"), 0.05);
        let zp = self.b.const_i8(&format!("{name}.zp"), &[], &[0]);
        let q = self.op("QuantizeLinear", &[x, &scale, &zp], &[]);
        self.op("DequantizeLinear", &[&q, &scale, &zp], &[])
    }

    pub(super) fn linear(&mut self, x: &str, din: u64, dout: u64, bias: bool) -> String {
        let x = self.qdq(x);
        let w = self.w(&[din, dout]);
        let y = self.op("MatMul", &[&x, &w], &[]);
        if bias {
            let b = self.bias(&[dout]);
            self.op("Add", &[&y, &b], &[])
        } else {
            y
        }
    }

    pub(super) fn conv(&mut self, x: &str, cin: u64, cout: u64, k: u64, stride: i64, pad: i64) -> String {
        let x = self.qdq(x);
        let w = self.w(&[cout, cin, k, k]);
        let b = self.bias(&[cout]);
        self.op(
            "Conv",
            &[&x, &w, &b],
            &[
                ("kernel_shape", vec![k as i64; 2].into()),
                ("strides", vec![stride; 2].into()),
                ("pads", vec![pad; 4].into()),
            ],
        )
    }

    pub(super) fn batchnorm(&mut self, x: &str, c: u64) -> String {
        let scale = self.consts(&[c], &vec![1.0; c as usize]);
        let bias = self.bias(&[c]);
        let mean = self.bias(&[c]);
        let var = self.consts(&[c], &(0..c).map(|i| 1.0 + i as f32 * 0.01).collect::<Vec<_>>());
        self.op("BatchNormalization", &[x, &scale, &bias, &mean, &var], &[])
    }

    pub(super) fn relu(&mut self, x: &str) -> String {
        self.op("Relu", &[x], &[])
    }

    pub(super) fn silu(&mut self, x: &str) -> String {
        let s = self.op("Sigmoid", &[x], &[]);
        self.op("Mul", &[x, &s], &[])
    }

    pub(super) fn gelu(&mut self, x: &str) -> String {
        let r = self.c(std::f32::consts::FRAC_1_SQRT_2);
        let xs = self.op("Mul", &[x, &r], &[]);
        let e = self.op("Erf", &[&xs], &[]);
        let one = self.c(1.0);
        let e1 = self.op("Add", &[&e, &one], &[]);
        let half = self.c(0.5);
        let xh = self.op("Mul", &[x, &half], &[]);
        self.op("Mul", &[&xh, &e1], &[])
    }

    pub(super) fn layer_norm(&mut self, x: &str, d: u64) -> String {
        let g = self.consts(&[d], &vec![1.0; d as usize]);
        let b = self.bias(&[d]);
        self.op("LayerNormalization", &[x, &g, &b], &[("axis", (-1i64).into())])
    }

    /// x / sqrt(mean(x^2) + eps) * g, over the last axis.
    pub(super) fn rms_norm(&mut self, x: &str, d: u64) -> String {
        let sq = self.op("Mul", &[x, x], &[]);
        let m = self.op("ReduceMean", &[&sq], &[("axes", vec![-1i64].into()), ("keepdims", 1i64.into())]);
        let eps = self.c(1e-5);
        let me = self.op("Add", &[&m, &eps], &[]);
        let r = self.op("Sqrt", &[&me], &[]);
        let n = self.op("Div", &[x, &r], &[]);
        let g = self.consts(&[d], &vec![1.0; d as usize]);
        self.op("Mul", &[&n, &g], &[])
    }

    pub(super) fn reshape(&mut self, x: &str, shape: &[i64]) -> String {
        let s = self.ints(shape);
        self.op("Reshape", &[x, &s], &[])
    }

    pub(super) fn transpose(&mut self, x: &str, perm: &[i64]) -> String {
        self.op("Transpose", &[x], &[("perm", perm.to_vec().into())])
    }

    pub(super) fn slice(&mut self, x: &str, axis: i64, start: i64, end: i64) -> String {
        let (s, e, a) = (self.ints(&[start]), self.ints(&[end]), self.ints(&[axis]));
        self.op("Slice", &[x, &s, &e, &a], &[])
    }

    pub(super) fn concat(&mut self, xs: &[&str], axis: i64) -> String {
        self.op("Concat", xs, &[("axis", axis.into())])
    }

    pub(super) fn softmax(&mut self, x: &str) -> String {
        self.op("Softmax", &[x], &[("axis", (-1i64).into())])
    }

    /// Split the last dim into heads: [1, t, h*dh] -> [1, h, t, dh].
    pub(super) fn heads(&mut self, x: &str, t: u64, h: u64, dh: u64) -> String {
        let r = self.reshape(x, &[1, t as i64, h as i64, dh as i64]);
        self.transpose(&r, &[0, 2, 1, 3])
    }

    /// Scaled dot-product attention of q [1,h,tq,dh] over k, v [1,h,tk,dh]; back to [1,tq,h*dh].
    pub(super) fn sdpa(&mut self, q: &str, k: &str, v: &str, (h, tq, dh): (u64, u64, u64)) -> String {
        let kt = self.transpose(k, &[0, 1, 3, 2]);
        let s = self.op("MatMul", &[q, &kt], &[]);
        let scale = self.c(1.0 / (dh as f32).sqrt());
        let s = self.op("Mul", &[&s, &scale], &[]);
        let p = self.softmax(&s);
        let o = self.op("MatMul", &[&p, v], &[]);
        let o = self.transpose(&o, &[0, 2, 1, 3]);
        self.reshape(&o, &[1, tq as i64, (h * dh) as i64])
    }

    /// Multi-head attention of x [1,t,d] over mem [1,tm,d] (self-attention when mem is x).
    pub(super) fn attention(&mut self, x: &str, mem: &str, (t, tm, d, h): (u64, u64, u64, u64)) -> String {
        let dh = d / h;
        let q = self.linear(x, d, d, true);
        let k = self.linear(mem, d, d, true);
        let v = self.linear(mem, d, d, true);
        let (q, k, v) = (self.heads(&q, t, h, dh), self.heads(&k, tm, h, dh), self.heads(&v, tm, h, dh));
        let o = self.sdpa(&q, &k, &v, (h, t, dh));
        self.linear(&o, d, d, true)
    }

    /// Pre-norm transformer encoder layer.
    pub(super) fn encoder_layer(&mut self, x: &str, (t, d, h, mlp): (u64, u64, u64, u64)) -> String {
        let n = self.layer_norm(x, d);
        let a = self.attention(&n, &n, (t, t, d, h));
        let x = self.op("Add", &[x, &a], &[]);
        let n = self.layer_norm(&x, d);
        let m = self.linear(&n, d, mlp, true);
        let m = self.gelu(&m);
        let m = self.linear(&m, mlp, d, true);
        self.op("Add", &[&x, &m], &[])
    }

    /// Image [1,c,s,s] to patch tokens [1,(s/p)^2,d] plus position embeddings.
    pub(super) fn patch_embed(&mut self, img: &str, (c, s, p, d): (u64, u64, u64, u64)) -> String {
        let e = self.conv(img, c, d, p, p as i64, 0);
        let g = s / p;
        let r = self.reshape(&e, &[1, d as i64, (g * g) as i64]);
        let t = self.transpose(&r, &[0, 2, 1]);
        let pos = self.bias(&[1, g * g, d]);
        self.op("Add", &[&t, &pos], &[])
    }
}
