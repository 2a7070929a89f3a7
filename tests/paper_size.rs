//! The zoo's `full` family models have the paper's sizes, within the tolerances of
//! `tests/data/paper-size/sizes.txt`: fused ops after import (bident's rules), phases with
//! parallel branches, and the count of an op kind that pins a model's depth. Nothing runs: the
//! models are built, imported and partitioned. The pi0.5 build dominates (a 0.37 GB file,
//! seconds in a debug build).

use std::collections::BTreeMap;
use std::ops::RangeInclusive;

use bident_tests::{ModelCase, import, root};

struct Expect {
    model: String,
    ops: RangeInclusive<usize>,
    parallel: Option<RangeInclusive<usize>>,
    kinds: BTreeMap<String, usize>,
}

fn range(s: &str, line: &str) -> RangeInclusive<usize> {
    let (lo, hi) = s.split_once("..").unwrap_or_else(|| panic!("`{s}` is not MIN..MAX in `{line}`"));
    let n = |v: &str| v.parse::<usize>().unwrap_or_else(|e| panic!("`{v}` in `{line}`: {e}"));
    n(lo)..=n(hi)
}

fn expectations() -> Vec<Expect> {
    let path = root().join("tests/data/paper-size/sizes.txt");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out = vec![];
    for line in text.lines().map(|l| l.split('#').next().unwrap_or("").trim()).filter(|l| !l.is_empty()) {
        let mut words = line.split_whitespace();
        let model = words.next().unwrap_or_default().to_string();
        let ops = range(words.next().unwrap_or_else(|| panic!("no op range in `{line}`")), line);
        let (mut parallel, mut kinds) = (None, BTreeMap::new());
        for w in words {
            let (k, v) = w.split_once('=').unwrap_or_else(|| panic!("`{w}` is not KEY=VALUE in `{line}`"));
            if k == "parallel" {
                parallel = Some(range(v, line));
            } else {
                kinds.insert(k.to_string(), v.parse().unwrap_or_else(|e| panic!("`{w}` in `{line}`: {e}")));
            }
        }
        out.push(Expect { model, ops, parallel, kinds });
    }
    out
}

#[test]
fn full_families_have_the_papers_sizes() {
    let case_file = root().join("tests/data/paper-size/sizes.txt");
    let expected = expectations();
    assert!(expected.len() >= 3, "sizes.txt lists pi0.5, Mamba and SNN-VGG9");
    let mut wrong = vec![];
    for e in &expected {
        let case = ModelCase { model: format!("zoo:{}", e.model), input_shape: Default::default(), fusion: None };
        let g = import(&case, &case_file);
        let ops = g.ops.len();
        if !e.ops.contains(&ops) {
            wrong.push(format!("{}: {ops} fused ops, expected {:?}", e.model, e.ops));
        }
        if let Some(want) = &e.parallel {
            let phased = bident_partition::partition(&g).expect("partition");
            let got = phased.parallel_phases();
            if !want.contains(&got) {
                wrong.push(format!("{}: {got} parallel phases, expected {want:?}", e.model));
            }
        }
        for (kind, &want) in &e.kinds {
            let got = g.ops.iter().filter(|o| &o.kind == kind).count();
            if got != want {
                wrong.push(format!("{}: {got} `{kind}` ops, expected {want}", e.model));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
