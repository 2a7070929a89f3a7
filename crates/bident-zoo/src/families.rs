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

mod language;
mod long_sequence;
mod multimodal;
mod net;
mod unconventional;
mod vision;

use bident_ir::proto::ModelProto;

use net::Net;

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
        "resnet50" => vision::resnet(&mut n, full),
        "vit" => vision::vit(&mut n, full),
        "llama" => language::llama(&mut n, full),
        "mamba" => long_sequence::mamba(&mut n, full),
        "hyena" => long_sequence::hyena(&mut n, full),
        "kan" => unconventional::kan(&mut n, full),
        "snn-vgg9" => unconventional::snn(&mut n, full),
        "bitnet" => language::bitnet(&mut n, full),
        "lavish" => multimodal::lavish(&mut n, full),
        "pi05" => multimodal::pi05(&mut n, full),
        _ => return None,
    }
    Some(n.b.finish(&model_name))
}
