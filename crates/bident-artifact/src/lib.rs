//! Framing of bident's stage artifacts.
//!
//! Every stage writes its result as a `.bin` file: an 8-byte magic, then a postcard-encoded
//! [`Header`] (artifact kind, schema version, hash of the inputs the artifact derives from, hash
//! of the payload), then the postcard payload. Beside it goes a `.yaml` twin for review; the
//! twin is never read back, the `.bin` is authoritative.
//!
//! This crate owns the framing, and ([`files`]) the reading and writing of every file bident
//! touches. Each artifact *type* is owned by the crate that produces it (`FusedGraph` in
//! bident-ir, `Plan` in bident-search, ...) and implements [`Artifact`]. This crate must not know
//! any of those types.

use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

pub mod files;

/// First bytes of every artifact file.
pub const MAGIC: [u8; 8] = *b"BIDENT\x00\x02";

/// A type that a stage writes to disk.
pub trait Artifact: Serialize + DeserializeOwned {
    /// Stable name of the artifact kind, e.g. `"fused-graph"`.
    const KIND: &'static str;
    /// Bumped whenever the serialized layout of the type changes.
    const SCHEMA_VERSION: u32;
}

/// A 32-byte BLAKE3 hash; printed as hex in YAML.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct ContentHash(pub [u8; 32]);

impl ContentHash {
    /// Hash of several byte strings, each length-prefixed so that `("ab","c") != ("a","bc")`.
    pub fn of_parts(parts: &[&[u8]]) -> Self {
        let mut h = blake3::Hasher::new();
        for p in parts {
            h.update(&(p.len() as u64).to_le_bytes());
            h.update(p);
        }
        Self(*h.finalize().as_bytes())
    }

    /// Plain BLAKE3 of one encoded payload (what [`payload_hash`] computes while encoding).
    pub fn of_payload(bytes: &[u8]) -> Self {
        Self(*blake3::hash(bytes).as_bytes())
    }

    /// Hash of a value's canonical bytes (its postcard encoding, the artifacts' own format):
    /// what input hashes are built from. Debug strings are no format: they change with the
    /// compiler and with every field's formatting.
    pub fn of_value<T: Serialize>(value: &T) -> Result<Self, ArtifactError> {
        payload_hash(value).map_err(|reason| ArtifactError::Encode { kind: "input hash", reason })
    }

    pub fn of(bytes: &[u8]) -> Self {
        Self::of_parts(&[bytes])
    }

    pub fn hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// First 12 hex digits, for messages.
    pub fn short(&self) -> String {
        self.hex()[..12].to_string()
    }
}

impl fmt::Debug for ContentHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ContentHash({})", self.short())
    }
}

impl fmt::Display for ContentHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.hex())
    }
}

impl Serialize for ContentHash {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() { s.serialize_str(&self.hex()) } else { self.0.serialize(s) }
    }
}

impl<'de> Deserialize<'de> for ContentHash {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        if d.is_human_readable() {
            let s = String::deserialize(d)?;
            let bytes = (0..s.len())
                .step_by(2)
                .map(|i| s.get(i..i + 2).and_then(|x| u8::from_str_radix(x, 16).ok()))
                .collect::<Option<Vec<u8>>>()
                .filter(|v| v.len() == 32)
                .ok_or_else(|| serde::de::Error::custom("expected 64 hex digits"))?;
            let mut out = [0u8; 32];
            out.copy_from_slice(&bytes);
            Ok(Self(out))
        } else {
            Ok(Self(<[u8; 32]>::deserialize(d)?))
        }
    }
}

/// Opaque bytes carried inside an artifact (e.g. an ONNX model). In YAML it prints as a size and
/// hash, never as a list of numbers.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Blob(pub bytes::Bytes);

impl Blob {
    pub fn new(bytes: impl Into<bytes::Bytes>) -> Self {
        Self(bytes.into())
    }
}

impl fmt::Debug for Blob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Blob({} bytes)", self.0.len())
    }
}

impl Serialize for Blob {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            s.serialize_str(&format!("<{} bytes, blake3 {}>", self.0.len(), ContentHash::of(&self.0).short()))
        } else {
            s.serialize_bytes(&self.0)
        }
    }
}

impl<'de> Deserialize<'de> for Blob {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        if d.is_human_readable() {
            return Err(serde::de::Error::custom(
                "a Blob cannot be read back from its readable form; read the .bin artifact",
            ));
        }
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Blob;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("bytes")
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Blob, E> {
                Ok(Blob(bytes::Bytes::copy_from_slice(v)))
            }
            fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<Blob, E> {
                Ok(Blob(v.into()))
            }
        }
        d.deserialize_byte_buf(V)
    }
}

