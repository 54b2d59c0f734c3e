//! `wisp-sync`: taking a `std::sync` lock the way every wisp crate does, ignoring poisoning.
//!
//! A lock is poisoned when a thread panics while holding it. wisp catches panics where it
//! can go on (a reconcile that panics is rolled back and the batch continues; a request
//! task that panics ends only that request), and every critical section under these locks
//! leaves the guarded data consistent at each step, so a poisoned lock still guards sound
//! data: refusing it would turn one panic into a wedged controller or data plane. This
//! crate has no dependencies, so any wisp crate, however low, can use it.
//!
//! Use [`lock`] for a `Mutex`, [`read`] and [`write`] for an `RwLock`.

use std::sync::{Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Locks `m`, taking the guard of a poisoned lock too (see the crate doc for why).
pub fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Read-locks `l`, taking the guard of a poisoned lock too.
pub fn read<T: ?Sized>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(PoisonError::into_inner)
}

/// Write-locks `l`, taking the guard of a poisoned lock too.
pub fn write<T: ?Sized>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use std::sync::{Mutex, RwLock};

    #[test]
    fn a_poisoned_lock_still_hands_out_its_data() {
        let m = Mutex::new(1);
        let l = RwLock::new(2);
        let _ = std::panic::catch_unwind(|| {
            let _g = m.lock().unwrap();
            let _w = l.write().unwrap();
            panic!("poison both");
        });
        assert!(m.is_poisoned() && l.is_poisoned());
        *super::lock(&m) += 1;
        *super::write(&l) += 1;
        assert_eq!(*super::lock(&m), 2);
        assert_eq!(*super::read(&l), 3);
    }
}
