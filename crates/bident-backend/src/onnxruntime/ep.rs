//! The execution providers an ONNX Runtime PU can name as its `device`, how bident appends each
//! to a session, and which kind of PU each makes.
//!
//! Which providers a library has is its build's business: the pip wheel `onnxruntime` has the
//! CPU provider only (and Azure's, which bident does not append), `onnxruntime-gpu` adds CUDA and
//! TensorRT. [`available`] asks the loaded library (`GetAvailableProviders`); a PU naming a
//! provider it lacks is refused before any session is built.

use std::ffi::{CStr, CString, c_char, c_int};

use ort::sys::{OrtSessionOptions, OrtStatusPtr};

use super::check;
use crate::PuKind;

/// How a provider is added to a session's options.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Append {
    /// Nothing to add: ONNX Runtime puts the CPU provider last in every session. It takes no
    /// options here.
    Cpu,
    /// `SessionOptionsAppendExecutionProvider` with this name (ONNX Runtime's list of providers
    /// appended by name) and the options as key/value strings.
    ByName(&'static CStr),
    /// `CreateCUDAProviderOptions` + `UpdateCUDAProviderOptions` +
    /// `SessionOptionsAppendExecutionProvider_CUDA_V2`.
    Cuda,
    /// The same three calls for TensorRT.
    TensorRt,
}

/// One execution provider bident can append.
#[derive(Debug)]
pub(super) struct Provider {
    /// The PU's `device`.
    pub device: &'static str,
    /// ONNX Runtime's name for it: what `GetAvailableProviders` lists and what profiles record
    /// as each node's provider.
    pub ort_name: &'static str,
    /// The kind of PU it makes unless an option says otherwise ([`Provider::kind`]).
    pub kind: PuKind,
    append: Append,
}

/// Every provider bident can append, CPU first (the order `devices` lists them in). Not here:
/// the plugin providers (NVIDIA's TensorRT RTX left the library in 1.32 and is appended through
/// `RegisterExecutionProviderLibrary` and `OrtEpDevice`s), and Azure's, WebNN's and JS's, which
/// are not processing units.
pub(super) const PROVIDERS: &[Provider] = &[
    Provider { device: "CPU", ort_name: "CPUExecutionProvider", kind: PuKind::Cpu, append: Append::Cpu },
    Provider { device: "CUDA", ort_name: "CUDAExecutionProvider", kind: PuKind::Gpu, append: Append::Cuda },
    Provider { device: "TensorRT", ort_name: "TensorrtExecutionProvider", kind: PuKind::Gpu, append: Append::TensorRt },
    Provider {
        device: "DirectML",
        ort_name: "DmlExecutionProvider",
        kind: PuKind::Gpu,
        append: Append::ByName(c"DML"),
    },
    Provider {
        device: "MIGraphX",
        ort_name: "MIGraphXExecutionProvider",
        kind: PuKind::Gpu,
        append: Append::ByName(c"MIGraphX"),
    },
    Provider {
        device: "WebGPU",
        ort_name: "WebGpuExecutionProvider",
        kind: PuKind::Gpu,
        append: Append::ByName(c"WebGPU"),
    },
    Provider { device: "QNN", ort_name: "QNNExecutionProvider", kind: PuKind::Npu, append: Append::ByName(c"QNN") },
    Provider {
        device: "CoreML",
        ort_name: "CoreMLExecutionProvider",
        kind: PuKind::Npu,
        append: Append::ByName(c"CoreML"),
    },
    Provider {
        device: "OpenVINO",
        ort_name: "OpenVINOExecutionProvider",
        kind: PuKind::Cpu,
        append: Append::ByName(c"OpenVINO"),
    },
    Provider {
        device: "XNNPACK",
        ort_name: "XnnpackExecutionProvider",
        kind: PuKind::Cpu,
        append: Append::ByName(c"XNNPACK"),
    },
    Provider {
        device: "VitisAI",
        ort_name: "VitisAIExecutionProvider",
        kind: PuKind::Npu,
        append: Append::ByName(c"VitisAI"),
    },
];

/// The provider a PU's `device` names, if bident knows it.
pub(super) fn by_device(device: &str) -> Option<&'static Provider> {
    PROVIDERS.iter().find(|p| p.device == device)
}

impl Provider {
    pub fn is_cpu(&self) -> bool {
        self.append == Append::Cpu
    }

