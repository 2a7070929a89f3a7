//! `docs/results.md`: the measured and simulated results of the last full run of each eval
//! command, written by the eval itself (never by hand). Each command owns one section between
//! markers; running it again replaces that section and leaves the others.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

const HEAD: &str = "# Results\n\nWritten by `cargo xtask eval`: each section is the last full run of its command \
(the machine and date it ran on are in it). Do not edit by hand; run the command again.\n";

/// The results file of the repository.
pub fn path() -> PathBuf {
    crate::root().join("docs/results.md")
}

/// Put `report` (a Markdown report whose first line is its `# ` title) into `file` as the
/// section of `key`, run by `command`, with its charts (file names, copied into
/// `docs/results/KEY/` from `charts_dir`) linked below it.
pub fn record(file: &Path, key: &str, command: &str, report: &str, charts_dir: &Path, charts: &[&str]) -> Result<()> {
    // the key names a folder and the section's markers: a plain name, never a path
    anyhow::ensure!(key == bident_driver::folder_name(key), "results: `{key}` is not a plain name");
    let old = match file.is_file() {
        true => bident_artifact::files::read_text(file)?,
        false => HEAD.to_string(),
    };
    let folder = file.with_extension("").join(key);
    std::fs::create_dir_all(&folder).with_context(|| folder.display().to_string())?;
    let mut section = format!("<!-- eval:{key} -->\n");
    section.push_str(&format!("Ran `{command}` on {} UTC.\n\n", jiff::Timestamp::now().strftime("%Y-%m-%d %H:%M")));
    // the report's headings one level down, under the file's own title
    for line in report.lines() {
        match line.starts_with('#') {
            true => section.push_str(&format!("#{line}\n")),
            false => section.push_str(&format!("{line}\n")),
        }
    }
    for chart in charts {
        let bytes = bident_artifact::files::read_limited(&charts_dir.join(chart), 64 << 20)?;
        bident_artifact::files::write_bytes(&folder.join(chart), &bytes)?;
        section.push_str(&format!("\n![{chart}](results/{key}/{chart})\n"));
    }
    section.push_str(&format!("<!-- /eval:{key} -->\n"));
    bident_artifact::files::write_bytes(file, replace_section(&old, key, &section).as_bytes())?;
    Ok(())
}

/// `text` with the section of `key` (between its markers) replaced by `section`, or `section`
/// appended where there is none.
fn replace_section(text: &str, key: &str, section: &str) -> String {
    let (open, close) = (format!("<!-- eval:{key} -->\n"), format!("<!-- /eval:{key} -->\n"));
    match (text.find(&open), text.find(&close)) {
        (Some(a), Some(b)) if a < b => format!("{}{section}{}", &text[..a], &text[b + close.len()..]),
        _ => format!("{}\n\n{section}", text.trim_end_matches('\n')),
    }
}

#[cfg(test)]
mod tests {
    use super::replace_section;

    /// A key that is a path (an eval's `--soc ../x.toml`) is refused before anything is written.
    #[test]
    fn a_key_that_is_a_path_is_refused() {
        let file = std::path::Path::new("/nonexistent/results.md");
        let err = super::record(file, "../x.toml-tiny", "c", "# r", file, &[]).expect_err("a path");
        assert!(err.to_string().contains("not a plain name"), "{err}");
    }

    /// A command's section is replaced in place, the others kept; a new one is appended.
    #[test]
    fn a_section_is_replaced_and_the_others_kept() {
        let text = "# Results\n\n<!-- eval:a -->\nold a\n<!-- /eval:a -->\n\n<!-- eval:b -->\nb\n<!-- /eval:b -->\n";
        let new_a = "<!-- eval:a -->\nnew a\n<!-- /eval:a -->\n";
        let replaced = replace_section(text, "a", new_a);
        assert_eq!(replaced, text.replace("old a", "new a"));
        let c = "<!-- eval:c -->\nc\n<!-- /eval:c -->\n";
        let appended = replace_section(&replaced, "c", c);
        assert_eq!(appended, format!("{replaced}\n{c}"));
    }
}
