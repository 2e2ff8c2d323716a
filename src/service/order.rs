//! The service's lock order, kept by the compiler.
//!
//! The service takes its locks in one order: the checkpoint slot (one
//! window checkpoint, restore or deletion at a time), a turn (mutating
//! calls in arrival order), the engines lock (the engines), the commit
//! queue, the writer (the writing connection). Taking them in any other
//! order can deadlock, so none of them is reachable without a token that
//! says how far down the order the caller already is:
//!
//! - `&mut Held<L>` is the token of a caller whose innermost lock is at
//!   level `L` ([`Nothing`] when it holds none of them);
//! - taking a lock at level `M` needs a token `Held<L>` with
//!   `L: Before<M>`; the guard ([`Locked`], or the turnstile's turn)
//!   mutably borrows that token for as long as it lives, so the outer token
//!   cannot be used to take anything meanwhile, and it lends a token of
//!   its own level `M` ([`Locked::held`], [`Locked::parts`]) for what may
//!   be taken inside it.
//!
//! So a function that takes the engines lock cannot be called by code
//! holding the queue or the writer: it would need a `Held<L>` with
//! `L: Before<Engines>`, and the only tokens such code can reach are
//! `Held<Queue>` or `Held<Writer>` (their `Before<Engines>` does not
//! exist). A fresh token ([`Held::entry`]) is made only where a call enters
//! the service: its `pub fn`s, its threads' loops.

use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::sync::{Condvar, MutexGuard};

/// No lock of the order is held.
pub(super) enum Nothing {}
/// The checkpoint slot is held.
pub(super) enum Checkpointing {}
/// A turn of the turnstile is held.
pub(super) enum Turn {}
/// The engines lock is held.
pub(super) enum Engines {}
/// The commit queue is held.
pub(super) enum Queue {}
/// The writing connection is held.
pub(super) enum Writer {}

/// `Self` comes before `M` in the order: code holding `Self` may take `M`.
pub(super) trait Before<M> {}

macro_rules! order {
    ($first:ident $(, $rest:ident)*) => {
        $(impl Before<$rest> for $first {})*
        order!($($rest),*);
    };
    () => {};
}
order!(Nothing, Checkpointing, Turn, Engines, Queue, Writer);

/// The token of a caller whose innermost lock is at level `L`. Neither
/// `Clone` nor `Copy`: it is lent, never duplicated.
pub(super) struct Held<L>(PhantomData<L>);

impl Held<Nothing> {
    /// The token of a call entering the service, holding nothing.
    pub(super) fn entry() -> Held<Nothing> {
        Held(PhantomData)
    }
}

impl<L> Held<L> {
    /// The token a guard at level `L` lends; `_outer` stays borrowed for
    /// the guard's life.
    pub(super) fn inside<'a, O: Before<L>>(_outer: &'a mut Held<O>) -> Inside<'a, L> {
        Inside {
            held: Held(PhantomData),
            _outer: PhantomData,
        }
    }
}

/// A level's token tied to the borrow of the token outside it (for guards
/// other than a mutex's, such as the turnstile's turn).
pub(super) struct Inside<'a, L> {
    held: Held<L>,
    _outer: PhantomData<&'a mut ()>,
}

impl<L> Inside<'_, L> {
    /// The token for what may be taken inside.
    pub(super) fn held(&mut self) -> &mut Held<L> {
        &mut self.held
    }
}

/// A mutex guard at level `L`: derefs to the data, lends a `Held<L>`.
pub(super) struct Locked<'a, T, L> {
    guard: MutexGuard<'a, T>,
    inside: Inside<'a, L>,
}

impl<'a, T, L> Locked<'a, T, L> {
    /// Wraps `guard`, taken by a caller whose token is `outer`.
    pub(super) fn new<O: Before<L>>(guard: MutexGuard<'a, T>, outer: &'a mut Held<O>) -> Self {
        Locked {
            guard,
            inside: Held::inside(outer),
        }
    }

    /// The token for what may be taken while this is held.
    pub(super) fn held(&mut self) -> &mut Held<L> {
        self.inside.held()
    }

    /// The data and the token at once.
    pub(super) fn parts(&mut self) -> (&mut T, &mut Held<L>) {
        (&mut *self.guard, self.inside.held())
    }

    /// Waits on `cv` (releasing the lock meanwhile, as `Condvar::wait`).
    pub(super) fn wait(self, cv: &Condvar) -> Self {
        Locked {
            guard: cv.wait(self.guard).unwrap_or_else(|e| e.into_inner()),
            inside: self.inside,
        }
    }
}

impl<T, L> Deref for Locked<'_, T, L> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.guard
    }
}

impl<T, L> DerefMut for Locked<'_, T, L> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.guard
    }
}
