//! Checks every backend makes on the bytes it is handed, before its engine reads them.

use bident_onnx::ModelProto;
use prost::Message;

/// True when the bytes are an ONNX model some tensor of which keeps its data in a file.
/// An engine's reader would open that file relative to the working directory, not the model's
/// folder, so such a model is never handed to it: bident-ir embeds every external tensor at
/// import, after checking the file lies inside the model's folder.
pub(crate) fn names_a_file(onnx: &[u8]) -> bool {
    // cheap guard: an external reference always carries the key `location`
    if !onnx.windows(8).any(|w| w == b"location") {
        return false;
    }
    ModelProto::decode(onnx).is_ok_and(|mut m| bident_onnx::visit::names_a_file(&mut m))
}

/// The refusal both backends give for such a model.
pub(crate) const NAMES_A_FILE: &str =
    "the model names external data files; backends are handed self-contained models only";
