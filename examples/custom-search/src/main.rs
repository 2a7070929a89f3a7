//! bident's whole command line with one more search, `cheapest-run`: a crate of one's own
//! registers its passes and hands the rest to bident (`xtask::main_with`), so no bident source
//! is edited. `cargo run -p bident-example-search -- pipeline --search cheapest-run`.

fn main() {
    // SAFETY: the first statement of main: no other thread exists yet.
    unsafe {
        xtask::main_with(|passes| {
            // bident's own searches are named otherwise: the name is free
            let _ = passes.add_search(Box::new(bident_example_search::CheapestRun));
        })
    }
}
