//! Hostile and careless use of the commands: edited artifacts, concurrent runs on one folder,
//! bad options after good runs, edge values. Each must end in one clear line and leave what
//! was there intact. (Malformed models are the data-driven `tests/data/bad-input/` cases.)

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use bident_artifact as artifact;
use bident_search::Plan;

mod common;

use common::{root, xtask};

/// The command failed with exactly one non-empty stderr line, which contains `want`.
#[track_caller]
fn refused(o: &Output, want: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "accepted; stderr:\n{err}");
    assert!(!err.contains("panicked"), "panicked:\n{err}");
    assert!(!err.chars().any(|c| c.is_control() && c != '\n'), "a control character reached the terminal:\n{err:?}");
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "expected one line, got:\n{err}");
    assert!(lines[0].starts_with("error: ") && lines[0].contains(want), "expected `{want}` in:\n{err}");
}

#[track_caller]
fn ok(o: &Output) {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// Rewrite `dir/plan.bin` with `edit` applied, its payload hash recomputed (what an attacker or
/// a careless script does), keeping the input hash.
fn edit_plan(dir: &Path, edit: impl FnOnce(&mut Plan)) {
    let path = dir.join("plan.bin");
    let mut s = artifact::read::<Plan>(&path).expect("plan");
    edit(&mut s.value);
    artifact::write(&path, &s.value, s.header.input_hash).expect("write");
}

#[test]
fn edited_plans_are_refused_before_anything_runs() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("a");
    let d = dir.display().to_string();
    ok(&xtask(&["pipeline", "--out", &d, "--soc", "lunar-lake"]));
    let original = std::fs::read(dir.join("plan.bin")).expect("plan");
    let restore = || std::fs::write(dir.join("plan.bin"), &original).expect("restore");

    edit_plan(&dir, |p| p.steps[0].finish_us = f64::INFINITY);
    refused(&xtask(&["run", &d]), "`finish_us` is inf: figures are finite, non-negative");
    let plan = dir.join("plan.bin").display().to_string();
    refused(&xtask(&["plan-diff", &plan, &plan]), "`finish_us` is inf: figures are finite, non-negative");
    restore();
    // every figure, not only the ones the evaluator recomputes
    edit_plan(&dir, |p| p.steps[1].exec_us = -3.5e9);
    refused(&xtask(&["plan-diff", &plan, &plan]), "`exec_us` is -3.5e9");
    restore();
    edit_plan(&dir, |p| p.steps[0].cost_us[0] = Some(-1.0));
    refused(&xtask(&["run", &d]), "`cost_us` is -1e0");
    restore();
    edit_plan(&dir, |p| p.predicted_us = 1e300);
    refused(&xtask(&["run", &d]), "`predicted_us` is 1e300");
    restore();
    edit_plan(&dir, |p| {
        p.soc = "cores".into();
        p.simulated = false;
    });
    refused(&xtask(&["run", &d]), "the plan says SoC `cores` (measured");
    restore();
    edit_plan(&dir, |p| p.steps.swap(0, 1));
    refused(&xtask(&["run", &d]), "steps are not the phased graph's ops in its execution order");
    restore();
    // untouched, the plan is refused only because nothing runs on a virtual SoC
    refused(&xtask(&["run", &d]), "virtual SoC `lunar-lake`");
}

#[test]
fn a_bad_option_leaves_the_folder_as_it_was() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("a");
    let d = dir.display().to_string();
    ok(&xtask(&["pipeline", "--out", &d, "--soc", "lunar-lake"]));
    let snapshot = |files: &[&str]| -> Vec<Vec<u8>> {
        files.iter().map(|f| std::fs::read(dir.join(f)).expect("artifact")).collect()
    };
    let files = ["fused-graph.bin", "phased-graph.bin", "cost-table.bin", "plan.bin", "plan.yaml"];
    let before = snapshot(&files);
    let bad_soc =
        root().join("tests/data/bad-soc").read_dir().expect("bad-soc").next().expect("a case").expect("entry");
    let bad_soc = bad_soc.path().display().to_string();
    for args in [
        vec!["pipeline", "zoo:mlp", "--out", &d, "--soc", &bad_soc],
        vec!["pipeline", "zoo:mlp", "--out", &d, "--soc", "no-such-soc"],
        vec!["pipeline", "zoo:mlp", "--out", &d, "--soc", "lunar-lake", "--pin", "0=nowhere"],
        vec!["pipeline", "zoo:mlp", "--out", &d, "--soc", "lunar-lake", "--input-shape", "x=0,64"],
        vec!["pipeline", "zoo:mlp", "--out", &d, "--soc", "lunar-lake", "--inject-fault", "cpu:compile"],
    ] {
        let o = xtask(&args);
        assert!(!o.status.success(), "{args:?} accepted");
        assert_eq!(snapshot(&files), before, "{args:?} touched the folder");
    }
}

