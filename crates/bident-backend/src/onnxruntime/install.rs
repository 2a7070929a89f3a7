//! Finding, and if needed installing, the pinned ONNX Runtime library.
//!
//! bident loads `libonnxruntime.so.1.32.0` from the pip wheel `onnxruntime==1.32.0`, installed
//! with pip's `--target` into `target/onnxruntime/1.32.0/`, never into the user's Python
//! environment. `BIDENT_ONNXRUNTIME_LIB` overrides the location with the library's full path.
//!
//! Which pin picks the other: the `ort` crate is built at API level 31 (`api-31`), so it needs a
//! library of minor version 31 or newer (checked when it is loaded); the wheel is pinned to 1.32.0
//! to satisfy that. Raising the API level means raising this pin first.

use std::path::{Path, PathBuf};

use crate::BackendError;
use crate::wheel::Wheel;

/// The pinned wheel version.
pub const ONNXRUNTIME_VERSION: &str = "1.32.0";
/// Environment variable naming the library file explicitly.
pub const LIBRARY_ENV: &str = "BIDENT_ONNXRUNTIME_LIB";

const WHEEL: Wheel = Wheel {
    what: "ONNX Runtime",
    package: "onnxruntime",
    version: ONNXRUNTIME_VERSION,
    library: "onnxruntime/capi/libonnxruntime.so.1.32.0",
    env: LIBRARY_ENV,
};

/// Folder the wheel is installed into, under a target directory.
pub fn install_dir(target_dir: &Path) -> PathBuf {
    WHEEL.install_dir(target_dir)
}

/// Where the library is, if it is already there.
pub fn find(target_dir: &Path) -> Option<PathBuf> {
    WHEEL.find(target_dir)
}

/// Return the library path, installing the pinned wheel with pip first when it is missing.
/// `say` receives one line when an install happens.
pub fn ensure(target_dir: &Path, say: &mut dyn FnMut(&str)) -> Result<PathBuf, BackendError> {
    WHEEL.ensure(target_dir, say)
}
