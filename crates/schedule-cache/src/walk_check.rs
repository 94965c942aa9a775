//! [`WalkCheck`]: a test of an adopter's [`LoopCode`] walk (its docs say how).

use std::collections::BTreeMap;
use std::fmt;

use crate::identity::{Identity, LoopCode, SymId, canonicalize};

/// One mutation: what it changes, and how.
type Apply<C> = Box<dyn Fn(&mut C)>;
/// The static indices of a build.
type Statics<C> = Box<dyn Fn(&C) -> Vec<SymId>>;
/// The adopter's renderer.
type Render<C> = Box<dyn Fn(&C) -> String>;

/// Checking an adopter's [`LoopCode`] walk: a test helper that finds what the walk leaves out.
///
/// The library cannot see an adopter's IR, only what its walk reports. A piece of the code the
/// walk forgets (an extent, a scalar, an operator, which tensor is read) is not in the digest,
/// so two codes that differ only there share one digest, and a schedule tuned for one is
/// replayed on the other. [`WalkCheck`] finds such omissions in a test: it builds the code
/// twice (fresh ids, as two processes do), walks each build twice, then applies each mutation
/// the adopter lists (one per piece of its IR) to a copy and reports every mutation that leaves
/// the digest unchanged.
///
/// Guarantees of [`WalkCheck::run`]:
/// - a walk that gives two digests for one code ([`WalkProblem::Nondeterministic`]), or for two
///   builds of one code ([`WalkProblem::DependsOnIds`]: process-specific ids or labels reach
///   the rendering), or that is incomplete on the unmutated code ([`WalkProblem::Incomplete`]),
///   is reported;
/// - every listed mutation whose code keeps the original digest is reported
///   ([`WalkProblem::Omission`]); a mutation that makes the identity incomplete is not (an
///   incomplete identity is never keyed: refusing is safe);
/// - with a renderer ([`WalkCheck::render`]), a mutation that does not change the rendered text
///   is reported ([`WalkProblem::IneffectiveMutation`]): it proves nothing, so the check never
///   passes on a list of mutations that change nothing.
///
/// It checks only the mutations it is given: list one for every field of every construct of
/// your IR (the check is as complete as that list). A mutation must make code that computes
/// something else: a consistent renaming (two symbols or two buffers swapped everywhere,
/// declarations included) is the same code, which the digest rightly ignores, and is reported
/// as an omission. How runtime sizes and scalar parameters enter a walk is in
/// [`LoopCode`]'s docs.
///
/// ```
/// use schedule_cache::{LoopCode, NodeAttrs, NodeId, SymId, Visitor, WalkCheck};
/// use std::sync::atomic::{AtomicU64, Ordering};
///
/// /// `for i in 0..extent { y[i] = x[i] <op> k }`, with this process's ids.
/// #[derive(Clone)]
/// struct Scale { i: u64, x: u64, y: u64, extent: i64, op: &'static str, k: f64 }
/// impl LoopCode for Scale {
///     fn walk(&self, v: &mut dyn Visitor) {
///         v.open("loop");
///         v.int(self.extent);
///         v.loop_binder(SymId(self.i));
///         v.open(self.op);
///         v.node(NodeId(self.y), &NodeAttrs::new(&[64], "f32"));
///         v.node(NodeId(self.x), &NodeAttrs::new(&[64], "f32"));
///         v.symbol(SymId(self.i));
///         v.float(self.k);
///         v.close();
///         v.close();
///     }
/// }
/// fn build() -> Scale {
///     static NEXT: AtomicU64 = AtomicU64::new(1);
///     let mut fresh = || NEXT.fetch_add(1, Ordering::Relaxed);
///     Scale { i: fresh(), x: fresh(), y: fresh(), extent: 64, op: "mul", k: 3.0 }
/// }
/// let report = WalkCheck::new(build)
///     .mutation("loop extent", |c| c.extent = 65)
///     .mutation("scalar constant", |c| c.k = 4.0)
///     .mutation("operator", |c| c.op = "add")
///     .run();
/// assert!(report.is_ok(), "{report}");
/// assert_eq!(report.mutations_checked(), 3);
/// ```
///
/// Built from a function that builds the code
/// afresh, then given the mutations, run once.
pub struct WalkCheck<C> {
    build: Box<dyn Fn() -> C>,
    statics: Statics<C>,
    render: Option<Render<C>>,
    mutations: Vec<(String, Apply<C>)>,
}

/// What [`WalkCheck::run`] found wrong with a walk.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum WalkProblem {
    /// The unmutated code's identity is incomplete (nothing can be keyed); the reasons.
    Incomplete(Vec<String>),
    /// Walking one code twice gave two digests.
    Nondeterministic,
    /// Two builds of one code gave two digests: process-specific ids or labels reach the
    /// rendering. The first difference, as [`Identity::explain_difference`] says it.
    DependsOnIds(String),
    /// The mutation changed the code but not its digest: the walk leaves that piece out, and
    /// codes differing only there share a digest.
    Omission {
        /// The mutation, as named in [`WalkCheck::mutation`].
        mutation: String,
    },
    /// The mutation did not change the rendered text: it proves nothing.
    IneffectiveMutation {
        /// The mutation, as named in [`WalkCheck::mutation`].
        mutation: String,
    },
}

