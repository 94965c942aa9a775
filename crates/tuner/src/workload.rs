//! What the caller supplies: the code to tune, its space, its renderer and how to run it.

use std::collections::BTreeMap;

use kernel_cache::{Backend, BatchKernel, Resolved};
use schedule_cache::{LoopCode, NodeId, Placement, ScheduleLanguage};

use crate::space::Space;

/// One candidate rendered to kernels: what the tuner resolves, and the workload's own
/// plan for running them.
#[derive(Clone, Debug)]
pub struct Rendered<S, P> {
    /// The candidate's kernels, in the order they run. Their symbols must be unique in
    /// the batch: the tuner passes the first free index to [`Workload::render`].
    pub kernels: Vec<BatchKernel<S>>,
    /// The workload's plan for binding the compiled kernels to its data.
    pub plan: P,
    /// Everything that changes a measurement beyond the kernels' keys: which buffer each
    /// parameter is bound to, sizes, input data. It enters the memo key with the
    /// kernel keys (in order), so two candidates whose kernels have equal keys and equal
    /// tags share one measurement. A part left out is a wrong memo answer.
    pub memo_tag: String,
}

/// A kernel to tune, with its schedule space, its renderer and its runner. The tuner is
/// generic over the schedule language `L` (schedule-cache's) and the backend `B`
/// (kernel-cache's); the workload is where the two meet.
///
/// Contract: [`Workload::build`] returns the same code every time up to fresh symbols
/// and node ids (a fresh lowering); [`Workload::ops_at`] names only that copy's symbols;
/// [`Workload::check`] runs the candidate once and compares its output with a reference,
/// so a wrong candidate is never timed and never a winner.
pub trait Workload<L: ScheduleLanguage, B: Backend> {
    /// The unscheduled loop code.
    type Code: LoopCode;
    /// How a candidate's kernels are bound to data (made by `render`, used by `bind`).
    type Plan;
    /// A candidate's compiled kernels bound to their data, ready to run.
    type Bound;

    /// The workload's name (progress lines, errors, the memo key).
    fn name(&self) -> &str;

    /// The schedule space searched.
    fn space(&self) -> &Space;

    /// The unscheduled code, built afresh.
    fn build(&self) -> Self::Code;

    /// The placement of the code's nodes that enters its identity (none by default).
    fn placements(&self, _code: &Self::Code) -> BTreeMap<NodeId, Placement> {
        BTreeMap::new()
    }

    /// The schedule of `point` on `code`, or `None` where the point is not legal.
    fn ops_at(&self, code: &Self::Code, point: &[usize]) -> Option<Vec<L::Op>>;

    /// Applies `ops` to `code` and renders the result, its kernels named from index
    /// `first_kernel` of the batch on. `Err(why)` when the ops do not apply or the result
    /// cannot be rendered: the candidate is skipped and reported.
    fn render(
        &self,
        code: &Self::Code,
        ops: &[L::Op],
        first_kernel: usize,
    ) -> Result<Rendered<B::Source, Self::Plan>, String>;

    /// Binds the resolved kernels (in the rendered order) to the workload's data.
    fn bind(
        &self,
        plan: &Self::Plan,
        kernels: &[Resolved<B::Program>],
    ) -> Result<Self::Bound, String>;

    /// Runs the candidate once (what is timed).
    fn run(&self, bound: &mut Self::Bound) -> Result<(), String>;

    /// Runs the candidate once and checks its output: `Err(why)` when it is wrong.
    fn check(&self, bound: &mut Self::Bound) -> Result<(), String>;

    /// A point as progress lines and reports name it (its choice indices by default).
    fn describe(&self, point: &[usize]) -> String {
        format!("{point:?}")
    }
}
