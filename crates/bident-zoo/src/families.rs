//! The paper's ten model families (Table 1), built with seeded weights at two sizes and three
//! precisions: `<family>-<size>-<precision>`, e.g. `vit-tiny-fp16` or `mamba-full-int8`.
//!
//! - `tiny`: the same architecture, small enough for tests (seconds on a CPU);
//! - `full`: the paper's shapes (ViT-B/16, one LLaMA-7B decode layer, ...) except where noted
//!   in [`FAMILIES`] (a few blocks of a deep stack; those are said). The deep stacks (pi0.5,
//!   Mamba's 48 blocks) share one seeded weight set per stack: the ops, shapes and work are the
//!   model's, the file a fraction of its weights (pi0.5 is 0.37 GB in f16, not 6 GB).
//!   `tests/data/paper-size/sizes.txt` pins their sizes against the paper's, and says why
//!   bident's fused-op counts differ where they do;
//! - `fp32`, `fp16` (weights and activations in f16) and `int8` (int8 weights through
//!   `DequantizeLinear`, activations quantized and dequantized before every MatMul and Conv: the
//!   QDQ form NNCF produces).
//!
//! Forms chosen for the OpenVINO CPU plugin: Mamba's selective scan is a CumSum form (the plugin
//! computes `Scan` wrongly); Hyena's FFT convolution is a full complex DFT (a one-sided DFT gets
//! a wrong shape there).

use std::collections::HashMap;

use bident_ir::proto::ModelProto;
use bident_tensor::DType;

use crate::builder::{Attr, Builder};

