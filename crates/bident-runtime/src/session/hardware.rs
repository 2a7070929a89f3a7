//! The hardware PUs share, locked around each backend call so that they never run at once.

use std::sync::{Mutex, MutexGuard};

use bident_backend::SocSpec;

use super::lock;

/// The hardware PUs share: a lock per CPU core (an unpinned CPU PU takes every core this
/// process may run on) and per other device, taken by a PU's worker around each backend call,
/// in index order, so that PUs sharing hardware never run at once ([`SocSpec::exclusive`]).
/// Empty when no two PUs the program uses share hardware: then nothing is locked.
pub(super) struct Hardware {
    locks: Vec<Mutex<()>>,
    /// Per PU, the locks it takes, ascending.
    of_pu: Vec<Vec<usize>>,
}

impl Hardware {
    pub(super) fn new(soc: &SocSpec, used: &[bool], exclusive: &[Vec<bool>]) -> Self {
        let n = soc.pus.len();
        let shares = (0..n).any(|i| used[i] && (0..n).any(|j| used[j] && exclusive[i][j]));
        if !shares {
            return Self { locks: vec![], of_pu: vec![vec![]; n] };
        }
        let all = bident_backend::allowed_cpus();
        let mut keys: Vec<String> = vec![];
        let of_pu = soc
            .pus
            .iter()
            .map(|pu| {
                let mine: Vec<String> = match pu.kind {
                    bident_backend::PuKind::Cpu => {
                        let cores = if pu.cores.is_empty() { &all } else { &pu.cores };
                        cores.iter().map(|c| format!("core {c}")).collect()
                    }
                    kind => vec![format!("{} {}", kind.name(), pu.device)],
                };
                let mut idx: Vec<usize> = mine
                    .into_iter()
                    .map(|k| match keys.iter().position(|x| *x == k) {
                        Some(i) => i,
                        None => {
                            keys.push(k);
                            keys.len() - 1
                        }
                    })
                    .collect();
                idx.sort_unstable();
                idx.dedup();
                idx
            })
            .collect();
        Self { locks: keys.iter().map(|_| Mutex::new(())).collect(), of_pu }
    }

    /// Hold PU `pu`'s hardware until the guards drop.
    pub(super) fn take(&self, pu: usize) -> Vec<MutexGuard<'_, ()>> {
        self.of_pu[pu].iter().map(|&i| lock(&self.locks[i])).collect()
    }
}
