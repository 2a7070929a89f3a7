//! Measured power from Linux powercap (RAPL) energy counters, where the kernel exposes them and
//! this process may read them: `/sys/class/powercap/<zone>/energy_uj` for each top-level zone
//! (`intel-rapl:0`, `amd-rapl:0`, ...; subzones such as `intel-rapl:0:0` are part of their parent).
//! `BIDENT_POWERCAP_DIR` points elsewhere (tests). Package counters measure the whole package, so
//! a PU's figure is the package's average power while that PU was being timed.

use std::path::{Path, PathBuf};
use std::time::Instant;

struct Zone {
    energy: PathBuf,
    /// The counter wraps to 0 after this many microjoules.
    range_uj: u64,
}

pub struct Rapl {
    zones: Vec<Zone>,
}

impl Rapl {
    /// The readable top-level zones, or None (no powercap, or not readable here).
    pub fn open() -> Option<Rapl> {
        let dir = std::env::var_os("BIDENT_POWERCAP_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/sys/class/powercap"));
        Self::open_at(&dir)
    }

    fn open_at(dir: &Path) -> Option<Rapl> {
        let mut zones: Vec<Zone> = std::fs::read_dir(dir)
            .ok()?
            .filter_map(|e| e.ok())
            .filter(|e| {
                let n = e.file_name().to_string_lossy().into_owned();
                // top level: `<vendor>-rapl:<package>`, one colon
                n.contains("rapl:") && n.matches(':').count() == 1
            })
            .filter_map(|e| {
                let energy = e.path().join("energy_uj");
                read_u64(&energy)?;
                let range_uj = read_u64(&e.path().join("max_energy_range_uj")).unwrap_or(u64::MAX);
                Some(Zone { energy, range_uj })
            })
            .collect();
        zones.sort_by(|a, b| a.energy.cmp(&b.energy));
        (!zones.is_empty()).then_some(Rapl { zones })
    }

    /// Start measuring.
    pub fn start(&self) -> Option<Reading> {
        Some(Reading { at: Instant::now(), uj: self.zones.iter().map(|z| read_u64(&z.energy)).collect::<Option<_>>()? })
    }

    /// Average power in watts since `from`, or None when the counters did not move.
    pub fn watts_since(&self, from: &Reading) -> Option<f64> {
        let secs = from.at.elapsed().as_secs_f64();
        let mut uj = 0u64;
        for (z, &before) in self.zones.iter().zip(&from.uj) {
            let now = read_u64(&z.energy)?;
            uj = uj.saturating_add(delta(before, now, z.range_uj));
        }
        (uj > 0 && secs > 0.0).then(|| uj as f64 / 1e6 / secs)
    }
}

pub struct Reading {
    at: Instant,
    uj: Vec<u64>,
}

fn read_u64(p: &Path) -> Option<u64> {
    std::fs::read_to_string(p).ok()?.trim().parse().ok()
}

/// Counter difference, allowing one wrap at `range`.
fn delta(before: u64, now: u64, range: u64) -> u64 {
    if now >= before { now - before } else { range.saturating_sub(before).saturating_add(now) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zones_deltas_and_wraps() {
        let dir = std::env::temp_dir().join(format!("bident-powercap-{}", std::process::id()));
        for (zone, uj) in [("intel-rapl:0", 1_000_000u64), ("intel-rapl:0:0", 5), ("intel-rapl:1", 2_000_000)] {
            std::fs::create_dir_all(dir.join(zone)).unwrap();
            std::fs::write(dir.join(zone).join("energy_uj"), uj.to_string()).unwrap();
            std::fs::write(dir.join(zone).join("max_energy_range_uj"), "262143328850").unwrap();
        }
        let rapl = Rapl::open_at(&dir).expect("two packages");
        assert_eq!(rapl.zones.len(), 2, "subzones are part of their package");
        let r = rapl.start().unwrap();
        assert_eq!(rapl.watts_since(&r), None, "counters that do not move measure nothing");
        std::fs::write(dir.join("intel-rapl:0").join("energy_uj"), "3000000").unwrap();
        assert!(rapl.watts_since(&r).is_some_and(|w| w > 0.0));
        assert_eq!(delta(262143328800, 50, 262143328850), 100);
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(Rapl::open_at(&dir).is_none());
    }
}
