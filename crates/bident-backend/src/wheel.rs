//! Installing a pinned pip wheel that ships an engine's shared library into a folder of the
//! project (`<target>/<folder>/<version>/`, pip's `--target`), never into the user's Python
//! environment; both backends' `install` modules are this with their own pins.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::BackendError;

/// One pinned wheel and the library bident loads from it.
pub(crate) struct Wheel {
    /// What the user reads, e.g. `OpenVINO runtime`.
    pub what: &'static str,
    /// The pip requirement's name, e.g. `openvino`.
    pub package: &'static str,
    pub version: &'static str,
    /// The library's path inside the installed folder.
    pub library: &'static str,
    /// Environment variable naming the library file explicitly.
    pub env: &'static str,
}

impl Wheel {
    pub fn install_dir(&self, target_dir: &Path) -> PathBuf {
        target_dir.join(self.package).join(self.version)
    }

    pub fn find(&self, target_dir: &Path) -> Option<PathBuf> {
        if let Some(p) = std::env::var_os(self.env) {
            return Some(PathBuf::from(p));
        }
        let lib = self.install_dir(target_dir).join(self.library);
        lib.is_file().then_some(lib)
    }

    /// The library path, installing the wheel with pip first when it is missing. `say` receives
    /// one line when an install happens. Concurrent callers (parallel test binaries) are
    /// serialised by a lock file.
    pub fn ensure(&self, target_dir: &Path, say: &mut dyn FnMut(&str)) -> Result<PathBuf, BackendError> {
        if let Some(lib) = self.find(target_dir) {
            return self.check_exists(lib);
        }
        let (package, version) = (self.package, self.version);
        let dir = self.install_dir(target_dir);
        let io = |what: &str, e: std::io::Error| BackendError::Library(format!("{what}: {e}"));
        std::fs::create_dir_all(&dir).map_err(|e| io(&dir.display().to_string(), e))?;
        let lock_path = dir.with_extension("lock");
        let lock =
            bident_artifact::files::open_lock_file(&lock_path).map_err(|e| BackendError::Library(e.to_string()))?;
        lock.lock().map_err(|e| io("locking the install folder", e))?;
        let lib = dir.join(self.library);
        if lib.is_file() {
            return Ok(lib);
        }
        say(&format!("{} not found: installing {package}=={version} with pip into {}", self.what, dir.display()));
        let python = ["python3", "python"]
            .into_iter()
            .find(|p| Command::new(p).arg("--version").output().is_ok_and(|o| o.status.success()))
            .ok_or_else(|| {
                BackendError::Library(format!(
                    "the {} is missing and no Python was found to install it; install Python 3 with pip, or set {} to the full path of {}",
                    self.what, self.env, self.file_name()
                ))
            })?;
        let out = Command::new(python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--no-deps",
                "--upgrade",
                "--target",
            ])
            .arg(&dir)
            .arg(format!("{package}=={version}"))
            .output()
            .map_err(|e| io("running pip", e))?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            let hint =
                if err.contains("No module named pip") { " (this Python has no pip: install python3-pip)" } else { "" };
            return Err(BackendError::Library(format!(
                "pip could not install {package}=={version}{hint}: {}",
                err.lines().rfind(|l| !l.trim().is_empty()).unwrap_or("no message")
            )));
        }
        self.check_exists(lib)
    }

    fn file_name(&self) -> &'static str {
        self.library.rsplit('/').next().unwrap_or(self.library)
    }

    fn check_exists(&self, lib: PathBuf) -> Result<PathBuf, BackendError> {
        if lib.is_file() {
            Ok(lib)
        } else {
            Err(BackendError::Library(format!(
                "{} does not exist (set {} to the full path of {})",
                lib.display(),
                self.env,
                self.file_name()
            )))
        }
    }
}
