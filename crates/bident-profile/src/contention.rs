//! Measured cross-PU contention (paper 3.2.2): the slowdown factor SF(P_run, P_interfere).
//!
//! Protocol: one worker thread per PU, pinned to the PU's cores, compiles every probe model.
//! For every pair of PUs and every probe, in blocks: the probe is timed on each of the two PUs
//! alone (the other idle), then on both in barrier-synchronised rounds (both threads wait at a
//! barrier, then each runs the probe once, timed from the barrier's release), so each run of
//! one PU overlaps a run of the other.
//! Alternating solo and co-run blocks keeps slow drift of a shared machine out of the ratio. One
//! co-run gives both directions: SF(i | j) from i's times, SF(j | i) from j's. A probe's factor is
//! (co-run median / solo median); the matrix holds the median over probes.

use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Barrier};

use bident_backend::{Backend, BackendError, Executable, SocSpec, deadline};
use bident_tensor::HostTensor;

use crate::{Contention, ContentionSource, ProfileError, quantile};

/// A representative op for the co-runs: a name and a standalone ONNX model.
pub struct Probe {
    pub name: String,
    pub onnx: Vec<u8>,
}

/// Runs per measurement: `blocks` times, for each pair and probe, `warmup` + `runs` rounds of
/// each PU alone and of both together.
#[derive(Clone, Copy, Debug)]
pub struct ContentionConfig {
    pub warmup: u32,
    pub runs: u32,
    pub blocks: u32,
}

impl Default for ContentionConfig {
    fn default() -> Self {
        Self { warmup: 5, runs: 100, blocks: 3 }
    }
}

/// A worker's answer to a job: the timed runs (µs), or why it could not run them.
pub(crate) type Answer = Result<Vec<f64>, BackendError>;

pub(crate) enum Job {
    /// Time `probe` `runs` times (after `warmup` untimed), meeting the partner at `sync` before
    /// each run when given.
    Time { probe: usize, sync: Option<Arc<CoRun>> },
}

/// The rendezvous of two threads running at the same time. A co-run's time is measured from
/// the moment the barrier released both threads (the later arrival), not from when each thread
/// got to run: a thread that shares a core waits for the CPU, and that wait is part of its cost.
pub(crate) struct CoRun {
    barrier: Barrier,
    epoch: std::time::Instant,
    /// Latest arrival at the barrier this round, ns since `epoch`.
    last_arrival: std::sync::atomic::AtomicU64,
}

