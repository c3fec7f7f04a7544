//! Named fault points that the test suite arms (feature `fault-injection`), for faults no
//! outside input can cause any more, such as a panic inside a server's worker. Without the
//! feature every point is a constant `false` that the compiler removes.

#[cfg(feature = "fault-injection")]
mod armed {
    use std::sync::{Mutex, PoisonError};

    static ARMED: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

    /// Makes the next `fire(point, key)` return true, once.
    pub fn arm(point: &str, key: &str) {
        ARMED.lock().unwrap_or_else(PoisonError::into_inner).push((point.to_owned(), key.to_owned()));
    }

    pub(crate) fn fire(point: &str, key: &str) -> bool {
        let mut armed = ARMED.lock().unwrap_or_else(PoisonError::into_inner);
        let found = armed.iter().position(|(p, k)| p == point && k == key);
        found.map(|idx| armed.remove(idx)).is_some()
    }
}

#[cfg(feature = "fault-injection")]
pub use armed::arm;
#[cfg(feature = "fault-injection")]
pub(crate) use armed::fire;

#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub(crate) fn fire(_point: &str, _key: &str) -> bool {
    false
}