#[test]
fn one_folder_one_writer() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path().display().to_string();
    std::fs::create_dir_all(tmp.path()).expect("dir");
    let lock = std::fs::File::create(tmp.path().join(".lock")).expect("lock file");
    lock.try_lock().expect("the test holds the lock");
    for args in [
        vec!["pipeline", "--out", &d, "--soc", "lunar-lake"],
        vec!["import", "zoo:mlp", "--out", &d],
        vec!["partition", &d],
        vec!["search", &d],
    ] {
        refused(&xtask(&args), "another bident command is writing this folder");
    }
    drop(lock);
    ok(&xtask(&["pipeline", "--out", &d, "--soc", "lunar-lake"]));
}

/// Several runs of one zoo model at once: each reads a whole model (the zoo file is replaced
/// by renaming, never rewritten in place).
#[test]
fn concurrent_runs_of_one_zoo_model() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let children: Vec<_> = (0..4)
        .map(|k| {
            let out = tmp.path().join(format!("o{k}")).display().to_string();
            Command::new(env!("CARGO_BIN_EXE_xtask"))
                .args(["import", "zoo:attention", "--out", &out])
                .current_dir(root())
                .output()
        })
        .collect();
    for c in children {
        ok(&c.expect("xtask runs"));
    }
}

#[test]
fn edge_values_are_refused_not_changed() {
    let mlp = ["pipeline", "zoo:mlp", "--soc", "lunar-lake"];
    let with = |extra: &[&str]| -> Output {
        let mut a = mlp.to_vec();
        a.extend_from_slice(extra);
        xtask(&a)
    };
    refused(&with(&["--runs", "0"]), "invalid value '0' for '--runs");
    refused(&with(&["--profile-runs", "0"]), "invalid value '0' for '--profile-runs");
    refused(&with(&["--timeout", "0"]), "invalid value '0' for '--timeout");
    refused(&with(&["--input-shape", "x=1,64", "--input-shape", "x=2,64"]), "--input-shape `x` is given twice");
    refused(&with(&["--pin", "0=cpu", "--pin", "0=gpu"]), "is pinned twice, to cpu and to gpu");
    refused(&with(&["--inject-fault", "core9:compile"]), "virtual SoC; nothing runs on it");
    // a flag a virtual SoC would ignore is refused, and said which
    refused(
        &with(&["--runs", "3", "--no-cache"]),
        "--no-cache, --runs would be ignored: `--soc lunar-lake` is a virtual",
    );
    // clap's suggestion stays on the one line
    refused(&xtask(&["pipeline", "--precisoin", "exact"]), "(a similar argument exists: '--precision')");
    refused(&xtask(&["pipelin"]), "similar subcommands exist: 'explain', 'pipeline'");
    refused(&xtask(&["pipeline", "zoo:mlp", "--soc", "cores", "--inject-fault", "core9:compile"]), "has no PU `core9`");
}