/// What precedes the payload in every artifact file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    pub kind: String,
    pub schema_version: u32,
    /// Hash of everything the artifact was derived from (upstream artifacts' payload hashes,
    /// source model bytes, options).
    pub input_hash: ContentHash,
    /// Hash of the encoded payload; downstream artifacts put this into their `input_hash`.
    pub payload_hash: ContentHash,
    /// bident version that wrote the file.
    pub producer: String,
}

/// An artifact read back from disk together with its header.
#[derive(Debug)]
pub struct Stamped<A> {
    pub header: Header,
    pub value: A,
}

#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    #[error("{path}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {what}, not a regular file: refused unread")]
    NotAFile { path: PathBuf, what: &'static str },
    #[error("{path}: larger than {limit} bytes: refused")]
    TooLarge { path: PathBuf, limit: u64 },
    #[error("{path}: {reason}")]
    Text { path: PathBuf, reason: String },
    #[error("{path}: not a bident artifact of this version (bad magic; rerun the stage that writes it)")]
    BadMagic { path: PathBuf },
    #[error("{path}: corrupt artifact header: {reason}")]
    BadHeader { path: PathBuf, reason: String },
    #[error("{path}: is a `{found}` artifact, expected `{expected}`")]
    WrongKind { path: PathBuf, expected: &'static str, found: String },
    #[error(
        "{path}: `{kind}` schema version {found}, this bident reads version {expected}; rerun the stage that writes it"
    )]
    WrongVersion { path: PathBuf, kind: String, expected: u32, found: u32 },
    #[error("{path}: payload is corrupt (hash {found} does not match header {expected})")]
    Corrupt { path: PathBuf, expected: String, found: String },
    #[error("{path}: payload cannot be decoded: {reason}")]
    Decode { path: PathBuf, reason: String },
    #[error("cannot encode `{kind}`: {reason}")]
    Encode { kind: &'static str, reason: String },
    #[error(
        "{path}: was derived from inputs {found}, but the given upstream artifacts hash to {expected}; rerun the stage"
    )]
    Stale { path: PathBuf, expected: String, found: String },
}

/// Encode an artifact into the framed binary form.
pub fn encode<A: Artifact>(value: &A, input_hash: ContentHash) -> Result<Vec<u8>, ArtifactError> {
    let mut out = vec![];
    encode_into(value, input_hash, &mut out).map_err(|e| match e {
        Framing::Encode(e) => e,
        Framing::Io(e) => ArtifactError::Encode { kind: A::KIND, reason: e.to_string() },
    })?;
    Ok(out)
}

/// Hash of a value's encoded payload, computed while encoding into the hasher: nothing of the
/// size of the payload is allocated (a fused graph carries its model's weights).
pub fn payload_hash<T: Serialize>(value: &T) -> Result<ContentHash, String> {
    let mut h = blake3::Hasher::new();
    postcard::to_io(value, &mut h).map_err(|e| e.to_string())?;
    Ok(ContentHash(*h.finalize().as_bytes()))
}

enum Framing {
    Encode(ArtifactError),
    Io(std::io::Error),
}

/// Frame `value` into `out`: magic, header length, header, payload. The payload is encoded
/// twice (once into the hasher for the header, once into `out`) rather than held in memory.
fn encode_into<A: Artifact>(value: &A, input_hash: ContentHash, out: &mut impl Write) -> Result<Header, Framing> {
    let bad = |reason: String| Framing::Encode(ArtifactError::Encode { kind: A::KIND, reason });
    let header = Header {
        kind: A::KIND.to_string(),
        schema_version: A::SCHEMA_VERSION,
        input_hash,
        payload_hash: payload_hash(value).map_err(bad)?,
        producer: format!("bident {}", env!("CARGO_PKG_VERSION")),
    };
    let header_bytes = postcard::to_stdvec(&header).map_err(|e| bad(e.to_string()))?;
    out.write_all(&MAGIC).map_err(Framing::Io)?;
    out.write_all(&(header_bytes.len() as u32).to_le_bytes()).map_err(Framing::Io)?;
    out.write_all(&header_bytes).map_err(Framing::Io)?;
    let mut out = KeepError { inner: out, error: None };
    if let Err(e) = postcard::to_io(value, &mut out) {
        return Err(match out.error.take() {
            Some(io) => Framing::Io(io),
            None => bad(e.to_string()),
        });
    }
    Ok(header)
}

