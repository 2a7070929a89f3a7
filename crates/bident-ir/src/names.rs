//! Names as users give them: an op named on the command line or in a placement, and names shown
//! back to a terminal or written into text formats.

/// The op `s` names among ops named `names` (in op order): `#N` is op N; otherwise the one op of
/// that name; a bare number names the op of that index only where no op has it as its name or
/// the op of that name is that op. A name several ops share, or a number that is both one op's
/// index and another's name, is refused: nothing is picked silently.
pub fn resolve_op<'a>(names: impl IntoIterator<Item = &'a str>, s: &str) -> Result<usize, String> {
    let names: Vec<&str> = names.into_iter().collect();
    let n = names.len();
    let index = |i: usize| {
        if i < n { Ok(i) } else { Err(format!("op {i} is out of range: the graph has {n} ops")) }
    };
    if let Some(i) = s.strip_prefix('#').and_then(|d| d.parse::<usize>().ok()) {
        return index(i);
    }
    let named: Vec<usize> = (0..n).filter(|&i| names[i] == s).collect();
    let as_index = s.parse::<usize>().ok();
    match (named.as_slice(), as_index) {
        ([one], Some(i)) if i != *one && i < n => {
            Err(format!("`{s}` is both op {i} and the name of op {one}: write #{i} or #{one}"))
        }
        ([one], _) => Ok(*one),
        ([], Some(i)) => index(i),
        ([], None) => Err(format!("no op named `{s}`")),
        (many, _) => Err(format!(
            "{} ops are named `{s}` ({}): give one as #N",
            many.len(),
            many.iter().map(|i| format!("#{i}")).collect::<Vec<_>>().join(", ")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ops_resolve_by_name_or_index_and_never_silently() {
        let names = ["conv", "2", "relu", "relu", "0"];
        let r = |s: &str| resolve_op(names, s);
        assert_eq!(r("conv"), Ok(0));
        assert_eq!(r("#3"), Ok(3));
        assert_eq!(r("3"), Ok(3));
        assert_eq!(r("#9").unwrap_err(), "op 9 is out of range: the graph has 5 ops");
        assert_eq!(r("2").unwrap_err(), "`2` is both op 2 and the name of op 1: write #2 or #1");
        assert_eq!(r("0").unwrap_err(), "`0` is both op 0 and the name of op 4: write #0 or #4");
        assert_eq!(r("relu").unwrap_err(), "2 ops are named `relu` (#2, #3): give one as #N");
        assert_eq!(r("gelu").unwrap_err(), "no op named `gelu`");
        // a number naming its own op is no ambiguity
        assert_eq!(resolve_op(["a", "1"], "1"), Ok(1));
    }
}
