//! A model is untrusted input: nothing outside its folder may be opened, whatever the working
//! directory, and nothing it names may make bident block.
//!
//! A secret file sits outside the model's folder and another in the working directory; models
//! point at them in every way a model can name a file (external data in the main graph, in an
//! If branch, in a Constant inside a Loop body, an IR's `.bin`; relative, `..`, absolute, through
//! a symbolic link). inotify watches both secrets: the test fails if any command opens either,
//! even if the command then fails. Each way is also run once pointing at a proper file inside
//! the folder, which must import, so the test cannot pass because the models are broken.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Output;

use bident_zoo::ExternalPlace;

mod common;

const SECRET: &[u8] = b"BIDENT-SECRET-0123456789abcdef..";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().map(Path::to_path_buf).unwrap_or_default()
}

/// Reports whether any watched file was opened or read since the last call.
struct Watch(i32);

impl Watch {
    fn new(files: &[&Path]) -> Watch {
        // SAFETY: plain syscalls on a descriptor this struct owns.
        let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        assert!(fd >= 0, "inotify_init1");
        for f in files {
            let c = CString::new(f.as_os_str().as_bytes()).expect("path");
            // SAFETY: valid descriptor and C string.
            let wd = unsafe { libc::inotify_add_watch(fd, c.as_ptr(), libc::IN_OPEN | libc::IN_ACCESS) };
            assert!(wd >= 0, "inotify_add_watch {}", f.display());
        }
        Watch(fd)
    }

