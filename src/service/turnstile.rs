//! The turnstile: the mutating calls take the engines lock in arrival
//! order (std's `Mutex` is not fair).

use std::sync::Mutex;

use super::order::{self, Before, Held};

/// A FIFO gate in front of the engines lock for the mutating calls: each
/// takes a ticket and waits for its turn, so concurrent producers are served
/// in arrival order (std's `Mutex` is not fair).
#[derive(Default)]
pub(super) struct Turnstile {
    next: std::sync::atomic::AtomicU64,
    serving: Mutex<Serving>,
    turn: std::sync::Condvar,
}

/// The ticket being served, and how many wait for theirs (a turn's end
/// wakes them only when there are some: `notify_all` is a system call even
/// with no one waiting, on every call).
#[derive(Default)]
struct Serving {
    ticket: u64,
    waiting: usize,
}

/// A turn being served; the next ticket's turn comes when it is dropped.
pub(super) struct TurnGuard<'a>(&'a Turnstile, order::Inside<'a, order::Turn>);

impl TurnGuard<'_> {
    /// The token for what may be taken during the turn.
    pub(super) fn held(&mut self) -> &mut Held<order::Turn> {
        self.1.held()
    }
}

impl Turnstile {
    pub(super) fn wait<'a, L: Before<order::Turn>>(&'a self, at: &'a mut Held<L>) -> TurnGuard<'a> {
        let t = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut serving = self.serving.lock().unwrap_or_else(|e| e.into_inner());
        while serving.ticket != t {
            serving.waiting += 1;
            serving = self.turn.wait(serving).unwrap_or_else(|e| e.into_inner());
            serving.waiting -= 1;
        }
        TurnGuard(self, Held::inside(at))
    }
}

impl Drop for TurnGuard<'_> {
    fn drop(&mut self) {
        let mut serving = self.0.serving.lock().unwrap_or_else(|e| e.into_inner());
        serving.ticket += 1;
        if serving.waiting > 0 {
            self.0.turn.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    fn until(what: &str, cond: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !cond() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::yield_now();
        }
    }

    #[test]
    fn turns_are_served_in_arrival_order() {
        let gate = Arc::new(Turnstile::default());
        let served = Arc::new(Mutex::new(Vec::new()));
        let mut at = Held::entry();
        let first = gate.wait(&mut at);
        let mut handles = Vec::new();
        for id in 1..=5u64 {
            let (g, s) = (gate.clone(), served.clone());
            handles.push(std::thread::spawn(move || {
                let entry = &mut Held::entry();
                let _turn = g.wait(entry);
                s.lock().unwrap().push(id);
            }));
            // the next thread arrives only once this one holds its ticket
            until("the ticket", || gate.next.load(Ordering::Relaxed) == id + 1);
        }
        assert!(
            served.lock().unwrap().is_empty(),
            "served before the first turn ended"
        );
        drop(first);
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(*served.lock().unwrap(), vec![1, 2, 3, 4, 5]);
    }
}