#[test]
fn imported_cost_tables_are_whole_and_in_range() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("a");
    let d = dir.display().to_string();
    ok(&xtask(&["pipeline", "zoo:mlp", "--out", &d, "--soc", "lunar-lake"]));
    let csv = tmp.path().join("costs.csv");
    let c = csv.display().to_string();
    ok(&xtask(&["costs", "export", &d, &c]));
    let text = std::fs::read_to_string(&csv).expect("csv");
    let lines: Vec<&str> = text.lines().collect();
    let first_row = lines.iter().position(|l| l.starts_with("0,")).expect("a row of op 0");
    let write = |lines: &[&str]| std::fs::write(&csv, lines.join("\n") + "\n").expect("write");

    let mut twice = lines.clone();
    twice.insert(first_row + 1, lines[first_row]);
    write(&twice);
    refused(&xtask(&["costs", "import", &d, &c]), "has a row already");
    let mut missing = lines.clone();
    missing.remove(first_row);
    write(&missing);
    refused(&xtask(&["costs", "import", &d, &c]), "has no row for PU");

    let json = tmp.path().join("costs.json");
    let j = json.display().to_string();
    ok(&xtask(&["costs", "export", &d, &j]));
    let mut table: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("json")).expect("json");
    for op in table["ops"].as_array_mut().expect("ops") {
        for c in op["per_pu"].as_array_mut().expect("per_pu").iter_mut().filter(|c| !c.is_null()) {
            c["exec_us"] = serde_json::json!(1e308);
        }
    }
    std::fs::write(&json, table.to_string()).expect("write");
    refused(&xtask(&["costs", "import", &d, &j]), "over an hour");

    // the SoC a table carries is checked as a SoC file is: names, and no engine setting
    type Edit = fn(&mut serde_json::Value);
    let edits: [(&str, Edit); 3] = [
        ("property `CACHE_DIR` is not one a SoC may set", |pus| {
            pus[0]["backend"] = serde_json::json!("openvino");
            pus[0]["properties"] = serde_json::json!({"CACHE_DIR": "/tmp/elsewhere"});
        }),
        ("appears twice", |pus| pus[1]["name"] = pus[0]["name"].clone()),
        ("use at most 64 letters, digits", |pus| pus[0]["name"] = serde_json::json!("cpu@2")),
    ];
    for (want, edit) in edits {
        ok(&xtask(&["costs", "export", &d, &j]));
        let mut table: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).expect("json")).expect("json");
        edit(&mut table["soc"]["pus"]);
        std::fs::write(&json, table.to_string()).expect("write");
        refused(&xtask(&["costs", "import", &d, &j]), want);
    }
}

/// `--with` writes where `--out` says, and each model takes its own input flags.
#[test]
fn pairs_honour_out_and_their_own_input_shapes() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path().display().to_string();
    ok(&xtask(&[
        "pipeline",
        "zoo:mlp",
        "--with",
        "zoo:dynamic-batch",
        "--with-input-shape",
        "x=1,64",
        "--soc",
        "lunar-lake",
        "--out",
        &d,
    ]));
    for f in ["concurrent-plan.bin", "mlp/fused-graph.bin", "dynamic-batch/fused-graph.bin"] {
        assert!(tmp.path().join(f).exists(), "{f} missing");
    }
}

/// One case of `tests/data/untrusted-files/cases.yaml`.
#[derive(serde::Deserialize)]
struct FileCase {
    make: String,
    ext: String,
    #[serde(default)]
    prefix: String,
    #[serde(default)]
    open: String,
    #[serde(default)]
    depth: usize,
    #[serde(default)]
    content: String,
    args: Vec<String>,
    error: String,
}

/// `xtask args` from the workspace root, killed if it runs past `secs`.
fn xtask_within(args: &[String], secs: u64) -> Output {
    common::xtask_within(&root(), args, secs)
}

/// Every file a command reads is refused unread when it is a device, a link to one or a FIFO,
/// and parsed only when nested no deeper than bident's limit: each case ends at once, in one
/// line, leaving the folder as it was.
#[test]
fn untrusted_files_are_refused_unread() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("planned");
    let d = dir.display().to_string();
    ok(&xtask(&["pipeline", "zoo:mlp", "--out", &d, "--soc", "lunar-lake"]));
    let files = ["fused-graph.bin", "phased-graph.bin", "cost-table.bin", "plan.bin"];
    let snapshot = || -> Vec<Vec<u8>> { files.iter().map(|f| std::fs::read(dir.join(f)).expect("artifact")).collect() };
    let before = snapshot();
    let text = std::fs::read_to_string(root().join("tests/data/untrusted-files/cases.yaml")).expect("cases");
    let cases: Vec<FileCase> = serde_norway::from_str(&text).expect("cases yaml");
    assert!(cases.len() >= 10);
    for (k, case) in cases.iter().enumerate() {
        let scratch = tmp.path().join(format!("case{k}"));
        std::fs::create_dir_all(&scratch).expect("scratch");
        let file = scratch.join(format!("input.{}", case.ext));
        let file = match case.make.as_str() {
            "device" => PathBuf::from("/dev/zero"),
            "link-device" => {
                std::os::unix::fs::symlink("/dev/zero", &file).expect("link");
                file
            }
            "fifo" => {
                let c = std::ffi::CString::new(file.as_os_str().as_encoded_bytes()).expect("path");
                assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
                file
            }
            "nested" => {
                std::fs::write(&file, format!("{}{}", case.prefix, case.open.repeat(case.depth))).expect("write");
                file
            }
            "text" => {
                std::fs::write(&file, &case.content).expect("write");
                file
            }
            other => panic!("case {k}: unknown make `{other}`"),
        };
        let args: Vec<String> = case
            .args
            .iter()
            .map(|a| {
                a.replace("{file}", &file.display().to_string())
                    .replace("{dir}", &d)
                    .replace("{scratch}", &scratch.display().to_string())
            })
            .collect();
        let o = xtask_within(&args, 30);
        refused(&o, &case.error);
        assert_eq!(snapshot(), before, "{args:?} touched the folder");
    }
}

