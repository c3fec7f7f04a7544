//! A server's call slots (`max_concurrent_calls`), handed out fairly: when all are taken,
//! waiting calls are served round-robin across callers, not first come first served, so an
//! agent with one call waiting goes ahead of another's 99th.
//!
//! A slot is released when its [`Slot`] is dropped, which the session does when the server
//! answers (or gives up on the answer): then the next caller in the ring gets it directly,
//! without the count ever dropping below full while anyone waits. A caller that stops waiting
//! (its deadline passed, it went away) simply drops its receiver; the ring skips it.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::oneshot;

/// One server's slots and the callers waiting for one.
#[derive(Debug)]
pub struct CallQueue {
    capacity: usize,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    in_use: usize,
    /// The callers with calls waiting, in the order they are served; each appears once.
    ring: VecDeque<(Arc<str>, VecDeque<oneshot::Sender<Slot>>)>,
    waiting: usize,
}

/// A taken slot; dropping it passes the slot on.
#[derive(Debug)]
pub struct Slot {
    queue: Option<Arc<CallQueue>>,
}

impl CallQueue {
    pub fn new(capacity: usize) -> Arc<CallQueue> {
        Arc::new(CallQueue { capacity: capacity.max(1), inner: Mutex::new(Inner::default()) })
    }

    /// Waits for a slot for `caller`'s call. Cancel-safe: dropping the future gives up the place
    /// in line (and a slot handed over meanwhile goes on to the next caller).
    pub async fn acquire(self: &Arc<Self>, caller: &Arc<str>) -> Slot {
        let receiver = {
            let mut inner = self.lock();
            if inner.in_use < self.capacity && inner.waiting == 0 {
                inner.in_use += 1;
                return Slot { queue: Some(self.clone()) };
            }
            let (sender, receiver) = oneshot::channel();
            match inner.ring.iter_mut().find(|(who, _)| who == caller) {
                Some((_, line)) => line.push_back(sender),
                None => inner.ring.push_back((caller.clone(), VecDeque::from([sender]))),
            }
            inner.waiting += 1;
            receiver
        };
        match receiver.await {
            Ok(slot) => slot,
            // The queue never drops a sender without sending, except when it is dropped itself,
            // which cannot happen while this `Arc` is held.
            Err(_) => unreachable!("a call queue dropped a waiting caller"),
        }
    }

    /// Calls waiting for a slot now.
    pub fn waiting(&self) -> usize {
        self.lock().waiting
    }

    /// Slots taken now.
    pub fn in_use(&self) -> usize {
        self.lock().in_use
    }

    /// Hands a freed slot to the next waiting caller in the ring, or frees it.
    fn release(self: &Arc<Self>) {
        let mut inner = self.lock();
        while let Some((caller, mut line)) = inner.ring.pop_front() {
            let next = line.pop_front();
            if !line.is_empty() {
                // Served once this round: to the back of the ring.
                inner.ring.push_back((caller, line));
            }
            let Some(sender) = next else { continue };
            inner.waiting -= 1;
            match sender.send(Slot { queue: Some(self.clone()) }) {
                Ok(()) => return,
                // That caller stopped waiting: the slot, returned, must not release again.
                Err(mut slot) => slot.queue = None,
            }
        }
        inner.in_use -= 1;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(queue) = self.queue.take() {
            queue.release();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn who(name: &str) -> Arc<str> {
        Arc::from(name)
    }

    #[tokio::test]
    async fn waiting_callers_are_served_round_robin_not_in_arrival_order() {
        let queue = CallQueue::new(1);
        let held = queue.acquire(&who("flood")).await;
        let served = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        // The flood queues 5 calls first, then the polite agent queues 1.
        for (name, index) in [("flood", 0), ("flood", 1), ("flood", 2), ("flood", 3), ("flood", 4), ("polite", 0)] {
            let (queue, served) = (queue.clone(), served.clone());
            tasks.push(tokio::spawn(async move {
                let slot = queue.acquire(&who(name)).await;
                served.lock().unwrap().push(format!("{name}{index}"));
                drop(slot);
            }));
            tokio::task::yield_now().await;
        }
        while queue.waiting() < 6 {
            tokio::task::yield_now().await;
        }
        drop(held);
        for task in tasks {
            task.await.unwrap();
        }
        let served = served.lock().unwrap().clone();
        assert_eq!(served[..2], ["flood0".to_owned(), "polite0".to_owned()], "{served:?}");
        assert_eq!(served.len(), 6);
        assert_eq!((queue.in_use(), queue.waiting()), (0, 0));
    }

    #[tokio::test]
    async fn a_caller_that_stops_waiting_loses_its_place_and_no_slot() {
        let queue = CallQueue::new(1);
        let held = queue.acquire(&who("a")).await;
        let gave_up = tokio::time::timeout(std::time::Duration::from_millis(1), queue.acquire(&who("b"))).await;
        assert!(gave_up.is_err());
        drop(held);
        assert_eq!(queue.in_use(), 0, "the slot is free, not handed to the caller that left");
        let again = queue.acquire(&who("c")).await;
        assert_eq!(queue.in_use(), 1);
        drop(again);
    }

    proptest::proptest! {
        /// Whatever the arrivals, departures and capacity: never more slots taken than the
        /// capacity, and every slot comes back.
        #[test]
        fn slots_are_exact_under_any_interleaving(capacity in 1usize..4, ops in proptest::collection::vec((0u8..3, 0u8..3), 1..60)) {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
            runtime.block_on(async {
                let queue = CallQueue::new(capacity);
                let mut held = Vec::new();
                let mut pending = Vec::new();
                for (op, caller) in ops {
                    match op {
                        0 => {
                            let queue = queue.clone();
                            let caller = who(&caller.to_string());
                            pending.push(tokio::spawn(async move { queue.acquire(&caller).await }));
                        }
                        1 if !held.is_empty() => drop(held.remove(0)),
                        _ => {
                            if let Some(task) = pending.pop() { task.abort(); }
                        }
                    }
                    for _ in 0..4 { tokio::task::yield_now().await; }
                    let mut still = Vec::new();
                    for task in pending.drain(..) {
                        if task.is_finished() {
                            if let Ok(slot) = task.await { held.push(slot); }
                        } else {
                            still.push(task);
                        }
                    }
                    pending = still;
                    assert!(queue.in_use() <= capacity);
                    assert_eq!(queue.in_use(), held.len(), "a slot is either held or free");
                }
                for task in pending { task.abort(); }
                held.clear();
                for _ in 0..4 { tokio::task::yield_now().await; }
                assert_eq!(queue.in_use(), 0);
            });
        }
    }
}