impl CoRun {
    pub(crate) fn new() -> Arc<CoRun> {
        Arc::new(CoRun {
            barrier: Barrier::new(2),
            epoch: std::time::Instant::now(),
            last_arrival: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// Wait for the partner; returns the release instant.
    fn meet(&self) -> std::time::Instant {
        use std::sync::atomic::Ordering;
        let now = self.epoch.elapsed().as_nanos() as u64;
        self.last_arrival.fetch_max(now, Ordering::SeqCst);
        self.barrier.wait();
        let release = self.epoch + std::time::Duration::from_nanos(self.last_arrival.load(Ordering::SeqCst));
        // both have read the release before either arrives for the next round
        self.barrier.wait();
        release
    }
}

/// Measure the SF matrix of `soc`'s PUs with `probes`. PUs that share hardware
/// ([`SocSpec::exclusive`]) never run at once: their pair is not co-run and its factor is 1.
pub fn measure(
    backend: &dyn Backend,
    soc: &SocSpec,
    probes: &[Probe],
    cfg: ContentionConfig,
) -> Result<Contention, ProfileError> {
    let n = soc.pus.len();
    std::thread::scope(|s| {
        let mut jobs: Vec<Sender<Job>> = vec![];
        let mut results: Vec<Receiver<Answer>> = vec![];
        for pu in &soc.pus {
            let (job_tx, job_rx) = channel::<Job>();
            let (res_tx, res_rx) = channel();
            jobs.push(job_tx);
            results.push(res_rx);
            s.spawn(move || worker(backend, pu, probes, cfg, job_rx, res_tx));
        }
        let fail = |pu: usize, e: BackendError| ProfileError::Contention { pu: soc.pus[pu].name.clone(), source: e };
        let recv = |pu: usize| -> Result<Vec<f64>, ProfileError> {
            results[pu].recv().map_err(|_| ProfileError::Worker(soc.pus[pu].name.clone()))?.map_err(|e| fail(pu, e))
        };
        // per pair and probe, blocks of (i alone, j alone, both) so that drift of the machine
        // over time hits solo and co-run times alike
        let exclusive = soc.exclusive();
        let mut ratios = vec![vec![vec![1.0; probes.len()]; n]; n];
        for i in 0..n {
            for j in i + 1..n {
                if exclusive[i][j] {
                    continue;
                }
                ratios[i][j].clear();
                ratios[j][i].clear();
                for p in 0..probes.len() {
                    let (mut solo, mut co) = ([vec![], vec![]], [vec![], vec![]]);
                    for _ in 0..cfg.blocks {
                        for (k, pu) in [i, j].into_iter().enumerate() {
                            let _ = jobs[pu].send(Job::Time { probe: p, sync: None });
                            solo[k].extend(recv(pu)?);
                        }
                        let sync = CoRun::new();
                        let _ = jobs[i].send(Job::Time { probe: p, sync: Some(sync.clone()) });
                        let _ = jobs[j].send(Job::Time { probe: p, sync: Some(sync) });
                        co[0].extend(recv(i)?);
                        co[1].extend(recv(j)?);
                    }
                    let mut sf = |k: usize| quantile(&mut co[k], 0.5) / quantile(&mut solo[k], 0.5);
                    ratios[i][j].push(sf(0));
                    ratios[j][i].push(sf(1));
                }
            }
        }
        drop(jobs);
        let factor = |i: usize, j: usize, p: usize| if i == j { 1.0 } else { ratios[i][j][p] };
        let by_probe: Vec<Vec<Vec<f64>>> =
            (0..probes.len()).map(|p| (0..n).map(|i| (0..n).map(|j| factor(i, j, p)).collect()).collect()).collect();
        let sf = (0..n)
            .map(|i| (0..n).map(|j| if i == j { 1.0 } else { quantile(&mut ratios[i][j].clone(), 0.5) }).collect())
            .collect();
        Ok(Contention {
            sf,
            source: ContentionSource::Measured {
                probes: probes.iter().map(|p| p.name.clone()).collect(),
                runs: cfg.runs,
                by_probe,
            },
        })
    })
}

/// A probe compiled for a PU, with its inputs.
type Compiled = (Box<dyn Executable>, Vec<HostTensor>);

/// One PU's worker: pin, compile every probe, then time what it is asked to.
pub(crate) fn worker(
    backend: &dyn Backend,
    pu: &bident_backend::PuSpec,
    probes: &[Probe],
    cfg: ContentionConfig,
    jobs: Receiver<Job>,
    results: Sender<Answer>,
) {
    let setup = || -> Result<Vec<Compiled>, BackendError> {
        bident_backend::pin_current_thread(&pu.name, &pu.cores)?;
        probes
            .iter()
            .enumerate()
            .map(|(k, p)| {
                let exe = backend.compile(&p.onnx, pu)?;
                let inputs = exe
                    .inputs()
                    .iter()
                    .map(|port| {
                        let shape = port.shape.clone().ok_or_else(|| BackendError::BadInput {
                            pu: pu.name.clone(),
                            index: 0,
                            name: port.name.clone(),
                            reason: format!("probe `{}` has a dynamic input shape", p.name),
                        })?;
                        Ok(HostTensor::seeded(port.dtype, shape, k as u64))
                    })
                    .collect::<Result<Vec<_>, BackendError>>()?;
                Ok((exe, inputs))
            })
            .collect()
    };
    let mut exes = match setup() {
        Ok(e) => e,
        Err(e) => {
            // answer every job with the setup error, still meeting the barrier every round so
            // that the partner thread is not left waiting
            for Job::Time { sync, .. } in jobs {
                for _ in 0..cfg.warmup + cfg.runs {
                    if let Some(s) = &sync {
                        s.meet();
                    }
                }
                let _ = results.send(Err(e.clone()));
            }
            return;
        }
    };
    for Job::Time { probe, sync } in jobs {
        let (exe, inputs) = &mut exes[probe];
        let refs: Vec<&HostTensor> = inputs.iter().collect();
        let mut times = Vec::with_capacity(cfg.runs as usize);
        let mut outcome = Ok(());
        for r in 0..cfg.warmup + cfg.runs {
            let release = sync.as_ref().map(|s| s.meet());
            // keep meeting the partner after a failure, so it is not left waiting
            if outcome.is_err() {
                continue;
            }
            let timed = deadline::guard_exe(exe.as_mut(), &pu.name, "a co-execution probe", |exe| {
                let t0 = release.unwrap_or_else(std::time::Instant::now);
                exe.run(&refs).map(|_| t0.elapsed())
            });
            match timed {
                Ok(t) if r >= cfg.warmup => times.push(t.as_secs_f64() * 1e6),
                Ok(_) => {}
                Err(e) => outcome = Err(e),
            }
        }
        let _ = results.send(outcome.map(|()| times));
    }
}
