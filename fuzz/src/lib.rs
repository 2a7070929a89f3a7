//! What the artifact targets share: the fixed context a reader checks an artifact against (the
//! zoo's `example` through partition, the virtual `lunar-lake` SoC and the search, built once),
//! and a decode that lets mutated payloads reach the verifiers.

use std::path::Path;
use std::sync::OnceLock;

use bident_artifact::{Artifact, ArtifactError, ContentHash, Header, MAGIC};
use bident_ir::FusedGraph;
use bident_partition::PhasedGraph;
use bident_profile::CostTable;
use bident_profile::simulate::VirtualSoc;
use bident_search::{Plan, SearchConfig};

/// The artifacts of the `example` model, as `cargo xtask fuzz` seeds them.
pub struct Context {
    pub graph: FusedGraph,
    pub phased: PhasedGraph,
    pub costs: CostTable,
    pub plan: Plan,
}

pub fn context() -> &'static Context {
    static CX: OnceLock<Context> = OnceLock::new();
    CX.get_or_init(|| {
        let onnx = bident_zoo::build_bytes("example", 0).expect("zoo model `example`");
        let graph = bident_ir::import_bytes(&onnx, "example.onnx", None, &Default::default()).expect("import");
        let phased = bident_partition::partition(&graph).expect("partition");
        let soc = VirtualSoc::preset("lunar-lake").expect("virtual SoC `lunar-lake`");
        let costs = bident_profile::simulate::simulate(&graph, &soc).expect("simulate");
        let plan = bident_search::search(&phased, &costs, &SearchConfig::default()).expect("search");
        Context { graph, phased, costs, plan }
    })
}

/// Decode `data` as an artifact of type `A`, as a reader does. The fuzzer cannot forge a BLAKE3
/// hash, so a mutated payload would never get past the header's payload hash: when that check
/// is all that fails, the header is rewritten with the payload's own hash and decoded again.
pub fn decode<A: Artifact>(data: &[u8]) -> Option<A> {
    let path = Path::new("fuzz.bin");
    match bident_artifact::decode::<A>(path, data) {
        Ok(a) => Some(a.value),
        Err(ArtifactError::Corrupt { .. }) => bident_artifact::decode::<A>(path, &rehash(data)?).ok().map(|a| a.value),
        Err(_) => None,
    }
}

/// `data` with the header's payload hash replaced by the payload's; None when the framing is bad.
fn rehash(data: &[u8]) -> Option<Vec<u8>> {
    let rest = data.get(MAGIC.len()..)?;
    let len = u32::from_le_bytes(rest.get(..4)?.try_into().ok()?) as usize;
    let end = 4usize.checked_add(len)?;
    let mut header: Header = postcard::from_bytes(rest.get(4..end)?).ok()?;
    let payload = &rest[end..];
    header.payload_hash = ContentHash::of_payload(payload);
    let header = postcard::to_stdvec(&header).ok()?;
    let mut out = MAGIC.to_vec();
    out.extend((header.len() as u32).to_le_bytes());
    out.extend(header);
    out.extend(payload);
    Some(out)
}