/// A model file whose stem is `..` or `.` (`...onnx`, `..onnx`) gets a folder inside
/// `target/bident/`, never one above it.
#[test]
fn dotted_model_names_stay_inside_the_target_folder() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let target = tmp.path().join("target");
    let models = tmp.path().join("models");
    std::fs::create_dir_all(&models).expect("dir");
    for file in ["...onnx", "..onnx"] {
        let model = models.join(file);
        std::fs::write(&model, bident_zoo::build_bytes("mlp", 0).expect("zoo")).expect("write");
        let o = Command::new(env!("CARGO_BIN_EXE_xtask"))
            .args(["import", &model.display().to_string()])
            .env("CARGO_TARGET_DIR", &target)
            .current_dir(root())
            .output()
            .expect("xtask runs");
        ok(&o);
        assert!(target.join("bident/model/fused-graph.bin").exists(), "{file}: not in target/bident/model/");
        for above in [target.clone(), target.join("bident"), tmp.path().to_path_buf()] {
            assert!(!above.join("fused-graph.bin").exists(), "{file}: wrote into {}", above.display());
        }
    }
}

/// A model that never ends (a Loop of 10^12 trips) stops every measured command at --timeout:
/// cancelled where the engine can stop (ONNX Runtime), the process ended where it cannot
/// (OpenVINO runs a Loop node to its end), each with one error line; a virtual SoC prices the
/// Loop by its trip count.
#[test]
fn a_loop_that_never_ends_stops_at_the_limit() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = |k: &str| tmp.path().join(k).display().to_string();
    for (backend, code, want) in [
        ("onnxruntime", 1, "on PU `CPU` ran past the 1 s limit (--timeout) and was cancelled"),
        ("openvino", 124, "on PU `CPU` ran past the 1 s limit (--timeout) and did not stop when cancelled"),
    ] {
        let args: Vec<String> = ["pipeline", "zoo:loop-endless", "--backends", backend, "--timeout", "1", "--out"]
            .into_iter()
            .map(String::from)
            .chain([out(backend)])
            .collect();
        let o = xtask_within(&args, 60);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(code), "{backend}: {err}");
        let errors: Vec<&str> = err.lines().filter(|l| l.contains("error")).collect();
        assert_eq!(errors.len(), 1, "{backend}: {err}");
        assert!(errors[0].starts_with("error: op 1 `loop` (Loop)") && errors[0].contains(want), "{backend}: {err}");
    }
    // the profile stage on its own takes the same bound
    let staged = out("staged");
    ok(&xtask(&["import", "zoo:loop-endless", "--out", &staged]));
    ok(&xtask(&["partition", &staged]));
    let args: Vec<String> =
        ["profile", &staged, "--backends", "onnxruntime", "--timeout", "1"].into_iter().map(String::from).collect();
    let o = xtask_within(&args, 60);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.lines().last().is_some_and(|l| l.contains("ran past the 1 s limit (--timeout)")), "{err}");
    let o = xtask(&["pipeline", "zoo:loop-endless", "--soc", "lunar-lake", "--json", "--out", &out("virtual")]);
    ok(&o);
    let stdout = String::from_utf8_lossy(&o.stdout);
    let j: serde_json::Value = serde_json::from_str(stdout.lines().last().expect("json")).expect("json");
    // 10^12 trips of at least one pass over the 8 values carried: far past any one-op price
    assert!(j["predicted_us"].as_f64().is_some_and(|us| us > 1e7), "{stdout}");
}

