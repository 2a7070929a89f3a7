//! The one way bident reads and writes files, every one of them untrusted.
//!
//! Reading: only a regular file is read (a FIFO would block forever, a device like `/dev/zero`
//! never end), the descriptor is checked after opening (a link to a device is caught too), and
//! no more than a stated limit is read (a procfs file claims size 0 and may be endless).
//! Text that a parser nests (YAML, JSON, TOML) is checked for depth before any parser sees it:
//! the YAML parser is quadratic in nesting.
//!
//! Writing: a file is filled as a temporary beside it and renamed over it, so a reader sees the
//! old file or the new one. The temporary is created exclusively and without following a link:
//! a link planted at its name in a shared folder makes the write fail instead of writing through
//! it, and the rename replaces a link at the final name rather than writing where it points.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::ArtifactError;

/// The most bytes of a text input (a plan, a phased graph, a cost table, a SoC spec) read.
pub const TEXT_LIMIT: u64 = 256 << 20;
/// The most bytes of an artifact or a model file read (a fused graph carries its weights).
pub const BINARY_LIMIT: u64 = 16 << 30;
/// The deepest nesting a text input may have: far beyond any of bident's (under 10 levels), far
/// below where parsing slows (it is quadratic in depth).
pub const MAX_NESTING: usize = 128;

/// Read at most `limit` bytes of the regular file at `path`; anything else is refused unread.
pub fn read_limited(path: &Path, limit: u64) -> Result<Vec<u8>, ArtifactError> {
    let io = |source| ArtifactError::Io { path: path.to_path_buf(), source };
    let f = open_read(path, false).map_err(io)?;
    let meta = f.metadata().map_err(io)?;
    if !meta.is_file() {
        return Err(ArtifactError::NotAFile { path: path.to_path_buf(), what: file_type(&meta) });
    }
    if meta.len() > limit {
        return Err(ArtifactError::TooLarge { path: path.to_path_buf(), limit });
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    // a file that grows while read, or a procfs file claiming size 0, stops at the limit
    f.take(limit + 1).read_to_end(&mut bytes).map_err(io)?;
    if bytes.len() as u64 > limit {
        return Err(ArtifactError::TooLarge { path: path.to_path_buf(), limit });
    }
    Ok(bytes)
}

/// [`read_limited`] for a text file: UTF-8, at most [`TEXT_LIMIT`] bytes, nested at most
/// [`MAX_NESTING`] deep ([`check_nesting`]).
pub fn read_text(path: &Path) -> Result<String, ArtifactError> {
    let bytes = read_limited(path, TEXT_LIMIT)?;
    let text = String::from_utf8(bytes)
        .map_err(|e| ArtifactError::Text { path: path.to_path_buf(), reason: format!("not UTF-8 ({e})") })?;
    check_nesting(&text).map_err(|reason| ArtifactError::Text { path: path.to_path_buf(), reason })?;
    Ok(text)
}

/// Open for reading without blocking on a FIFO (`O_NONBLOCK` only affects FIFOs and devices);
/// with `no_follow`, a symbolic link in the last component is refused.
pub fn open_read(path: &Path, no_follow: bool) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let flags = libc::O_NONBLOCK | if no_follow { libc::O_NOFOLLOW } else { 0 };
    std::fs::OpenOptions::new().read(true).custom_flags(flags).open(path)
}

fn file_type(meta: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_dir() {
        "a folder"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

/// Refuse text nested deeper than [`MAX_NESTING`], before a parser sees it. The depth counted
/// is that of flow collections (`[`, `{`, outside quotes and comments; in block context only at
/// the start of a token, where YAML reads them as collections) plus, per line, the block
/// nesting its indentation and leading `- `/`? ` indicators can open. It may overcount, never
/// undercount, and it is linear.
pub fn check_nesting(text: &str) -> Result<(), String> {
    let mut flow = 0usize;
    let mut quote: Option<u8> = None;
    let mut escaped = false;
    let mut comment = false;
    let mut line_start = true;
    let mut block = 0usize;
    let mut prev = b'\n';
    let mut opened = false;
    for &c in text.as_bytes() {
        if c == b'\n' {
            (comment, line_start, block) = (false, true, 0);
            if quote.is_none() {
                prev = c;
                continue;
            }
        }
        if comment {
            continue;
        }
        if let Some(q) = quote {
            if escaped {
                escaped = false;
            } else if q == b'"' && c == b'\\' {
                escaped = true;
            } else if c == q {
                quote = None;
            }
            prev = c;
            continue;
        }
        // in block context a plain scalar may hold brackets (`x[[`): only a counted bracket,
        // whitespace, or (inside a collection) a separator starts a token
        let token_start =
            matches!(prev, b' ' | b'\t' | b'\n' | b'\r') || opened || (flow > 0 && matches!(prev, b',' | b':'));
        opened = false;
        if line_start {
            match c {
                b' ' | b'\t' => block += 1,
                b'-' | b'?' => block += 2,
                _ => line_start = false,
            }
        }
        match c {
            b'#' if token_start => comment = true,
            // a quote mid-token (`it's`) is a character, not a string: counting it as one would
            // let `[a', [[[...` hide its nesting
            b'"' | b'\'' if token_start => quote = Some(c),
            b'[' | b'{' if token_start || flow > 0 => (flow, opened) = (flow + 1, true),
            b']' | b'}' if flow > 0 => flow -= 1,
            _ => {}
        }
        let depth = flow + block / 2;
        if depth > MAX_NESTING {
            return Err(format!("nested deeper than {MAX_NESTING} levels"));
        }
        prev = c;
    }
    Ok(())
}

/// Write `bytes` to `path` through an exclusive temporary renamed over it.
pub fn write_bytes(path: &Path, bytes: &[u8]) -> Result<(), ArtifactError> {
    write_with(path, |f| f.write_all(bytes))
}

/// Write `path` through an exclusive temporary that `fill` writes and that is renamed over it
/// once complete and synced; on failure the temporary is removed and `path` is left as it was.
/// The folder must exist.
pub fn write_with(
    path: &Path,
    fill: impl FnOnce(&mut std::fs::File) -> std::io::Result<()>,
) -> Result<(), ArtifactError> {
    let (tmp, mut f) = create_temporary(path)?;
    let io = |source| ArtifactError::Io { path: path.to_path_buf(), source };
    let filled = fill(&mut f).and_then(|()| f.sync_all());
    drop(f);
    if let Err(e) = filled {
        let _ = std::fs::remove_file(&tmp);
        return Err(io(e));
    }
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io(e)
    })
}

