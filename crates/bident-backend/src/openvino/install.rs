//! Finding, and if needed installing, the pinned OpenVINO runtime.
//!
//! bident uses the shared libraries of the pip wheel `openvino==2026.4.1`, installed with pip's
//! `--target` into a folder of the project (`target/openvino/<version>/`), never into the user's
//! Python environment. `BIDENT_OPENVINO_LIB` overrides the location with the full path of
//! `libopenvino_c.so.*`.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::BackendError;

/// The pinned wheel version.
pub const OPENVINO_VERSION: &str = "2026.4.1";
/// The C library's file name inside the wheel's `openvino/libs/` (versioned name only).
pub const LIBRARY_FILE: &str = "libopenvino_c.so.2641";
/// Environment variable naming the library file explicitly.
pub const LIBRARY_ENV: &str = "BIDENT_OPENVINO_LIB";

/// Folder the wheel is installed into, under a target directory.
pub fn install_dir(target_dir: &Path) -> PathBuf {
    target_dir.join("openvino").join(OPENVINO_VERSION)
}

fn library_in(dir: &Path) -> PathBuf {
    dir.join("openvino").join("libs").join(LIBRARY_FILE)
}

/// Where the library is, if it is already there.
pub fn find(target_dir: &Path) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(LIBRARY_ENV) {
        return Some(PathBuf::from(p));
    }
    let lib = library_in(&install_dir(target_dir));
    lib.is_file().then_some(lib)
}

/// Return the library path, installing the pinned wheel with pip first when it is missing.
/// `say` receives one line when an install happens. Concurrent callers (parallel test binaries)
/// are serialised by a lock file.
pub fn ensure(target_dir: &Path, say: &mut dyn FnMut(&str)) -> Result<PathBuf, BackendError> {
    if let Some(lib) = find(target_dir) {
        return check_exists(lib);
    }
    let dir = install_dir(target_dir);
    let io = |what: &str, e: std::io::Error| BackendError::Library(format!("{what}: {e}"));
    std::fs::create_dir_all(&dir).map_err(|e| io(&dir.display().to_string(), e))?;
    let lock_path = dir.with_extension("lock");
    let lock = File::create(&lock_path).map_err(|e| io(&lock_path.display().to_string(), e))?;
    lock.lock().map_err(|e| io("locking the install folder", e))?;
    let lib = library_in(&dir);
    if lib.is_file() {
        return Ok(lib);
    }
    say(&format!(
        "OpenVINO runtime not found: installing openvino=={OPENVINO_VERSION} with pip into {}",
        dir.display()
    ));
    let python = ["python3", "python"]
        .into_iter()
        .find(|p| Command::new(p).arg("--version").output().is_ok_and(|o| o.status.success()))
        .ok_or_else(|| {
            BackendError::Library(format!(
                "the OpenVINO runtime is missing and no Python was found to install it; install Python 3 with pip, or set {LIBRARY_ENV} to the full path of {LIBRARY_FILE}"
            ))
        })?;
    let out = Command::new(python)
        .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps", "--upgrade", "--target"])
        .arg(&dir)
        .arg(format!("openvino=={OPENVINO_VERSION}"))
        .output()
        .map_err(|e| io("running pip", e))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let hint =
            if err.contains("No module named pip") { " (this Python has no pip: install python3-pip)" } else { "" };
        return Err(BackendError::Library(format!(
            "pip could not install openvino=={OPENVINO_VERSION}{hint}: {}",
            err.lines().rfind(|l| !l.trim().is_empty()).unwrap_or("no message")
        )));
    }
    check_exists(lib)
}

fn check_exists(lib: PathBuf) -> Result<PathBuf, BackendError> {
    if lib.is_file() {
        Ok(lib)
    } else {
        Err(BackendError::Library(format!(
            "{} does not exist (set {LIBRARY_ENV} to the full path of {LIBRARY_FILE})",
            lib.display()
        )))
    }
}