impl fmt::Display for WalkProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WalkProblem::Incomplete(reasons) => {
                write!(
                    f,
                    "the code's identity is incomplete: {}",
                    reasons.join("; ")
                )
            }
            WalkProblem::Nondeterministic => f.write_str("walking one code twice gave two digests"),
            WalkProblem::DependsOnIds(why) => {
                write!(f, "two builds of one code gave two digests ({why})")
            }
            WalkProblem::Omission { mutation } => write!(
                f,
                "mutation `{mutation}` does not change the digest: the walk leaves it out"
            ),
            WalkProblem::IneffectiveMutation { mutation } => write!(
                f,
                "mutation `{mutation}` does not change the rendered code: it checks nothing"
            ),
        }
    }
}

/// What [`WalkCheck::run`] found. `Display` lists the problems, one a line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WalkReport {
    digest: String,
    checked: usize,
    problems: Vec<WalkProblem>,
}

impl WalkReport {
    /// Whether no problem was found.
    pub fn is_ok(&self) -> bool {
        self.problems.is_empty()
    }

    /// The problems, in the order found (the build checks first, then the mutations in the
    /// order given).
    pub fn problems(&self) -> &[WalkProblem] {
        &self.problems
    }

    /// The names of the mutations the walk leaves out.
    pub fn omissions(&self) -> Vec<&str> {
        self.problems
            .iter()
            .filter_map(|p| match p {
                WalkProblem::Omission { mutation } => Some(mutation.as_str()),
                _ => None,
            })
            .collect()
    }

    /// How many mutations were applied.
    pub fn mutations_checked(&self) -> usize {
        self.checked
    }

    /// The unmutated code's digest.
    pub fn digest(&self) -> &str {
        &self.digest
    }
}

impl fmt::Display for WalkReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.problems.is_empty() {
            return write!(
                f,
                "the walk passed {} mutation{}",
                self.checked,
                if self.checked == 1 { "" } else { "s" }
            );
        }
        for (n, p) in self.problems.iter().enumerate() {
            if n > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{p}")?;
        }
        Ok(())
    }
}

impl<C: LoopCode + Clone + 'static> WalkCheck<C> {
    /// A check of the walk of the code `build` returns. `build` is called twice and must build
    /// the same code each time, with fresh ids as a new process would (for code with static
    /// indices, give them with [`statics`](WalkCheck::statics)).
    pub fn new(build: impl Fn() -> C + 'static) -> WalkCheck<C> {
        WalkCheck {
            build: Box::new(build),
            statics: Box::new(|_| Vec::new()),
            render: None,
            mutations: Vec::new(),
        }
    }

    /// The static indices of a build (symbols the code was lowered with and uses, such as
    /// runtime sizes), in order, as given to [`canonicalize`] or `Subject::with_statics`.
    pub fn statics(mut self, statics: impl Fn(&C) -> Vec<SymId> + 'static) -> WalkCheck<C> {
        self.statics = Box::new(statics);
        self
    }

    /// The adopter's renderer (the text it compiles): each mutation must change it, or it is
    /// reported as [`WalkProblem::IneffectiveMutation`].
    pub fn render(mut self, render: impl Fn(&C) -> String + 'static) -> WalkCheck<C> {
        self.render = Some(Box::new(render));
        self
    }

    /// One mutation of one piece of the code (an extent, a scalar, an operator, a tensor, a
    /// coefficient…), named for the report. It is applied to a copy of a build; it must make
    /// a code that computes something else.
    pub fn mutation(
        mut self,
        what: impl Into<String>,
        apply: impl Fn(&mut C) + 'static,
    ) -> WalkCheck<C> {
        self.mutations.push((what.into(), Box::new(apply)));
        self
    }

    fn identity(&self, code: &C) -> Identity {
        canonicalize(code, &(self.statics)(code), &BTreeMap::new(), false)
    }

    /// Runs the check (see [`WalkCheck`]); never panics unless `build`, a mutation or the renderer
    /// does.
    pub fn run(&self) -> WalkReport {
        let mut problems = Vec::new();
        let (a, b) = ((self.build)(), (self.build)());
        let ida = self.identity(&a);
        if !ida.is_complete() {
            problems.push(WalkProblem::Incomplete(ida.incomplete_because().to_vec()));
        }
        if self.identity(&a).digest() != ida.digest() {
            problems.push(WalkProblem::Nondeterministic);
        }
        if let Some(why) = ida.explain_difference(&self.identity(&b)) {
            problems.push(WalkProblem::DependsOnIds(why));
        }
        let rendered = self.render.as_ref().map(|r| r(&a));
        for (what, apply) in &self.mutations {
            let mut m = a.clone();
            apply(&mut m);
            if let (Some(render), Some(before)) = (&self.render, &rendered)
                && render(&m) == *before
            {
                problems.push(WalkProblem::IneffectiveMutation {
                    mutation: what.clone(),
                });
                continue;
            }
            let idm = self.identity(&m);
            if idm.is_complete() && idm.digest() == ida.digest() {
                problems.push(WalkProblem::Omission {
                    mutation: what.clone(),
                });
            }
        }
        WalkReport {
            digest: ida.digest().to_owned(),
            checked: self.mutations.len(),
            problems,
        }
    }
}
