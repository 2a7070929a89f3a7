//! `cargo xtask`: bident's command line with bident's own passes.

fn main() {
    // SAFETY: the first statement of main: no other thread exists yet.
    unsafe { xtask::main_with(|_| {}) }
}
