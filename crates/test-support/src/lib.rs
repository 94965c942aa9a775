//! Support shared by kcache's tests and benches, in one place instead of a copy per crate.
//!
//! **Dev-only.** This crate is never a normal or build dependency of a workspace crate (only a
//! dev-dependency; `cargo xtask tidy` checks it) and is never published. Its helpers panic on
//! failure, as test code does, with a message that says what went wrong.
//!
//! - [`redis::RedisServer`]: a real, private `redis-server` on a free loopback port (and a Unix
//!   socket) per test, killed and reaped on drop; a test that needs one fails without the
//!   binary, saying how to install it, never skips.
//! - `lines::Lines` (feature `lines`): a kernel-cache backend whose program is its kernels'
//!   texts, counting its compiles, optionally bound to a host part.
//! - [`Rng`]: xorshift64*, deterministic, for generated inputs.
//! - [`child`]: re-running the current test binary as a child process (one test, an
//!   environment variable set), and limiting a child's address space.
//! - [`lock::LockHolder`]: another process holding a lock file (`flock(1)`), stoppable.
//! - [`no_hang`]: a call on a thread, failing the test if it hangs.
//! - [`cc`]: a real compiler command that edits (or refuses) C units on purpose.
//! - [`bench`](mod@bench): command-line flags and the median-with-spread summary of the measured benches.
//! - [`alloc`]: the counting global allocator of the scale benches.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod alloc;
pub mod bench;
pub mod cc;
pub mod child;
pub mod kernels;
#[cfg(feature = "lines")]
pub mod lines;
pub mod lock;
pub mod redis;

/// How long [`no_hang`] waits: far above any honest operation on a loaded machine; only a
/// hang reaches it.
pub const HANG: std::time::Duration = std::time::Duration::from_secs(60);

/// Runs `f` on a thread; panics if it has not answered within [`HANG`] (the thread is then
/// left blocked: the test has failed anyway).
pub fn no_hang<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(HANG)
        .unwrap_or_else(|_| panic!("{what}: no answer within {HANG:?}: the operation hangs"))
}

/// xorshift64*: a deterministic generator (no dependency) for generated test inputs.
#[derive(Clone, Debug)]
pub struct Rng(pub u64);

impl Rng {
    /// A generator seeded with `seed`. The seed is mixed first (splitmix64's finalizer),
    /// so every two seeds start distinct, unrelated streams: made odd as it was
    /// (xorshift's state must not be 0), seeds 2k and 2k + 1 gave one stream, and
    /// nearby seeds correlated first numbers.
    pub fn new(seed: u64) -> Rng {
        let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        // The finalizer is a bijection: only one seed maps to 0.
        Rng(if z == 0 { 0x9e37_79b9_7f4a_7c15 } else { z })
    }

    /// A generator seeded from `$KCACHE_TEST_SEED` if set, else from the clock and the pid;
    /// the seed is printed (`seed: KCACHE_TEST_SEED=…`), so a failure can be rerun with it.
    pub fn from_env_or_clock() -> Rng {
        let seed = std::env::var("KCACHE_TEST_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                let t = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos() as u64)
                    .unwrap_or(1);
                t ^ u64::from(std::process::id()) << 32
            });
        eprintln!("seed: KCACHE_TEST_SEED={seed}");
        Rng::new(seed)
    }

    /// The next 64 bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// `n` lowercase hex digits.
    pub fn hex(&mut self, n: usize) -> String {
        let mut s = String::with_capacity(n + 16);
        while s.len() < n {
            s.push_str(&format!("{:016x}", self.next_u64()));
        }
        s.truncate(n);
        s
    }

    /// A number in `0..n` (0 when `n` is not positive), of `n`'s integer type.
    pub fn below<T: Below>(&mut self, n: T) -> T {
        T::below(self, n)
    }

    /// A number in `lo..=hi` (`lo` when `hi < lo`).
    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + self.below(hi.saturating_sub(lo).saturating_add(1))
    }

    /// One of `xs` (which must not be empty).
    pub fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }

    /// True one time in `one_in`.
    pub fn chance(&mut self, one_in: usize) -> bool {
        self.below(one_in) == 0
    }
}

/// The integer types [`Rng::below`] draws.
pub trait Below: Copy {
    /// A number in `0..n` (0 when `n` is not positive).
    fn below(rng: &mut Rng, n: Self) -> Self;
}

macro_rules! below {
    ($($t:ty),*) => {$(
        impl Below for $t {
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_possible_wrap)]
            fn below(rng: &mut Rng, n: $t) -> $t {
                if n <= 0 {
                    0
                } else {
                    (rng.next_u64() % n as u64) as $t
                }
            }
        }
    )*};
}

below!(u32, u64, usize, i32, i64);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generator_is_deterministic_and_spreads() {
        let (mut a, mut b) = (Rng(7), Rng(7));
        let xs: Vec<u64> = (0..100).map(|_| a.next_u64()).collect();
        assert_eq!(xs, (0..100).map(|_| b.next_u64()).collect::<Vec<_>>());
        let distinct: std::collections::BTreeSet<_> = xs.iter().collect();
        assert_eq!(distinct.len(), 100);
        let h = Rng(1).hex(37);
        assert_eq!(h.len(), 37);
        assert!(
            h.bytes()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        );
        assert!((0..1000).all(|_| a.below(10usize) < 10));
        assert!((0..1000).all(|_| (0..10).contains(&a.below(10i64))));
        assert_eq!((a.below(0u64), a.below(-3i32)), (0, 0));
        assert!((0..1000).all(|_| (-2..=5).contains(&a.range(-2, 5))));
        assert_eq!(a.range(4, 4), 4);
    }

    #[test]
    fn neighbouring_seeds_start_different_streams() {
        // Seeds 2k and 2k + 1 once gave one stream (the seed was only made odd).
        let first = |seed: u64| {
            let mut r = Rng::new(seed);
            (0..4).map(|_| r.next_u64()).collect::<Vec<_>>()
        };
        let streams: std::collections::BTreeSet<_> = (0..64).map(first).collect();
        assert_eq!(streams.len(), 64);
        let firsts: std::collections::BTreeSet<_> = (7000..7100).map(|s| first(s)[0]).collect();
        assert_eq!(firsts.len(), 100);
        // Nonzero state for every seed, 0 included.
        assert_ne!(Rng::new(0).0, 0);
    }
}