/// Split a framed artifact into its header and raw payload, checking magic and payload hash.
pub fn read_header<'a>(path: &Path, bytes: &'a [u8]) -> Result<(Header, &'a [u8]), ArtifactError> {
    let path_buf = || path.to_path_buf();
    if bytes.len() < MAGIC.len() || bytes[..MAGIC.len()] != MAGIC {
        return Err(ArtifactError::BadMagic { path: path_buf() });
    }
    if bytes.len() < MAGIC.len() + 4 {
        return Err(ArtifactError::BadHeader { path: path_buf(), reason: "file ends inside the header".into() });
    }
    let rest = &bytes[MAGIC.len()..];
    let mut len = [0u8; 4];
    len.copy_from_slice(&rest[..4]);
    let len = u32::from_le_bytes(len) as usize;
    let rest = &rest[4..];
    if rest.len() < len {
        return Err(ArtifactError::BadHeader {
            path: path_buf(),
            reason: format!("header wants {len} bytes, file has {}", rest.len()),
        });
    }
    let header: Header = postcard::from_bytes(&rest[..len])
        .map_err(|e| ArtifactError::BadHeader { path: path_buf(), reason: e.to_string() })?;
    let payload = &rest[len..];
    let found = ContentHash::of_payload(payload);
    if found != header.payload_hash {
        return Err(ArtifactError::Corrupt {
            path: path_buf(),
            expected: header.payload_hash.short(),
            found: found.short(),
        });
    }
    Ok((header, payload))
}

/// Decode a framed artifact of type `A`; `path` is only used in messages.
pub fn decode<A: Artifact>(path: &Path, bytes: &[u8]) -> Result<Stamped<A>, ArtifactError> {
    let (header, payload) = read_header(path, bytes)?;
    if header.kind != A::KIND {
        return Err(ArtifactError::WrongKind { path: path.to_path_buf(), expected: A::KIND, found: header.kind });
    }
    if header.schema_version != A::SCHEMA_VERSION {
        return Err(ArtifactError::WrongVersion {
            path: path.to_path_buf(),
            kind: header.kind,
            expected: A::SCHEMA_VERSION,
            found: header.schema_version,
        });
    }
    let value = postcard::from_bytes(payload)
        .map_err(|e| ArtifactError::Decode { path: path.to_path_buf(), reason: e.to_string() })?;
    Ok(Stamped { header, value })
}

/// Readable twin of an artifact: its header followed by the payload, as YAML.
pub fn to_yaml<A: Artifact>(header: &Header, value: &A) -> Result<String, ArtifactError> {
    #[derive(Serialize)]
    struct Twin<'a, A> {
        header: &'a Header,
        payload: &'a A,
    }
    serde_norway::to_string(&Twin { header, payload: value })
        .map_err(|e| ArtifactError::Encode { kind: A::KIND, reason: e.to_string() })
}

/// Write `value` to `path` (the `.bin`) and its YAML twin beside it (same stem, `.yaml`).
///
/// Both files are written to temporaries and renamed into place, so an interrupted or failed
/// write never leaves a file that looks valid. Returns the header written.
pub fn write<A: Artifact>(path: &Path, value: &A, input_hash: ContentHash) -> Result<Header, ArtifactError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|source| ArtifactError::Io { path: dir.to_path_buf(), source })?;
    }
    let mut header = None;
    write_atomic(path, |f| {
        let mut w = std::io::BufWriter::new(f);
        header = Some(encode_into(value, input_hash, &mut w)?);
        w.flush().map_err(Framing::Io)
    })?;
    let header = header.expect("set by the writer");
    let yaml = to_yaml(&header, value)?;
    write_atomic(&path.with_extension("yaml"), |f| f.write_all(yaml.as_bytes()).map_err(Framing::Io))?;
    Ok(header)
}

/// Read an artifact of type `A` from `path`.
pub fn read<A: Artifact>(path: &Path) -> Result<Stamped<A>, ArtifactError> {
    decode(path, &read_bytes(path)?)
}

/// The bytes of an artifact file, for [`decode`] or [`read_header`].
pub fn read_bytes(path: &Path) -> Result<Vec<u8>, ArtifactError> {
    files::read_limited(path, files::BINARY_LIMIT)
}

/// Check that an artifact was derived from the given inputs.
pub fn expect_inputs(path: &Path, header: &Header, expected: ContentHash) -> Result<(), ArtifactError> {
    if header.input_hash == expected {
        Ok(())
    } else {
        Err(ArtifactError::Stale {
            path: path.to_path_buf(),
            expected: expected.short(),
            found: header.input_hash.short(),
        })
    }
}

