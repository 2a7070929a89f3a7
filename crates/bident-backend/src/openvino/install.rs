//! Finding, and if needed installing, the pinned OpenVINO runtime.
//!
//! bident uses the shared libraries of the pip wheel `openvino==2026.4.1`, installed with pip's
//! `--target` into a folder of the project (`target/openvino/<version>/`), never into the user's
//! Python environment. `BIDENT_OPENVINO_LIB` overrides the location with the full path of
//! `libopenvino_c.so.*`.

use std::path::{Path, PathBuf};

use crate::BackendError;
use crate::wheel::Wheel;

/// The pinned wheel version.
pub const OPENVINO_VERSION: &str = "2026.4.1";
/// The C library's file name inside the wheel's `openvino/libs/` (versioned name only).
pub const LIBRARY_FILE: &str = "libopenvino_c.so.2641";
/// Environment variable naming the library file explicitly.
pub const LIBRARY_ENV: &str = "BIDENT_OPENVINO_LIB";

const WHEEL: Wheel = Wheel {
    what: "OpenVINO runtime",
    package: "openvino",
    version: OPENVINO_VERSION,
    library: "openvino/libs/libopenvino_c.so.2641",
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
/// `say` receives one line when an install happens. Concurrent callers (parallel test binaries)
/// are serialised by a lock file.
pub fn ensure(target_dir: &Path, say: &mut dyn FnMut(&str)) -> Result<PathBuf, BackendError> {
    WHEEL.ensure(target_dir, say)
}
