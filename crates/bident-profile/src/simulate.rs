//! Virtual SoCs: cost tables from an analytic model instead of measurement. **Every figure made
//! here is simulated**; the cost table says so (`simulated`, `measured_on`, power source
//! [`PowerSource::Simulated`], contention source [`ContentionSource::Simulated`]).
//!
//! The model, per fused op (its static [`Work`]) and PU:
//! - dispatch: a fixed submission cost per op;
//! - execution: a class's fixed kernel-launch cost, plus compute (FLOPs at the PU's rate: the MAC
//!   rate of the op's dtype for MAC classes, the vector rate otherwise, times the class's
//!   efficiency on that PU) and memory traffic at the PU's bandwidth. Compute and memory overlap
//!   (the longer counts) where the PU prefetches; on a PU that first moves data into local memory
//!   by DMA (the NPU) they add up;
//! - H2D and D2H (accelerators only): a fixed mapping cost plus bytes at the transfer bandwidth;
//! - power: the PU's sustained package power under load;
//! - support: op types a PU cannot run (no entry, with the reason).
//!
//! The `lunar-lake` preset is calibrated to the BIDENT paper's published observations on Intel
//! Core Ultra Series 2 (Lunar Lake; collected in `shared/paper-figures.md`), not derived from
//! datasheets. The paper does not give the shapes behind Observation 1; the probe shapes this
//! calibration used are in `tests/data/observations/`, whose tests check that the preset
//! reproduces the paper's winners and ratios on them.

use std::collections::BTreeMap;

use bident_backend::{PuKind, PuSpec, SocSpec};
use bident_ir::{FusedGraph, OpClass, Work};
use serde::{Deserialize, Serialize};

use crate::{Contention, ContentionSource, Cost, CostTable, OpCosts, PowerSource, ProfileError};

/// Rates of one class of op on one PU, relative to the PU's base rate for the class.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClassModel {
    /// Multiplier on the base rate (MAC rate for MAC classes, vector rate otherwise).
    pub efficiency: f64,
    /// Fixed cost of launching the class's kernel, microseconds.
    pub launch_us: f64,
}

/// The analytic model of one virtual PU. Rates are effective (what a backend reaches on
/// batch-1 inference), not peak.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VirtualPu {
    pub dispatch_us: f64,
    /// MAC rate in GFLOP/s for operands of 4+ bytes (f32), 2 bytes (f16, bf16) and 1 byte (int8).
    pub mac_gflops: [f64; 3],
    /// Rate of non-MAC arithmetic, GFLOP/s.
    pub vector_gflops: f64,
    /// Memory bandwidth seen by the PU's kernels, GB/s.
    pub bandwidth_gbs: f64,
    /// Compute and memory traffic overlap (else they add up).
    pub overlap: bool,
    /// Per-class efficiency and launch cost; a class not listed runs at efficiency 1, launch 0.
    pub classes: BTreeMap<OpClass, ClassModel>,
    /// H2D/D2H on an accelerator: fixed cost per transfer (µs) and bandwidth (GB/s).
    pub transfer_us: f64,
    pub transfer_gbs: f64,
    /// Sustained package power under load, watts.
    pub power_w: f64,
    /// Op types this PU cannot run, with the reason.
    pub unsupported: BTreeMap<String, String>,
}

/// A virtual SoC: the spec every stage sees, and the model of each PU (same order).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct VirtualSoc {
    pub spec: SocSpec,
    pub pus: Vec<VirtualPu>,
    /// `sf[i][j]`: slowdown of PU i's ops while PU j is busy (1 on the diagonal).
    pub contention: Vec<Vec<f64>>,
    /// What the model was calibrated against.
    pub calibration: &'static str,
}

/// The names of the virtual SoC presets.
pub const PRESETS: &[&str] = &["lunar-lake"];

impl VirtualSoc {
    pub fn preset(name: &str) -> Option<VirtualSoc> {
        match name {
            "lunar-lake" => Some(lunar_lake()),
            _ => None,
        }
    }
}

fn classes(list: &[(OpClass, f64, f64)]) -> BTreeMap<OpClass, ClassModel> {
    list.iter().map(|&(c, efficiency, launch_us)| (c, ClassModel { efficiency, launch_us })).collect()
}

