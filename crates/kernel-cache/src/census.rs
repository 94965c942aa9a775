//! Scoped counts of reused and compiled kernels: [`with_census`] and [`Census`].

use std::cell::RefCell;

/// What the resolves inside a [`with_census`] scope did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Census {
    /// Kernels the cache's lookups answered (twins sharing a compiled representative
    /// are not counted here), added once per resolve call.
    pub kernels_reused: u64,
    /// Kernels compiled (representatives only: one per distinct key).
    pub kernels_compiled: u64,
    /// Programs compiled (one per group, or one per chunk on the concurrent path).
    pub programs_compiled: u64,
    /// Resolve calls.
    pub resolves: u64,
    /// Kernels answered by loading a program from a persistent kernel store
    /// (representatives only), not compiled.
    pub kernels_loaded: u64,
    /// Programs loaded from a persistent kernel store (one per blob).
    pub programs_loaded: u64,
}

thread_local! {
    static STACK: RefCell<Vec<Census>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` and returns what the resolves it made *on this thread* added up to. Scopes
/// nest: a resolve counts in every enclosing scope. A panic in `f` ends the scope and
/// continues.
///
/// ```
/// use kernel_cache::with_census;
/// let ((), census) = with_census(|| ());
/// assert_eq!(census.resolves, 0);
/// ```
pub fn with_census<R>(f: impl FnOnce() -> R) -> (R, Census) {
    struct Pop;
    impl Drop for Pop {
        fn drop(&mut self) {
            STACK.with(|s| s.borrow_mut().pop());
        }
    }
    STACK.with(|s| s.borrow_mut().push(Census::default()));
    let pop = Pop;
    let result = f();
    let census = STACK.with(|s| s.borrow().last().copied().unwrap_or_default());
    drop(pop);
    (result, census)
}

/// Adds `delta` to every enclosing census of this thread.
pub(crate) fn note(delta: Census) {
    STACK.with(|s| {
        for c in s.borrow_mut().iter_mut() {
            c.kernels_reused += delta.kernels_reused;
            c.kernels_compiled += delta.kernels_compiled;
            c.programs_compiled += delta.programs_compiled;
            c.resolves += delta.resolves;
            c.kernels_loaded += delta.kernels_loaded;
            c.programs_loaded += delta.programs_loaded;
        }
    });
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn nested_scopes_both_count() {
        let ((), outer) = with_census(|| {
            note(Census {
                kernels_reused: 2,
                ..Census::default()
            });
            let ((), inner) = with_census(|| {
                note(Census {
                    kernels_reused: 3,
                    resolves: 1,
                    ..Census::default()
                })
            });
            assert_eq!(inner.kernels_reused, 3);
        });
        assert_eq!(outer.kernels_reused, 5);
        assert_eq!(outer.resolves, 1);
    }

    #[test]
    fn outside_any_scope_notes_nothing() {
        note(Census {
            kernels_reused: 1,
            ..Census::default()
        });
        let ((), c) = with_census(|| ());
        assert_eq!(c, Census::default());
    }
}
