//! Shared harness for the workspace-level integration tests (see `tests/*.rs`).
