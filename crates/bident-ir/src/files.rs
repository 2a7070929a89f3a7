//! The files a model makes bident read, treated as untrusted input: the model file itself, its
//! external data and an IR's weights. Only regular files are read (a FIFO or a device would block
//! or never end), and the files a model names only inside the model's own folder, whatever the
//! working directory: no absolute path, no `..`, no symbolic link that resolves outside.
//!
//! Every tensor of the model is resolved here, subgraphs and attributes included, so the bytes
//! handed to a backend never name a file (OpenVINO's reader would resolve a location against the
//! working directory, not the model's folder).

use std::collections::HashMap;
use std::io::Read;
use std::path::{Component, Path, PathBuf};

use bytes::Bytes;

use crate::IrError;
use crate::proto::{ModelProto, TensorProto, tensor_proto::DataLocation};

/// Read a regular file; a FIFO, socket, device or folder is refused without blocking on it.
pub(crate) fn read_regular(path: &Path) -> Result<Vec<u8>, IrError> {
    Ok(bident_artifact::files::read_limited(path, bident_artifact::files::BINARY_LIMIT)?)
}

/// The model file's folder, for resolving what it names (`""` for a bare file name is the
/// working directory, where the model is).
pub(crate) fn model_dir(model: &Path) -> PathBuf {
    match model.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Why a file a model names cannot be read.
pub(crate) enum Refused {
    /// Absolute, `..`, or a link resolving outside the folder.
    Escapes,
    Other(String),
}

/// Read `location`, a path a model names, inside `dir`.
pub(crate) fn read_inside(dir: &Path, location: &str) -> Result<Vec<u8>, Refused> {
    let rel = Path::new(location);
    if location.is_empty() {
        return Err(Refused::Other("the location is empty".into()));
    }
    if rel.components().any(|c| !matches!(c, Component::Normal(_) | Component::CurDir)) {
        return Err(Refused::Escapes);
    }
    let dir = dir.canonicalize().map_err(|e| Refused::Other(format!("{}: {e}", dir.display())))?;
    let full = dir.join(rel);
    // canonical: every link resolved, so the prefix test sees where the bytes really are
    let real = full.canonicalize().map_err(|e| Refused::Other(format!("{}: {e}", full.display())))?;
    if !real.starts_with(&dir) {
        return Err(Refused::Escapes);
    }
    // O_NOFOLLOW: a link swapped in after the check is refused, not followed
    let mut f = bident_artifact::files::open_read(&real, true)
        .map_err(|e| Refused::Other(format!("{}: {e}", full.display())))?;
    let meta = f.metadata().map_err(|e| Refused::Other(format!("{}: {e}", full.display())))?;
    if !meta.is_file() {
        return Err(Refused::Other(format!("{} is not a regular file", full.display())));
    }
    if meta.len() > bident_artifact::files::BINARY_LIMIT {
        return Err(Refused::Other(format!(
            "{} is larger than {} bytes",
            full.display(),
            bident_artifact::files::BINARY_LIMIT
        )));
    }
    let mut bytes = vec![];
    f.read_to_end(&mut bytes).map_err(|e| Refused::Other(format!("{}: {e}", full.display())))?;
    Ok(bytes)
}

/// Read every external-data tensor of the model (see [`crate::proto::visit::tensors_mut`]) into
/// `raw_data`, appending the bytes read to `all`. True when there was any.
pub(crate) fn resolve_external_data(
    model: &mut ModelProto,
    dir: Option<&Path>,
    all: &mut Vec<u8>,
) -> Result<bool, IrError> {
    let mut any = false;
    // each file read once, however many tensors it holds
    let mut files: HashMap<String, Vec<u8>> = HashMap::new();
    crate::proto::visit::tensors_mut(model, &mut |t: &mut TensorProto| -> Result<(), IrError> {
        if t.data_location != Some(DataLocation::External as i32) {
            return Ok(());
        }
        let slice = read_external(t, dir, &mut files)?;
        all.extend_from_slice(&slice);
        t.raw_data = Some(Bytes::from(slice));
        t.external_data.clear();
        t.data_location = Some(DataLocation::Default as i32);
        any = true;
        Ok(())
    })?;
    Ok(any)
}

/// The bytes of one external-data tensor, read inside `dir`.
fn read_external(
    t: &TensorProto,
    dir: Option<&Path>,
    files: &mut HashMap<String, Vec<u8>>,
) -> Result<Vec<u8>, IrError> {
    let name = t.name().to_string();
    let ext = |reason: String| IrError::ExternalData { tensor: name.clone(), reason };
    let value = |k: &str| t.external_data.iter().find(|e| e.key() == k).map(|e| e.value());
    let location = value("location").ok_or_else(|| ext("no location".into()))?;
    let dir = dir.ok_or_else(|| ext("external data needs the model's folder (import from a file)".into()))?;
    if !files.contains_key(location) {
        let data = read_inside(dir, location).map_err(|r| match r {
            Refused::Escapes => IrError::ExternalDataEscapes {
                tensor: name.clone(),
                location: location.to_string(),
                dir: dir.to_path_buf(),
            },
            Refused::Other(reason) => ext(reason),
        })?;
        files.insert(location.to_string(), data);
    }
    let data = &files[location];
    let num = |k: &str| value(k).map(|v| v.parse::<usize>().map_err(|_| ext(format!("bad {k} `{v}`")))).transpose();
    let offset = num("offset")?.unwrap_or(0);
    let length = num("length")?.unwrap_or(data.len().saturating_sub(offset));
    let end = offset.checked_add(length).ok_or_else(|| ext(format!("offset {offset} + length {length} overflows")))?;
    let slice = data
        .get(offset..end)
        .ok_or_else(|| ext(format!("{location}: bytes {offset}..{end} beyond file size {}", data.len())))?;
    Ok(slice.to_vec())
}
