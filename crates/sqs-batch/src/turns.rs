//! One key's work at a time inside one processor: records that name the same business key (a
//! producer's retried send delivered twice in one batch) run their keyed work one after the
//! other, so the second sees what the first did (a duplicate to acknowledge) instead of meeting
//! the first's live claim and being retried after its lease.
//!
//! The keys are kept by their hash, so holding one costs no allocation: two keys whose hashes
//! collide only wait for each other, which is never wrong, only slower.

use std::collections::hash_map::Entry;
use std::future::poll_fn;
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Poll, Waker};

use rustc_hash::{FxBuildHasher, FxHashMap};

/// The keys whose work is running in one processor, each with the wakers of the records
/// waiting for it.
#[derive(Debug, Default)]
pub(crate) struct KeyTurns {
    held: Mutex<FxHashMap<u64, Vec<Waker>>>,
}

impl KeyTurns {
    fn held(&self) -> MutexGuard<'_, FxHashMap<u64, Vec<Waker>>> {
        // Nothing panics while the lock is held; a poisoned map is still consistent.
        self.held
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Waits until no other holder has `key`, then holds it until the turn is dropped.
    pub(crate) async fn take(self: Arc<Self>, key: &str) -> KeyTurn {
        let hash = FxBuildHasher.hash_one(key);
        poll_fn(|cx| {
            let mut held = self.held();
            match held.entry(hash) {
                Entry::Vacant(free) => {
                    free.insert(Vec::new());
                    Poll::Ready(())
                }
                Entry::Occupied(mut taken) => {
                    let waiting = taken.get_mut();
                    if !waiting.iter().any(|w| w.will_wake(cx.waker())) {
                        waiting.push(cx.waker().clone());
                    }
                    Poll::Pending
                }
            }
        })
        .await;
        KeyTurn {
            turns: Some((self, hash)),
        }
    }
}

/// A key held by [`key_turn`](crate::processor::key_turn): the next record of the same key
/// starts its keyed work when this is dropped.
#[derive(Debug)]
#[must_use = "the key is held only while the turn is kept"]
pub struct KeyTurn {
    /// `None` outside a processor: nothing was held.
    turns: Option<(Arc<KeyTurns>, u64)>,
}

impl KeyTurn {
    /// A turn that holds nothing (outside a processor).
    pub(crate) fn none() -> Self {
        Self { turns: None }
    }
}

impl Drop for KeyTurn {
    fn drop(&mut self) {
        let Some((turns, hash)) = self.turns.take() else {
            return;
        };
        let waiting = turns.held().remove(&hash).unwrap_or_default();
        // Every waiter polls again; the first takes the key, the others wait on it anew.
        for waker in waiting {
            waker.wake();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::task::Context;

    fn pending<F: Future>(future: std::pin::Pin<&mut F>) -> bool {
        future
            .poll(&mut Context::from_waker(Waker::noop()))
            .is_pending()
    }

    /// The second taker of a key waits until the first turn is dropped; another key does not.
    #[tokio::test]
    async fn a_key_is_held_by_one_turn_at_a_time() {
        let turns = Arc::new(KeyTurns::default());
        let first = turns.clone().take("k").await;
        let other = turns.clone().take("other").await;
        let mut second = Box::pin(turns.clone().take("k"));
        assert!(pending(second.as_mut()), "held by the first");
        drop(other);
        assert!(pending(second.as_mut()));
        drop(first);
        let second = second.await;
        drop(second);
        assert!(turns.held().is_empty(), "nothing is left held");
        // Outside a processor a turn holds nothing.
        drop(KeyTurn::none());
    }
}
