//! Work the event loop must not do itself, done on one helper thread.
//!
//! Today that is verifying `.htpasswd` passwords (`access::auth`): a bcrypt cost-12 hash
//! takes about 0.3 s, which on the loop's thread would stall every connection. A [`Worker`]
//! owns one thread, started on the first job (so daemonising, `chroot` and the user switch,
//! which happen before, see a single-threaded process), a bounded queue of jobs to it, and a
//! channel of results back. After each result the thread wakes the loop through a
//! `mio::Waker` registered in the server's `Poll`; the loop then takes the results with
//! [`Worker::try_recv`]. Nothing polls.
//!
//! - **Bounded.** At most `capacity` jobs are in flight (queued or running); past that,
//!   [`Worker::submit`] gives the job back and the caller decides what to answer.
//! - **Ids.** Each job gets an id, unique for the life of the worker; its result comes back
//!   with it, in submission order.
//! - **Contained.** A job that panics yields `None` instead of a result; the thread goes on.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::Arc;

use mio::Waker;

/// The thread's side: jobs in, results out.
type Channels<J, R> = (SyncSender<(u64, J)>, Receiver<(u64, Option<R>)>);

/// One helper thread running `run` on each job.
pub struct Worker<J, R> {
    name: &'static str,
    capacity: usize,
    run: fn(J) -> R,
    waker: Arc<Waker>,
    channels: Option<Channels<J, R>>,
    next_id: u64,
    in_flight: usize,
}

impl<J: Send + 'static, R: Send + 'static> Worker<J, R> {
    /// A worker whose thread (named `name`) will run `run`; nothing starts until the first
    /// job. `waker` is woken after every result.
    pub fn new(name: &'static str, capacity: usize, waker: Arc<Waker>, run: fn(J) -> R) -> Worker<J, R> {
        Worker { name, capacity: capacity.max(1), run, waker, channels: None, next_id: 0, in_flight: 0 }
    }

    /// Queues `job` and returns its id, or gives it back when `capacity` jobs are in flight
    /// (or the thread cannot be started).
    pub fn submit(&mut self, job: J) -> Result<u64, J> {
        if self.in_flight >= self.capacity {
            return Err(job);
        }
        if self.channels.is_none() {
            match self.start() {
                Ok(c) => self.channels = Some(c),
                Err(_) => return Err(job),
            }
        }
        let Some((jobs, _)) = &self.channels else { return Err(job) };
        let id = self.next_id;
        match jobs.try_send((id, job)) {
            Ok(()) => {
                self.next_id += 1;
                self.in_flight += 1;
                Ok(id)
            }
            Err(TrySendError::Full((_, job)) | TrySendError::Disconnected((_, job))) => Err(job),
        }
    }

    /// The next finished job, if any: its id and result (`None` if the job panicked).
    pub fn try_recv(&mut self) -> Option<(u64, Option<R>)> {
        let (_, results) = self.channels.as_ref()?;
        let r = results.try_recv().ok()?;
        self.in_flight -= 1;
        Some(r)
    }

    /// Jobs submitted whose results have not been taken yet.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    fn start(&self) -> std::io::Result<Channels<J, R>> {
        let (job_tx, job_rx) = mpsc::sync_channel::<(u64, J)>(self.capacity);
        let (res_tx, res_rx) = mpsc::channel();
        let run = self.run;
        let waker = self.waker.clone();
        std::thread::Builder::new().name(self.name.to_string()).spawn(move || {
            // Ends when the loop drops its side.
            for (id, job) in job_rx {
                let result = catch_unwind(AssertUnwindSafe(|| run(job))).ok();
                if res_tx.send((id, result)).is_err() {
                    return;
                }
                // A failed wake-up can only mean the poller is gone: nothing to do.
                let _ = waker.wake();
            }
        })?;
        Ok((job_tx, res_rx))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mio::{Events, Poll, Token};
    use std::time::{Duration, Instant};

    fn slow_double(x: u64) -> u64 {
        if x == 99 {
            panic!("job 99 panics on purpose");
        }
        std::thread::sleep(Duration::from_millis(20));
        x * 2
    }

    /// Waits on the poller (as the loop does) until `n` results are in.
    fn collect(poll: &mut Poll, w: &mut Worker<u64, u64>, n: usize) -> Vec<(u64, Option<u64>)> {
        let mut events = Events::with_capacity(8);
        let mut out = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        while out.len() < n && Instant::now() < deadline {
            poll.poll(&mut events, Some(Duration::from_secs(1))).unwrap();
            while let Some(r) = w.try_recv() {
                out.push(r);
            }
        }
        out
    }

    #[test]
    fn results_wake_the_poller_in_order_and_the_queue_is_bounded() {
        let mut poll = Poll::new().unwrap();
        let waker = Arc::new(Waker::new(poll.registry(), Token(7)).unwrap());
        let mut w = Worker::new("test-worker", 3, waker, slow_double);
        assert!(w.try_recv().is_none(), "nothing before the first job");
        let ids: Vec<u64> = (1..=3).map(|x| w.submit(x).unwrap()).collect();
        assert_eq!(ids, [0, 1, 2]);
        assert_eq!(w.submit(4), Err(4), "a fourth job in flight is refused");
        assert_eq!(w.in_flight(), 3);
        let got = collect(&mut poll, &mut w, 3);
        assert_eq!(got, [(0, Some(2)), (1, Some(4)), (2, Some(6))]);
        assert_eq!(w.in_flight(), 0);
        // A panicking job yields None, and the thread goes on.
        let a = w.submit(99).unwrap();
        let b = w.submit(5).unwrap();
        assert_eq!(collect(&mut poll, &mut w, 2), [(a, None), (b, Some(10))]);
    }
}
