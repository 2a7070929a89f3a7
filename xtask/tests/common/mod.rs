//! What the command-line test files share.

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// `xtask args` run from `cwd` with no input, killed if it runs past `secs`: a hang is a
/// failure, not a stuck suite.
pub fn xtask_within(cwd: &Path, args: &[impl AsRef<OsStr> + std::fmt::Debug], secs: u64) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(args)
        .current_dir(cwd)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("xtask runs");
    let t0 = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if t0.elapsed() >= Duration::from_secs(secs) {
            let _ = child.kill();
            panic!("xtask {args:?} still running after {secs} s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}
