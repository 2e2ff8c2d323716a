//! A process's resident memory watched while something runs: sampled on a
//! thread, the peak kept.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::http_support::proc_kib;

/// How often the server's RSS is sampled during the download.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(2);

/// A thread sampling `VmRSS` of a process every [`SAMPLE_EVERY`].
pub struct RssWatch {
    stop: Arc<AtomicBool>,
    peak: Arc<AtomicU64>,
    sampler: JoinHandle<()>,
}

impl RssWatch {
    /// Starts sampling `pid`, the peak starting at `from`.
    pub fn start(pid: u32, from: u64) -> RssWatch {
        let stop = Arc::new(AtomicBool::new(false));
        let peak = Arc::new(AtomicU64::new(from));
        let sampler = {
            let (stop, peak) = (stop.clone(), peak.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    peak.fetch_max(proc_kib(pid, "VmRSS"), Ordering::Relaxed);
                    std::thread::sleep(SAMPLE_EVERY);
                }
            })
        };
        RssWatch {
            stop,
            peak,
            sampler,
        }
    }

    /// Stops the sampler; the peak sampled.
    pub fn stop(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.sampler.join().expect("sampler");
        self.peak.load(Ordering::Relaxed)
    }
}
