//! What the command-line test files share.

// each test file uses some of these, none all of them
#![allow(dead_code)]

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().map(Path::to_path_buf).unwrap_or_default()
}

/// `xtask args` run from the workspace root.
pub fn xtask(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(args)
        .current_dir(root())
        .env_remove("RUST_LOG")
        .output()
        .expect("xtask runs")
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

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

/// The example imported and partitioned into a temporary folder, priced by the cost table
/// recorded on two single-core PUs (`tests/data/serve`), so what a test decides from
/// measurements at run time is not also decided by a profile taken on a loaded machine.
pub fn recorded_example(tmp: &Path) -> String {
    let dir = tmp.display().to_string();
    let table = root().join("tests/data/serve/example-two-cores.json").display().to_string();
    for args in
        [&["import", "zoo:example", "--out", &dir][..], &["partition", &dir], &["costs", "import", &dir, &table]]
    {
        let o = xtask(args);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    }
    dir
}

/// A command's stdout and the JSON object it printed last (`--json`), the command having
/// succeeded (else a panic with its stderr).
pub fn succeeded_json(o: &std::process::Output) -> (String, serde_norway::Value) {
    assert!(o.status.success(), "{}", stderr(o));
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    let j = last_json(&stdout);
    (stdout, j)
}

/// The JSON object a command printed as the last line of its stdout (`--json`).
pub fn last_json(stdout: &str) -> serde_norway::Value {
    let line = stdout.lines().last().unwrap_or_else(|| panic!("no output: {stdout}"));
    serde_norway::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
}