/// Files are read and written through `bident_artifact::files` only (a regular file, a size
/// cap, nesting checked; exclusive temporaries): a raw `std::fs` read or write outside it is a
/// hole of the kind untrusted_files_are_refused_unread tests, unless it is listed here with the
/// reason it is safe.
#[test]
fn every_file_is_read_and_written_through_one_place() {
    const ALLOWED: &[(&str, &str)] = &[
        ("crates/bident-artifact/src/files.rs", "the one place"),
        ("crates/bident-profile/src/cache.rs", "/proc/loadavg"),
        ("crates/bident-profile/src/power.rs", "RAPL counters under /sys"),
        ("crates/bident-backend/src/soc/presets.rs", "core types under /sys"),
        ("crates/bident-backend/src/lib.rs", "/proc/stat, /proc/cpuinfo and this process's tasks"),
        (
            "crates/bident-backend/src/onnxruntime/mod.rs",
            "/proc/cpuinfo; ONNX Runtime's profile in bident's own temp folder",
        ),
        ("xtask/src/fuzz.rs", "a developer tool over the repository's corpora"),
        ("xtask/src/conformance.rs", "a developer tool over the ONNX wheel's node tests"),
        ("xtask/src/codegen.rs", "a developer tool over the vendored onnx.proto"),
        ("xtask/src/thirdparty.rs", "a developer tool over tests/data/thirdparty"),
        ("xtask/src/ovir.rs", "a developer tool over tests/data/ovir"),
        ("xtask/src/zoocheck.rs", "a developer tool over zoo models it writes"),
    ];
    let raw = [
        "fs::read(",
        "fs::read_to_string(",
        "fs::write(",
        "fs::copy(",
        "File::open(",
        "File::create(",
        ".create(true)",
    ];
    let mut files = vec![];
    let mut dirs = vec![root().join("crates"), root().join("xtask/src")];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).expect("dir").flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                files.push(p);
            }
        }
    }
    let mut found = vec![];
    for f in files {
        let rel = f.strip_prefix(root()).expect("inside").display().to_string();
        if ALLOWED.iter().any(|(a, _)| *a == rel) || rel.contains("/tests/") || rel.contains("/benches/") {
            continue;
        }
        let text = std::fs::read_to_string(&f).expect("source");
        // a crate's unit tests make their own scratch files
        let code = text.split("#[cfg(test)]").next().unwrap_or("");
        for (k, line) in code.lines().enumerate() {
            if !line.trim_start().starts_with("//") && raw.iter().any(|r| line.contains(r)) {
                found.push(format!("{rel}:{}: {}", k + 1, line.trim()));
            }
        }
    }
    assert!(found.is_empty(), "raw file I/O outside bident_artifact::files:\n{}", found.join("\n"));
}

/// The docs stay true to the code they name: every `file::test` ARCHITECTURE.md cites as the
/// check of an invariant is a test in that file, and both maps stay within 300 lines.
#[test]
fn the_docs_name_tests_that_exist() {
    let arch = std::fs::read_to_string(root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let cited: Vec<&str> = arch.split('`').filter(|s| s.contains(".rs::")).collect();
    assert!(cited.len() >= 40, "only {} tests cited", cited.len());
    for c in cited {
        let (file, test) = c.split_once("::").expect("file::test");
        let text = std::fs::read_to_string(root().join(file)).unwrap_or_else(|e| panic!("{c}: {e}"));
        let at = text.find(&format!("fn {test}(")).unwrap_or_else(|| panic!("{c}: no such function"));
        let before = &text[..at];
        let attr = before.rfind("#[test]").into_iter().chain(before.rfind("proptest!"));
        assert!(attr.max().is_some_and(|a| !before[a..].contains("\n}\n")), "{c} is not a test");
    }
    for doc in ["README.md", "ARCHITECTURE.md"] {
        let lines = std::fs::read_to_string(root().join(doc)).expect("doc").lines().count();
        assert!(lines <= 300, "{doc} has {lines} lines");
    }
}