/// Remove an artifact and its twin if present (before a stage reruns, so a failure leaves none).
pub fn remove(path: &Path) -> Result<(), ArtifactError> {
    for p in [path.to_path_buf(), path.with_extension("yaml")] {
        match std::fs::remove_file(&p) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => return Err(ArtifactError::Io { path: p, source }),
        }
    }
    Ok(())
}

fn write_atomic(
    path: &Path,
    fill: impl FnOnce(&mut std::fs::File) -> Result<(), Framing>,
) -> Result<(), ArtifactError> {
    let mut encode_error = None;
    let written = files::write_with(path, |f| match fill(f) {
        Ok(()) => Ok(()),
        Err(Framing::Io(e)) => Err(e),
        Err(Framing::Encode(e)) => {
            encode_error = Some(e);
            Err(std::io::Error::other("encoding failed"))
        }
    });
    match (written, encode_error) {
        (_, Some(e)) => Err(e),
        (r, None) => r,
    }
}

/// A writer that keeps the I/O error of a failed write: postcard reports any failure of its
/// writer as "the serialize buffer is full", which would hide a full disk.
struct KeepError<W> {
    inner: W,
    error: Option<std::io::Error>,
}

impl<W: Write> Write for KeepError<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.inner.write(buf).inspect_err(|e| self.error = Some(std::io::Error::new(e.kind(), e.to_string())))
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Demo {
        name: String,
        blob: Blob,
    }
    impl Artifact for Demo {
        const KIND: &'static str = "demo";
        const SCHEMA_VERSION: u32 = 3;
    }

    #[derive(Debug, Serialize, Deserialize)]
    struct Other;
    impl Artifact for Other {
        const KIND: &'static str = "other";
        const SCHEMA_VERSION: u32 = 1;
    }

    fn demo() -> Demo {
        Demo { name: "x".into(), blob: Blob::new(vec![1u8, 2, 3]) }
    }

    #[test]
    fn round_trip_and_twin() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.bin");
        let h = write(&p, &demo(), ContentHash::of(b"in")).unwrap();
        let back = read::<Demo>(&p).unwrap();
        assert_eq!(back.value, demo());
        assert_eq!(back.header, h);
        let yaml = std::fs::read_to_string(p.with_extension("yaml")).unwrap();
        assert!(yaml.contains("kind: demo"), "{yaml}");
        assert!(yaml.contains("<3 bytes, blake3"), "{yaml}");
        expect_inputs(&p, &h, ContentHash::of(b"in")).unwrap();
        let stale = expect_inputs(&p, &h, ContentHash::of(b"other")).unwrap_err();
        assert!(stale.to_string().contains("rerun the stage"), "{stale}");
    }

    #[test]
    fn rejects_bad_files_with_reasons() {
        let p = Path::new("x.bin");
        let good = encode(&demo(), ContentHash::default()).unwrap();
        let msg = |r: Result<Stamped<Demo>, ArtifactError>| r.unwrap_err().to_string();
        assert!(msg(decode(p, b"hello world!")).contains("bad magic"));
        assert!(msg(decode(p, &good[..10])).contains("header"));
        let mut flipped = good.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 0xff;
        assert!(msg(decode(p, &flipped)).contains("corrupt"));
        let wrong = encode(&Other, ContentHash::default()).unwrap();
        assert!(msg(decode(p, &wrong)).contains("is a `other` artifact, expected `demo`"));
    }

    #[test]
    fn a_full_disk_is_reported_as_one() {
        // room for the header, not for the payload
        struct Disk(usize);
        impl Write for Disk {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                if self.0 < buf.len() {
                    return Err(std::io::Error::from_raw_os_error(libc::ENOSPC));
                }
                self.0 -= buf.len();
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let header_len = encode(&demo(), ContentHash::default()).unwrap().len() - 7;
        let Err(Framing::Io(e)) = encode_into(&demo(), ContentHash::default(), &mut Disk(header_len)) else {
            panic!("a failed write is an I/O error")
        };
        assert!(e.to_string().contains("No space left"), "{e}");
    }

    #[test]
    fn rejects_other_schema_version() {
        #[derive(Serialize, Deserialize)]
        struct DemoV2 {
            name: String,
            blob: Blob,
        }
        impl Artifact for DemoV2 {
            const KIND: &'static str = "demo";
            const SCHEMA_VERSION: u32 = 4;
        }
        let bytes = encode(&demo(), ContentHash::default()).unwrap();
        let err = decode::<DemoV2>(Path::new("x.bin"), &bytes).err().unwrap();
        assert!(err.to_string().contains("schema version 3"), "{err}");
    }
}
