//! Absence waits at their deadline, timeouts, and the removal of what a
//! deadline ends.
//!
//! A pattern with `absence` does not select a complete sequence when it
//! completes: the sequence waits until its deadline (`start + within`), and
//! any later observation of the key for which `absence` holds (with the
//! wait's captures) cancels it (see `keystate::observe`, step 1). A wait
//! still there when its deadline expires is a candidate completing at the
//! deadline.

use crate::branch::Caps;
use crate::error::Rejection;
use crate::keystate::KeyState;
use crate::output::OutputKind;
use crate::selection::{order, select, Emitter, Group};

/// Expires deadline `deadline` for one (pattern, key):
/// 1. its absence waits with that deadline are candidates: selection runs;
/// 2. every remaining live branch with that deadline that is not complete is
///    a timeout, once per distinct assignment, in candidate order (complete
///    branches expire silently);
/// 3. every branch and wait with that deadline is removed.
pub(crate) fn expire(
    g: &Group<'_>,
    st: &mut KeyState,
    deadline: i64,
    em: &mut Emitter,
    timeouts: &mut Vec<Caps>,
) -> Result<(), Rejection> {
    let start = deadline - g.pattern.within;
    if st.waits.iter().any(|w| w.start == start) {
        let (mut due, waits): (Vec<Caps>, Vec<Caps>) =
            st.waits.take().into_iter().partition(|w| w.start == start);
        st.waits = waits.into();
        select(g, st, &mut due, deadline, em)?;
    }
    timeouts.clear();
    st.branches.retain(|b| {
        if b.caps.start != start {
            return true;
        }
        if !b.complete(g.shape) {
            timeouts.push(b.caps.clone());
        }
        false
    });
    order(timeouts, g.shape.len());
    for caps in timeouts.iter() {
        em.emit(OutputKind::Timeout, g, caps, deadline)?;
    }
    timeouts.clear();
    Ok(())
}
