//! What cc-backend's integration tests share.

use std::sync::Arc;

use cc_backend::{Arg, CcProgram};

/// Calls `symbol` of `program`, a kernel of signature `Signature::out_a_b_n()`, on
/// `a = [1, 2, 3]`, `b = [10, 20, 30]`, `n = 3`, and returns `out`.
pub(crate) fn run_abn(program: &Arc<CcProgram>, symbol: &str) -> Vec<f32> {
    let a = [1.0f32, 2.0, 3.0];
    let b = [10.0f32, 20.0, 30.0];
    let mut out = [0.0f32; 3];
    program
        .kernel(symbol)
        .expect("the kernel is in the program")
        .call(&mut [
            Arg::F32Mut(&mut out),
            Arg::F32(&a),
            Arg::F32(&b),
            Arg::I32Scalar(3),
        ])
        .expect("the call matches the signature");
    out.to_vec()
}