/// A new file beside `path`, created exclusively (`O_EXCL`: an existing file or link at its
/// name fails the create) and never through a link (`O_NOFOLLOW`).
fn create_temporary(path: &Path) -> Result<(PathBuf, std::fs::File), ArtifactError> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut last = None;
    // a name taken (a planted file or link, or a leftover) is skipped, a few times, not opened
    for _ in 0..8 {
        let mut name = path.as_os_str().to_owned();
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
        name.push(format!(".tmp{}-{n}-{nanos:x}", std::process::id()));
        let tmp = PathBuf::from(name);
        match create_exclusive(&tmp) {
            Ok(f) => return Ok((tmp, f)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(source) => return Err(ArtifactError::Io { path: tmp, source }),
        }
    }
    Err(ArtifactError::Io {
        path: path.to_path_buf(),
        source: last.unwrap_or_else(|| std::io::ErrorKind::AlreadyExists.into()),
    })
}

fn create_exclusive(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new().write(true).create_new(true).mode(0o644).custom_flags(libc::O_NOFOLLOW).open(path)
}

/// Open (creating it if missing) a file that is only locked, never read or written, without
/// following a link at its name: a planted link would otherwise create the file it names.
pub fn open_lock_file(path: &Path) -> Result<std::fs::File, ArtifactError> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .and_then(|f| if f.metadata()?.is_file() { Ok(f) } else { Err(std::io::Error::other("not a regular file")) })
        .map_err(|source| ArtifactError::Io { path: path.to_path_buf(), source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_fifos_and_folders_are_refused_unread() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let link = dir.path().join("zero.json");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        for (p, what) in [(fifo, "a FIFO"), (link, "a device"), (dir.path().to_path_buf(), "a folder")] {
            let e = read_text(&p).unwrap_err().to_string();
            assert!(e.contains(what), "{e}");
        }
    }

    #[test]
    fn reads_stop_at_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("big");
        std::fs::write(&p, vec![b'x'; 100]).unwrap();
        assert_eq!(read_limited(&p, 100).unwrap().len(), 100);
        assert!(read_limited(&p, 99).unwrap_err().to_string().contains("larger than 99 bytes"));
        // procfs files claim size 0: the limit holds while reading
        assert!(matches!(read_limited(Path::new("/proc/self/maps"), 10), Err(ArtifactError::TooLarge { .. })));
    }

    #[test]
    fn nesting_is_refused_past_the_limit_and_ordinary_text_passes() {
        let deep = |open: &str, n: usize| open.repeat(n);
        for bad in [
            deep("[", 200),
            deep("{a: ", 200),
            deep("- ", 300),
            deep("  ", 300) + "a: 1",
            format!("[a', {}", deep("[", 200)),
            format!("x: it's {}", deep("[", 200)) + "\n" + &deep("[", 200),
        ] {
            assert!(check_nesting(&bad).is_err(), "{bad:.20}");
        }
        let ok = [
            "a: [1, [2, {b: c}]]\n# [[[[ in a comment\n",
            "name: \"[[[[[[\"\nother: '{{{{'\n",
            "name: x[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\n",
            "{\"a\": [\"]]]]\", \"\\\"[[[[\"]}",
            "- - - a\n  - b\n",
        ];
        for good in ok {
            check_nesting(good).unwrap_or_else(|e| panic!("{good}: {e}"));
        }
        assert!(check_nesting(&format!("a: {}{}", deep("[", 128), deep("]", 128))).is_ok());
        assert!(check_nesting(&format!("a: {}", deep("[", 129))).is_err());
    }

    #[test]
    fn a_link_planted_at_a_temporary_or_final_name_is_not_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let out = dir.path().join("plan.yaml");
        std::os::unix::fs::symlink(&victim, &out).unwrap();
        // a temporary's name taken by a link, to a file or to nothing, is never opened
        let dangling = dir.path().join("created-through-link");
        for target in [&victim, &dangling] {
            let planted = dir.path().join("planted");
            let _ = std::fs::remove_file(&planted);
            std::os::unix::fs::symlink(target, &planted).unwrap();
            assert!(create_exclusive(&planted).is_err());
        }
        write_bytes(&out, b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert!(!std::fs::symlink_metadata(&out).unwrap().file_type().is_symlink());
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "new");
        let lock = dir.path().join(".lock");
        std::os::unix::fs::symlink(&dangling, &lock).unwrap();
        assert!(open_lock_file(&lock).is_err());
        assert!(!dangling.exists());
    }
}