    fn touched(&self) -> bool {
        let mut buf = [0u8; 4096];
        let mut any = false;
        loop {
            // SAFETY: the buffer is valid for its length.
            let n = unsafe { libc::read(self.0, buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                return any;
            }
            any = true;
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        // SAFETY: closing the descriptor this struct owns.
        unsafe { libc::close(self.0) };
    }
}

/// `xtask` with `args`, run from `cwd`, killed if it takes longer than two minutes (a hang).
fn xtask_in(cwd: &Path, args: &[&str]) -> Output {
    common::xtask_within(cwd, args, 120)
}

fn mkfifo(path: &Path) {
    let c = CString::new(path.as_os_str().as_bytes()).expect("path");
    // SAFETY: a valid C string.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo {}", path.display());
}

struct Case {
    what: String,
    /// Folder holding the model (and whatever it names).
    dir: PathBuf,
    model: PathBuf,
    /// Expected part of the one-line error; None: must import.
    error: Option<&'static str>,
}

fn onnx_case(base: &Path, what: &str, place: ExternalPlace, location: &str, error: Option<&'static str>) -> Case {
    let dir = base.join(what);
    std::fs::create_dir_all(&dir).expect("dir");
    let model = dir.join("model.onnx");
    std::fs::write(&model, prost::Message::encode_to_vec(&bident_zoo::external_ref(place, location, 0)))
        .expect("model");
    Case { what: what.into(), dir, model, error }
}

#[test]
fn nothing_outside_the_model_folder_is_opened_and_nothing_hangs() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let t = tmp.path();
    let outside = t.join("secret.bin");
    let cwd = t.join("work");
    std::fs::create_dir_all(&cwd).expect("cwd");
    let in_cwd = cwd.join("secret.bin");
    for s in [&outside, &in_cwd] {
        std::fs::write(s, SECRET).expect("secret");
    }
    let models = t.join("models");
    let places =
        [("main", ExternalPlace::Main), ("if", ExternalPlace::IfBranch), ("loop", ExternalPlace::LoopConstant)];
    let mut cases = vec![];
    for (p, place) in places {
        // resolved against the working directory, this name would find the secret there
        cases.push(onnx_case(&models, &format!("{p}-cwd-name"), place, "secret.bin", Some("No such file")));
        cases.push(onnx_case(&models, &format!("{p}-dotdot"), place, "../../secret.bin", Some("escapes")));
        let abs = outside.display().to_string();
        cases.push(onnx_case(&models, &format!("{p}-absolute"), place, &abs, Some("escapes")));
        let c = onnx_case(&models, &format!("{p}-symlink"), place, "w.bin", Some("escapes"));
        std::os::unix::fs::symlink(&outside, c.dir.join("w.bin")).expect("symlink");
        cases.push(c);
        let c = onnx_case(&models, &format!("{p}-fifo"), place, "w.bin", Some("not a regular file"));
        mkfifo(&c.dir.join("w.bin"));
        cases.push(c);
        // control: the same model with its data inside the folder imports
        let c = onnx_case(&models, &format!("{p}-inside"), place, "w.bin", None);
        std::fs::write(c.dir.join("w.bin"), [0u8; 16]).expect("weights");
        cases.push(c);
    }
    let ir = std::fs::read(root().join("tests/data/confinement/ir-const.xml")).expect("ir");
    for (what, error) in [
        ("ir-symlink", Some("resolve outside the model's folder")),
        ("ir-fifo", Some("not a regular file")),
        ("ir-inside", None),
    ] {
        let dir = models.join(what);
        std::fs::create_dir_all(&dir).expect("dir");
        let model = dir.join("model.xml");
        std::fs::write(&model, &ir).expect("xml");
        let bin = dir.join("model.bin");
        match what {
            "ir-symlink" => std::os::unix::fs::symlink(&outside, &bin).expect("symlink"),
            "ir-fifo" => {
                mkfifo(&bin);
            }
            _ => std::fs::write(&bin, [0u8; 16]).expect("weights"),
        }
        cases.push(Case { what: what.into(), dir, model, error });
    }
    // the model file itself a FIFO
    let fifo_model = models.join("fifo-model");
    std::fs::create_dir_all(&fifo_model).expect("dir");
    let path = fifo_model.join("model.onnx");
    mkfifo(&path);
    cases.push(Case { what: "fifo-model".into(), dir: fifo_model, model: path, error: Some("not a regular file") });

    let watch = Watch::new(&[&outside, &in_cwd]);
    for c in &cases {
        let model = c.model.display().to_string();
        let out = c.dir.join("out").display().to_string();
        // `--fusion backend` hands the lowered model to OpenVINO: its reader must never see a
        // file name either
        for extra in [&[][..], &["--fusion", "backend"][..]] {
            let mut args = vec!["import", model.as_str(), "--out", out.as_str()];
            args.extend_from_slice(extra);
            let o = xtask_in(&cwd, &args);
            let err = String::from_utf8_lossy(&o.stderr);
            let label = format!("{} {extra:?}", c.what);
            assert!(!err.contains("panicked"), "{label}: panicked:\n{err}");
            match c.error {
                Some(e) => {
                    assert_eq!(o.status.code(), Some(1), "{label}: exit code; stderr:\n{err}");
                    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
                    assert_eq!(lines.len(), 1, "{label}: expected one line, got:\n{err}");
                    assert!(lines[0].contains(e), "{label}: expected `{e}` in:\n{err}");
                }
                None => assert!(o.status.success(), "{label}: should import:\n{err}"),
            }
            assert!(!watch.touched(), "{label}: a secret outside the model's folder was opened");
        }
    }
    // a SoC spec that is a FIFO is refused, not waited on
    let soc = t.join("soc.toml");
    mkfifo(&soc);
    let o = xtask_in(&cwd, &["soc", &soc.display().to_string()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("not a regular file"), "FIFO SoC spec:\n{err}");
    // so is an artifact that is a FIFO
    let artifact = t.join("plan.bin");
    mkfifo(&artifact);
    let o = xtask_in(&cwd, &["show", &artifact.display().to_string()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("not a regular file"), "FIFO artifact:\n{err}");
    // and the secrets are where they were, so the watch could have seen them
    assert_eq!(std::fs::read(&outside).expect("secret"), SECRET);
    assert!(watch.touched(), "the watch sees an open");
}