/// Families, with what `full` is.
pub const FAMILIES: &[(&str, &str)] = &[
    ("resnet50", "ResNet-50 v1.5, 224x224, bottlenecks [3, 4, 6, 3]"),
    ("vit", "ViT-B/16: 224x224, patch 16, 12 layers, hidden 768, 12 heads, MLP 3072"),
    ("llama", "one LLaMA-7B decode layer: hidden 4096, 32 heads, KV cache of 512 positions, SwiGLU 11008"),
    ("mamba", "Mamba-370M's 48 blocks (sharing one weight set): d_model 1024, d_inner 2048, d_state 16, sequence 64"),
    ("hyena", "2 Hyena operator layers: width 768, sequence 1024, implicit filters, FFT long convolution"),
    ("kan", "KAN [64, 128, 64, 10], B-spline grid 5, order 3, batch 64"),
    ("snn-vgg9", "spiking VGG9 on 32x32 (7 conv + 2 linear), leaky integrate-and-fire, 4 time steps unrolled"),
    ("bitnet", "one BitNet b1.58 layer (ternary weights): hidden 2048, 16 heads, SwiGLU 5632, sequence 128"),
    ("lavish", "LAVISH: ViT-B/16 visual and audio towers (4 layers each shown) with cross-modal adapters"),
    (
        "pi05",
        "pi0.5 at the paper's depth: text embedder, INT8 SigLIP So400m/14 (27 layers), Gemma 2B prefix decoder (18 \
         layers) keeping each layer's cache, 10 denoising steps of an 18-layer Gemma 300M action expert; each stack \
         shares one weight set",
    ),
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Size {
    Tiny,
    Full,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precision {
    Fp32,
    Fp16,
    Int8,
}

impl Precision {
    pub fn name(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Fp16 => "fp16",
            Precision::Int8 => "int8",
        }
    }
}

/// `<family>-<size>-<precision>` into its parts.
pub fn parse(name: &str) -> Option<(&'static str, Size, Precision)> {
    let (rest, prec) = name.rsplit_once('-')?;
    let (family, size) = rest.rsplit_once('-')?;
    let family = FAMILIES.iter().map(|f| f.0).find(|f| *f == family)?;
    let size = match size {
        "tiny" => Size::Tiny,
        "full" => Size::Full,
        _ => return None,
    };
    let prec = [Precision::Fp32, Precision::Fp16, Precision::Int8].into_iter().find(|p| p.name() == prec)?;
    Some((family, size, prec))
}

/// Build a family model; None for an unknown name.
pub fn build(name: &str, seed: u64) -> Option<ModelProto> {
    let (family, size, prec) = parse(name)?;
    let full = size == Size::Full;
    let mut n = Net::new(seed, prec);
    let model_name = name.replace('-', "_");
    match family {
        "resnet50" => resnet(&mut n, full),
        "vit" => vit(&mut n, full),
        "llama" => llama(&mut n, full),
        "mamba" => mamba(&mut n, full),
        "hyena" => hyena(&mut n, full),
        "kan" => kan(&mut n, full),
        "snn-vgg9" => snn(&mut n, full),
        "bitnet" => bitnet(&mut n, full),
        "lavish" => lavish(&mut n, full),
        "pi05" => pi05(&mut n, full),
        _ => return None,
    }
    Some(n.b.finish(&model_name))
}

/// A builder that knows the precision: weights, constants and quantization follow it.
struct Net {
    b: Builder,
    prec: Precision,
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
    fn new(seed: u64, prec: Precision) -> Self {
        Self { b: Builder::new(seed), prec, k: 0, shares: HashMap::new(), current: None }
    }

    /// `layers` layers by `layer`, all with the weights the first layer of stack `key` made
    /// (in this call or an earlier one): the graph, shapes and work of a deep stack without its
    /// weights times its depth in the file (each use of an int8 weight keeps its own
    /// DequantizeLinear, as a quantized model has). Stacks nest; weights made outside any stack
    /// are their own.
    fn shared(&mut self, key: &'static str, layers: usize, mut layer: impl FnMut(&mut Net, usize)) {
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
    fn replayed(&mut self, shape: &[u64]) -> Option<(String, Option<String>)> {
        let s = self.shares.get_mut(self.current?).filter(|s| s.replay)?;
        let (have, name, scale) = s.made.get(s.next)?;
        s.next += 1;
        (have.as_slice() == shape).then(|| (name.clone(), scale.clone()))
    }

    fn record(&mut self, shape: &[u64], name: &str, scale: Option<&str>) {
        if let Some(s) = self.current.and_then(|k| self.shares.get_mut(k)).filter(|s| !s.replay) {
            s.made.push((shape.to_vec(), name.to_string(), scale.map(str::to_string)));
        }
    }

    /// Element type of activations.
    fn dt(&self) -> DType {
        if self.prec == Precision::Fp16 { DType::F16 } else { DType::F32 }
    }

    fn id(&mut self, what: &str) -> String {
        self.k += 1;
        format!("{what}{}", self.k)
    }

    fn input(&mut self, name: &str, shape: &[u64]) -> String {
        let dims: Vec<Option<u64>> = shape.iter().map(|&d| Some(d)).collect();
        let dt = self.dt();
        self.b.input_typed(name, dt, &dims, "")
    }

    fn output(&mut self, name: &str) {
        let dt = self.dt();
        self.b.output_of(name, dt);
    }

    fn op(&mut self, op: &str, inputs: &[&str], attrs: &[(&str, Attr)]) -> String {
        self.b.node(op, inputs, attrs)
    }

    /// A scalar constant in the activation type.
    fn c(&mut self, v: f32) -> String {
        let (name, dt) = (self.id("c"), self.dt());
        self.b.const_float(&name, dt, &[], &[v])
    }

    fn consts(&mut self, shape: &[u64], values: &[f32]) -> String {
        let (name, dt) = (self.id("k"), self.dt());
        self.b.const_float(&name, dt, shape, values)
    }

    fn ints(&mut self, v: &[i64]) -> String {
        let name = self.id("i");
        self.b.const_i64(&name, &[v.len() as u64], v)
    }

    /// A weight in the activation type; for int8, int8 values through DequantizeLinear.
    fn w(&mut self, shape: &[u64]) -> String {
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
    fn bias(&mut self, shape: &[u64]) -> String {
        if let Some((b, _)) = self.replayed(shape) {
            return b;
        }
        let (name, dt) = (self.id("b"), self.dt());
        let b = self.b.weight_typed(&name, dt, shape);
        self.record(shape, &b, None);
        b
    }

    /// Quantize and dequantize an activation (int8 only).
    fn qdq(&mut self, x: &str) -> String {
        if self.prec != Precision::Int8 {
            return x.to_string();
        }
        let name = self.id("q");
        let scale = self.b.scalar_f32(&format!("{name}.scale"), 0.05);
        let zp = self.b.const_i8(&format!("{name}.zp"), &[], &[0]);
        let q = self.op("QuantizeLinear", &[x, &scale, &zp], &[]);
        self.op("DequantizeLinear", &[&q, &scale, &zp], &[])
    }

    fn linear(&mut self, x: &str, din: u64, dout: u64, bias: bool) -> String {
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

    fn conv(&mut self, x: &str, cin: u64, cout: u64, k: u64, stride: i64, pad: i64) -> String {
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

    fn batchnorm(&mut self, x: &str, c: u64) -> String {
        let scale = self.consts(&[c], &vec![1.0; c as usize]);
        let bias = self.bias(&[c]);
        let mean = self.bias(&[c]);
        let var = self.consts(&[c], &(0..c).map(|i| 1.0 + i as f32 * 0.01).collect::<Vec<_>>());
        self.op("BatchNormalization", &[x, &scale, &bias, &mean, &var], &[])
    }

    fn relu(&mut self, x: &str) -> String {
        self.op("Relu", &[x], &[])
    }

    fn silu(&mut self, x: &str) -> String {
        let s = self.op("Sigmoid", &[x], &[]);
        self.op("Mul", &[x, &s], &[])
    }

    fn gelu(&mut self, x: &str) -> String {
        let r = self.c(std::f32::consts::FRAC_1_SQRT_2);
        let xs = self.op("Mul", &[x, &r], &[]);
        let e = self.op("Erf", &[&xs], &[]);
        let one = self.c(1.0);
        let e1 = self.op("Add", &[&e, &one], &[]);
        let half = self.c(0.5);
        let xh = self.op("Mul", &[x, &half], &[]);
        self.op("Mul", &[&xh, &e1], &[])
    }

    fn layer_norm(&mut self, x: &str, d: u64) -> String {
        let g = self.consts(&[d], &vec![1.0; d as usize]);
        let b = self.bias(&[d]);
        self.op("LayerNormalization", &[x, &g, &b], &[("axis", (-1i64).into())])
    }

    /// x / sqrt(mean(x^2) + eps) * g, over the last axis.
    fn rms_norm(&mut self, x: &str, d: u64) -> String {
        let sq = self.op("Mul", &[x, x], &[]);
        let m = self.op("ReduceMean", &[&sq], &[("axes", vec![-1i64].into()), ("keepdims", 1i64.into())]);
        let eps = self.c(1e-5);
        let me = self.op("Add", &[&m, &eps], &[]);
        let r = self.op("Sqrt", &[&me], &[]);
        let n = self.op("Div", &[x, &r], &[]);
        let g = self.consts(&[d], &vec![1.0; d as usize]);
        self.op("Mul", &[&n, &g], &[])
    }

    fn reshape(&mut self, x: &str, shape: &[i64]) -> String {
        let s = self.ints(shape);
        self.op("Reshape", &[x, &s], &[])
    }

    fn transpose(&mut self, x: &str, perm: &[i64]) -> String {
        self.op("Transpose", &[x], &[("perm", perm.to_vec().into())])
    }

    fn slice(&mut self, x: &str, axis: i64, start: i64, end: i64) -> String {
        let (s, e, a) = (self.ints(&[start]), self.ints(&[end]), self.ints(&[axis]));
        self.op("Slice", &[x, &s, &e, &a], &[])
    }

    fn concat(&mut self, xs: &[&str], axis: i64) -> String {
        self.op("Concat", xs, &[("axis", axis.into())])
    }

    fn softmax(&mut self, x: &str) -> String {
        self.op("Softmax", &[x], &[("axis", (-1i64).into())])
    }

    /// Split the last dim into heads: [1, t, h*dh] -> [1, h, t, dh].
    fn heads(&mut self, x: &str, t: u64, h: u64, dh: u64) -> String {
        let r = self.reshape(x, &[1, t as i64, h as i64, dh as i64]);
        self.transpose(&r, &[0, 2, 1, 3])
    }

    /// Scaled dot-product attention of q [1,h,tq,dh] over k, v [1,h,tk,dh]; back to [1,tq,h*dh].
    fn sdpa(&mut self, q: &str, k: &str, v: &str, (h, tq, dh): (u64, u64, u64)) -> String {
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
    fn attention(&mut self, x: &str, mem: &str, (t, tm, d, h): (u64, u64, u64, u64)) -> String {
        let dh = d / h;
        let q = self.linear(x, d, d, true);
        let k = self.linear(mem, d, d, true);
        let v = self.linear(mem, d, d, true);
        let (q, k, v) = (self.heads(&q, t, h, dh), self.heads(&k, tm, h, dh), self.heads(&v, tm, h, dh));
        let o = self.sdpa(&q, &k, &v, (h, t, dh));
        self.linear(&o, d, d, true)
    }

    /// Pre-norm transformer encoder layer.
    fn encoder_layer(&mut self, x: &str, (t, d, h, mlp): (u64, u64, u64, u64)) -> String {
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
    fn patch_embed(&mut self, img: &str, (c, s, p, d): (u64, u64, u64, u64)) -> String {
        let e = self.conv(img, c, d, p, p as i64, 0);
        let g = s / p;
        let r = self.reshape(&e, &[1, d as i64, (g * g) as i64]);
        let t = self.transpose(&r, &[0, 2, 1]);
        let pos = self.bias(&[1, g * g, d]);
        self.op("Add", &[&t, &pos], &[])
    }
}

fn resnet(n: &mut Net, full: bool) {
    let (s, w, blocks) = if full { (224, 64, [3, 4, 6, 3]) } else { (64, 16, [1, 1, 1, 1]) };
    let x = n.input("image", &[1, 3, s, s]);
    let c = n.conv(&x, 3, w, 7, 2, 3);
    let c = n.batchnorm(&c, w);
    let c = n.relu(&c);
    let mut x = n.op(
        "MaxPool",
        &[&c],
        &[("kernel_shape", vec![3, 3].into()), ("strides", vec![2, 2].into()), ("pads", vec![1; 4].into())],
    );
    let mut cin = w;
    for (stage, &count) in blocks.iter().enumerate() {
        let mid = w << stage;
        let out = mid * 4;
        for i in 0..count {
            let stride = if i == 0 && stage > 0 { 2 } else { 1 };
            let a = n.conv(&x, cin, mid, 1, 1, 0);
            let a = n.batchnorm(&a, mid);
            let a = n.relu(&a);
            let a = n.conv(&a, mid, mid, 3, stride, 1);
            let a = n.batchnorm(&a, mid);
            let a = n.relu(&a);
            let a = n.conv(&a, mid, out, 1, 1, 0);
            let a = n.batchnorm(&a, out);
            let skip = if i == 0 {
                let p = n.conv(&x, cin, out, 1, stride, 0);
                n.batchnorm(&p, out)
            } else {
                x.clone()
            };
            let sum = n.op("Add", &[&a, &skip], &[]);
            x = n.relu(&sum);
            cin = out;
        }
    }
    let p = n.op("GlobalAveragePool", &[&x], &[]);
    let f = n.op("Flatten", &[&p], &[]);
    let y = n.linear(&f, cin, 1000, true);
    n.output(&y);
}

fn vit(n: &mut Net, full: bool) {
    let (s, p, d, layers, h, mlp) = if full { (224, 16, 768, 12, 12, 3072) } else { (32, 8, 64, 2, 4, 128) };
    let img = n.input("image", &[1, 3, s, s]);
    let tokens = n.patch_embed(&img, (3, s, p, d));
    let cls = n.bias(&[1, 1, d]);
    let mut x = n.concat(&[&cls, &tokens], 1);
    let t = (s / p) * (s / p) + 1;
    for _ in 0..layers {
        x = n.encoder_layer(&x, (t, d, h, mlp));
    }
    let x = n.layer_norm(&x, d);
    let c = n.slice(&x, 1, 0, 1);
    let c = n.reshape(&c, &[1, d as i64]);
    let y = n.linear(&c, d, 1000, true);
    n.output(&y);
}

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

fn llama(n: &mut Net, full: bool) {
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

fn mamba(n: &mut Net, full: bool) {
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

fn hyena(n: &mut Net, full: bool) {
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

fn kan(n: &mut Net, full: bool) {
    let (b, widths): (u64, &[u64]) = if full { (64, &[64, 128, 64, 10]) } else { (4, &[8, 8, 4]) };
    let mut x = n.input("x", &[b, widths[0]]);
    for w in widths.windows(2) {
        x = kan_layer(n, &x, b, w[0], w[1]);
        // keep the next layer's input on the grid
        x = n.op("Tanh", &[&x], &[]);
    }
    n.output(&x);
}

fn snn(n: &mut Net, full: bool) {
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

fn bitnet(n: &mut Net, full: bool) {
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

fn lavish(n: &mut Net, full: bool) {
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

fn pi05(n: &mut Net, full: bool) {
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
