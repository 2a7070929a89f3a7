//! The example's own bident binary runs the pipeline with its search, selected by name, lists
//! it among the passes, and is refused a name nobody registered, in one line.

use std::process::{Command, Output};

fn bident(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_bident-cheapest-run")).args(args).output().expect("the binary runs")
}

#[test]
fn its_own_binary_runs_the_pipeline_with_its_search() {
    let tmp = std::env::temp_dir().join(format!("bident-cheapest-run-{}", std::process::id()));
    let out = tmp.display().to_string();
    let o = bident(&["pipeline", "--out", &out, "--soc", "lunar-lake", "--search", "cheapest-run", "--json"]);
    let _ = std::fs::remove_dir_all(&tmp);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let stdout = String::from_utf8_lossy(&o.stdout);
    let j: serde_json::Value = serde_json::from_str(stdout.lines().last().expect("JSON")).expect("JSON");
    assert_eq!(j["search"].as_str(), Some("cheapest-run"), "{stdout}");
    let listed = String::from_utf8_lossy(&bident(&["passes"]).stdout).into_owned();
    for name in ["phases", "chain", "bident", "greedy", "cheapest-run"] {
        assert!(listed.contains(name), "{name} not listed:\n{listed}");
    }
    let o = bident(&["pipeline", "--soc", "lunar-lake", "--search", "nope"]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("no search named `nope` (registered: bident, greedy, cheapest-run)"), "{err}");
}