/// Intel Core Ultra Series 2 (Lunar Lake) as the BIDENT paper measured it: CPU (4P+4E), Arc 140V
/// GPU, NPU 4. Calibration (all simulated; see the module docs):
/// - dispatch 10 / 15 / 20 µs (CPU / GPU / NPU) and the MAC rates place Observation 2's FP16
///   crossover between N = 64 and 128 and its INT8 crossovers at N = 256 (GPU) and 2048 (NPU);
/// - the FP16 MatMul rates give the CPU/GPU ratio 4.8 at N = 2048 and, at N = 256, the
///   Observation 1 MatMul ratios (CPU 2.8x, NPU 1.6x the GPU's time);
/// - class efficiencies give Observation 1's Conv2D ratios (2.2x, 1.1x), the CPU's lead on
///   depthwise convolution and Add, and the NPU's DSP penalties on RDFT (4.7x), CumSum (8.7x)
///   and Gather (4.1x);
/// - power: GPU > CPU > NPU (section 4.2); contention: SF(NPU | CPU) = 1.17, SF(NPU | GPU) = 1.09,
///   CPU and GPU barely disturbed (section 3.2.2).
fn lunar_lake() -> VirtualSoc {
    let pu = |name: &str, kind: PuKind, power_w: f64| PuSpec {
        name: name.into(),
        backend: "virtual".into(),
        kind,
        device: kind.name().to_uppercase(),
        properties: BTreeMap::new(),
        cores: vec![],
        declared_power_w: power_w,
        whole_only: false,
    };
    let control_unsupported = |pu: &str| -> BTreeMap<String, String> {
        ["If", "Loop", "Scan"]
            .iter()
            .map(|op| (op.to_string(), format!("{op}: this model runs control flow on the CPU only, not the {pu}")))
            .collect()
    };
    let cpu = VirtualPu {
        dispatch_us: 10.0,
        mac_gflops: [400.0, 400.0, 800.0],
        vector_gflops: 100.0,
        bandwidth_gbs: 60.0,
        overlap: true,
        classes: classes(&[(OpClass::DepthwiseConv, 0.25, 0.0), (OpClass::Fft, 0.5, 0.0)]),
        transfer_us: 0.0,
        transfer_gbs: 1.0,
        power_w: 12.0,
        unsupported: BTreeMap::new(),
    };
    let gpu = VirtualPu {
        dispatch_us: 15.0,
        mac_gflops: [960.0, 1920.0, 3000.0],
        vector_gflops: 400.0,
        bandwidth_gbs: 80.0,
        overlap: true,
        classes: classes(&[
            (OpClass::Conv, 0.477, 0.0),
            (OpClass::DepthwiseConv, 0.0375, 0.0),
            (OpClass::Fft, 0.1, 0.0),
        ]),
        transfer_us: 3.0,
        transfer_gbs: 20.0,
        power_w: 16.0,
        unsupported: control_unsupported("GPU"),
    };
    let mut npu_unsupported = control_unsupported("NPU");
    for op in ["BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot", "NonZero", "Unique"] {
        npu_unsupported.insert(op.into(), format!("the NPU compiler has no {op}"));
    }
    let npu = VirtualPu {
        dispatch_us: 20.0,
        // f32 runs at the f16 rate: the NPU computes in f16
        mac_gflops: [1240.0, 1240.0, 3280.0],
        vector_gflops: 30.0,
        bandwidth_gbs: 80.0,
        overlap: false,
        classes: classes(&[
            (OpClass::Conv, 0.709, 0.0),
            (OpClass::DepthwiseConv, 0.1, 0.0),
            (OpClass::Fft, 0.395, 30.0),
            (OpClass::Scan, 0.03, 30.0),
            (OpClass::Gather, 1.0, 24.0),
        ]),
        transfer_us: 5.0,
        transfer_gbs: 10.0,
        power_w: 6.0,
        unsupported: npu_unsupported,
    };
    VirtualSoc {
        spec: SocSpec {
            name: "lunar-lake".into(),
            backend: "virtual".into(),
            simulated: true,
            pus: vec![
                pu("cpu", PuKind::Cpu, cpu.power_w),
                pu("gpu", PuKind::Gpu, gpu.power_w),
                pu("npu", PuKind::Npu, npu.power_w),
            ],
        },
        pus: vec![cpu, gpu, npu],
        contention: vec![vec![1.0, 1.02, 1.02], vec![1.02, 1.0, 1.02], vec![1.17, 1.09, 1.0]],
        calibration: "BIDENT paper (Lunar Lake): Observations 1-2, contention factors, power ordering",
    }
}