    /// The kind of PU this provider makes with these options: the provider's own, unless an
    /// option picks the hardware (QNN's `backend_type` or `backend_path`, OpenVINO's
    /// `device_type`, CoreML's `MLComputeUnits`). A value it does not recognise leaves the
    /// provider's kind (ONNX Runtime judges the value itself).
    pub fn kind(&self, options: &[(String, String)]) -> PuKind {
        let get = |key: &str| options.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
        let picked = match self.device {
            "QNN" => get("backend_type")
                .map(|t| match t.to_ascii_lowercase().as_str() {
                    "cpu" => PuKind::Cpu,
                    "gpu" => PuKind::Gpu,
                    _ => PuKind::Npu,
                })
                .or_else(|| {
                    get("backend_path").map(|p| {
                        let file = p.rsplit(['/', '\\']).next().unwrap_or(p).to_ascii_lowercase();
                        if file.contains("qnncpu") {
                            PuKind::Cpu
                        } else if file.contains("qnngpu") {
                            PuKind::Gpu
                        } else {
                            PuKind::Npu
                        }
                    })
                }),
            // `GPU.1`, `NPU`, `HETERO:GPU,CPU` (the first device it tries)
            "OpenVINO" => get("device_type").map(|t| {
                let first = t.rsplit(':').next().unwrap_or(t).split(',').next().unwrap_or(t);
                PuKind::from_device_name(first.trim())
            }),
            "CoreML" => get("MLComputeUnits").and_then(|u| match u {
                "CPUOnly" => Some(PuKind::Cpu),
                "CPUAndGPU" => Some(PuKind::Gpu),
                "CPUAndNeuralEngine" | "ALL" => Some(PuKind::Npu),
                _ => None,
            }),
            _ => None,
        };
        picked.unwrap_or(self.kind)
    }

    /// Append the provider with its options to a session's options. A refusal from ONNX
    /// Runtime (an unknown option, a bad value, a provider that fails to load) is the error.
    pub fn append(&self, session: *mut OrtSessionOptions, options: &[(String, String)]) -> Result<(), String> {
        let strings = |pick: fn(&(String, String)) -> &String| {
            options
                .iter()
                .map(|o| CString::new(pick(o).as_str()).map_err(|_| format!("option `{}` contains a NUL byte", o.0)))
                .collect::<Result<Vec<_>, _>>()
        };
        let (keys, values) = (strings(|o| &o.0)?, strings(|o| &o.1)?);
        let keys: Vec<*const c_char> = keys.iter().map(|k| k.as_ptr()).collect();
        let values: Vec<*const c_char> = values.iter().map(|v| v.as_ptr()).collect();
        let api = ort::api();
        // SAFETY: `session` is a live session options object; the key and value arrays hold
        // `keys.len()` NUL-terminated strings that outlive the calls (ONNX Runtime copies them).
        unsafe {
            match self.append {
                Append::Cpu if options.is_empty() => Ok(()),
                Append::Cpu => Err("the CPU execution provider takes no options".into()),
                Append::ByName(name) => check((api.SessionOptionsAppendExecutionProvider)(
                    session,
                    name.as_ptr(),
                    keys.as_ptr(),
                    values.as_ptr(),
                    keys.len(),
                )),
                Append::Cuda => append_v2(
                    session,
                    api.CreateCUDAProviderOptions,
                    api.UpdateCUDAProviderOptions,
                    api.SessionOptionsAppendExecutionProvider_CUDA_V2,
                    api.ReleaseCUDAProviderOptions,
                    &keys,
                    &values,
                ),
                Append::TensorRt => append_v2(
                    session,
                    api.CreateTensorRTProviderOptions,
                    api.UpdateTensorRTProviderOptions,
                    api.SessionOptionsAppendExecutionProvider_TensorRT_V2,
                    api.ReleaseTensorRTProviderOptions,
                    &keys,
                    &values,
                ),
            }
        }
    }
}

type Create<T> = unsafe extern "system" fn(*mut *mut T) -> OrtStatusPtr;
type Update<T> = unsafe extern "system" fn(*mut T, *const *const c_char, *const *const c_char, usize) -> OrtStatusPtr;
type AppendV2<T> = unsafe extern "system" fn(*mut OrtSessionOptions, *const T) -> OrtStatusPtr;

/// The V2 options-struct protocol of CUDA and TensorRT: create the provider's options, update
/// them from strings, append, release.
///
/// SAFETY: `session` is live; `keys` and `values` are as long as each other and hold
/// NUL-terminated strings; the four functions belong to one provider.
unsafe fn append_v2<T>(
    session: *mut OrtSessionOptions,
    create: Create<T>,
    update: Update<T>,
    append: AppendV2<T>,
    release: unsafe extern "system" fn(*mut T),
    keys: &[*const c_char],
    values: &[*const c_char],
) -> Result<(), String> {
    let mut options = std::ptr::null_mut();
    // SAFETY: per the function's contract; the options are released once, whatever happens
    // after they were created (ONNX Runtime copies them when appending).
    unsafe {
        check(create(&mut options))?;
        let outcome = check(update(options, keys.as_ptr(), values.as_ptr(), keys.len()))
            .and_then(|()| check(append(session, options)));
        release(options);
        outcome
    }
}

/// The providers the loaded library has, by ONNX Runtime's names.
pub(super) fn available() -> Result<Vec<String>, String> {
    let api = ort::api();
    let mut list: *mut *mut c_char = std::ptr::null_mut();
    let mut n: c_int = 0;
    // SAFETY: ONNX Runtime fills `list` with `n` NUL-terminated strings, read here and
    // released once with the same count.
    unsafe {
        check((api.GetAvailableProviders)(&mut list, &mut n))?;
        if list.is_null() {
            return Ok(vec![]);
        }
        let names = (0..n.max(0) as usize)
            .map(|i| *list.add(i))
            .filter(|p| !p.is_null())
            .map(|p| CStr::from_ptr(p).to_string_lossy().into_owned())
            .collect();
        check((api.ReleaseAvailableProviders)(list, n))?;
        Ok(names)
    }
}