impl VirtualPu {
    /// The cost of an op with this work on this PU, or why it cannot run here.
    pub fn cost(&self, w: &Work, kind: PuKind) -> Result<Cost, String> {
        if let Some(reason) = w.op_types.iter().find_map(|t| self.unsupported.get(t)) {
            return Err(format!("{reason} (simulated)"));
        }
        // the analytic model prices an op by what the registry knows of it; an op it does not
        // know would get a made-up cost, where a real PU would refuse or price it for real
        if w.class == OpClass::Other {
            return Err(format!(
                "`{}` is not in bident's op registry, so the virtual SoC has no cost model for it (simulated)",
                w.op_types.join("+")
            ));
        }
        let class = self.classes.get(&w.class).copied().unwrap_or(ClassModel { efficiency: 1.0, launch_us: 0.0 });
        let base = if w.class.is_mac() {
            match w.dtype.size() {
                0 | 1 => self.mac_gflops[2],
                2 => self.mac_gflops[1],
                _ => self.mac_gflops[0],
            }
        } else {
            self.vector_gflops
        };
        let compute_us = w.flops as f64 / (base * class.efficiency * 1e3);
        let total = w.bytes_in.saturating_add(w.weight_bytes).saturating_add(w.bytes_out);
        // a gather reads only the rows it moves
        let traffic = if w.class == OpClass::Gather { total.min(w.bytes_out.saturating_mul(3)) } else { total };
        let memory_us = traffic as f64 / (self.bandwidth_gbs * 1e3);
        let exec_us = class.launch_us + if self.overlap { compute_us.max(memory_us) } else { compute_us + memory_us };
        let transfer = |bytes: u64| {
            if kind.is_accelerator() { self.transfer_us + bytes as f64 / (self.transfer_gbs * 1e3) } else { 0.0 }
        };
        let (h2d_us, d2h_us) = (transfer(w.bytes_in), transfer(w.bytes_out));
        let parts = [h2d_us, self.dispatch_us, exec_us, d2h_us];
        Ok(Cost {
            h2d_us,
            dispatch_us: self.dispatch_us,
            exec_us,
            d2h_us,
            p10_us: parts,
            p90_us: parts,
            runs: 0,
            power_w: self.power_w,
            power: PowerSource::Simulated,
            stop_check: None,
        })
    }
}

/// Input hash of a simulated cost table: the fused graph, the SoC and its model.
pub fn input_hash(
    graph: bident_artifact::ContentHash,
    soc: &VirtualSoc,
) -> Result<bident_artifact::ContentHash, bident_artifact::ArtifactError> {
    bident_artifact::ContentHash::of_value(&(graph, soc))
}

/// The cost table of `g` on a virtual SoC: every figure simulated.
pub fn simulate(g: &FusedGraph, soc: &VirtualSoc) -> Result<CostTable, ProfileError> {
    let ops = (0..g.ops.len())
        .map(|i| {
            let work = &g.ops[i].work;
            let results = soc.spec.pus.iter().zip(&soc.pus).map(|(spec, model)| model.cost(work, spec.kind));
            OpCosts::from_results(g, i as u32, &soc.spec, results)
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(CostTable {
        model: g.name.clone(),
        graph: g.content_hash()?,
        soc: soc.spec.clone(),
        simulated: true,
        backend: "virtual (analytic model)".into(),
        measured_on: format!("nowhere: simulated {} (calibrated to {})", soc.spec.name, soc.calibration),
        warmup: 0,
        io_every_call: vec![false; soc.spec.pus.len()],
        launch_us: vec![],
        segments: vec![],
        components: soc
            .spec
            .pus
            .iter()
            .map(|pu| {
                let transfers = if pu.kind.is_accelerator() {
                    "h2d/d2h = a fixed mapping cost plus bytes at the transfer bandwidth"
                } else {
                    "h2d/d2h = 0 (host memory)"
                };
                format!(
                    "SIMULATED: dispatch = the PU's fixed submission cost; exec = the class's launch cost plus \
                     compute (FLOPs at the class's rate) and memory traffic (bytes at the bandwidth); {transfers}"
                )
            })
            .collect(),
        contention: Some(Contention { sf: soc.contention.clone(), source: ContentionSource::Simulated }),
        ops,
    })
}