/// The PU properties that are provider options: `EP.<option>` gives `<option>`.
pub(super) const OPTION_PREFIX: &str = "EP.";

/// The provider options among a PU's properties, in key order.
pub(super) fn options_of<'a>(properties: impl IntoIterator<Item = (&'a String, &'a String)>) -> Vec<(String, String)> {
    properties
        .into_iter()
        .filter_map(|(k, v)| k.strip_prefix(OPTION_PREFIX).map(|o| (o.to_string(), v.clone())))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn names_are_unique_and_cpu_comes_first() {
        assert!(PROVIDERS[0].is_cpu() && PROVIDERS[1..].iter().all(|p| !p.is_cpu()));
        for (i, p) in PROVIDERS.iter().enumerate() {
            assert!(PROVIDERS[..i].iter().all(|q| q.device != p.device && q.ort_name != p.ort_name), "{p:?}");
            assert_eq!(by_device(p.device).map(|q| q.ort_name), Some(p.ort_name));
        }
        assert!(by_device("GPU").is_none() && by_device("cuda").is_none());
    }

    #[test]
    fn kinds_follow_the_provider_and_its_options() {
        let kind = |device: &str, o: &[(&str, &str)]| by_device(device).map(|p| p.kind(&opts(o)));
        assert_eq!(kind("CUDA", &[("device_id", "1")]), Some(PuKind::Gpu));
        assert_eq!(kind("TensorRT", &[]), Some(PuKind::Gpu));
        assert_eq!(kind("DirectML", &[]), Some(PuKind::Gpu));
        assert_eq!(kind("XNNPACK", &[]), Some(PuKind::Cpu));
        assert_eq!(kind("QNN", &[]), Some(PuKind::Npu));
        assert_eq!(kind("QNN", &[("backend_type", "htp")]), Some(PuKind::Npu));
        assert_eq!(kind("QNN", &[("backend_type", "GPU")]), Some(PuKind::Gpu));
        assert_eq!(kind("QNN", &[("backend_path", "/opt/qnn/lib/libQnnCpu.so")]), Some(PuKind::Cpu));
        assert_eq!(kind("QNN", &[("backend_path", "QnnHtp.dll")]), Some(PuKind::Npu));
        assert_eq!(kind("OpenVINO", &[]), Some(PuKind::Cpu));
        assert_eq!(kind("OpenVINO", &[("device_type", "GPU.1")]), Some(PuKind::Gpu));
        assert_eq!(kind("OpenVINO", &[("device_type", "HETERO:NPU,CPU")]), Some(PuKind::Npu));
        assert_eq!(kind("CoreML", &[]), Some(PuKind::Npu));
        assert_eq!(kind("CoreML", &[("MLComputeUnits", "CPUAndGPU")]), Some(PuKind::Gpu));
        assert_eq!(kind("CoreML", &[("MLComputeUnits", "CPUOnly")]), Some(PuKind::Cpu));
        assert_eq!(kind("CoreML", &[("MLComputeUnits", "Toaster")]), Some(PuKind::Npu));
    }

    #[test]
    fn options_are_the_prefixed_properties() {
        let props: std::collections::BTreeMap<String, String> =
            [("EP.device_id", "0"), ("INTRA_OP_NUM_THREADS", "1"), ("EP.trt_fp16_enable", "1"), ("ep.lowercase", "x")]
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
        assert_eq!(options_of(&props), opts(&[("device_id", "0"), ("trt_fp16_enable", "1")]));
    }

    /// The append paths against the real library: every provider it lacks is refused by ONNX
    /// Runtime itself when appended (by name or through its V2 options), the CPU provider takes
    /// no options, and what the library has is appended.
    #[test]
    fn appending_what_the_library_lacks_is_refused() {
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
        let lib = super::super::install::ensure(&target, &mut |l| eprintln!("{l}")).expect("ONNX Runtime");
        let ort = super::super::OnnxRuntime::load(&lib).expect("loads");
        let have = available().expect("providers");
        assert!(have.iter().any(|p| p == "CPUExecutionProvider"), "{have:?}");
        for p in PROVIDERS {
            let mut builder = ort::session::Session::builder(&ort.env).expect("builder");
            let session = ort::AsPointer::ptr_mut(&mut builder);
            let with_option = p.append(session, &opts(&[("device_id", "0")]));
            if p.is_cpu() {
                assert!(with_option.is_err_and(|e| e.contains("takes no options")));
                assert_eq!(p.append(session, &[]), Ok(()));
            } else if !have.iter().any(|h| h == p.ort_name) {
                let e = with_option.expect_err(p.device);
                assert!(!e.is_empty() && !e.contains('\n'), "{}: {e}", p.device);
            }
        }
    }
}
