//! Loop-IR passes, one per file, each a function from `Func` to `Func` (Halide-style lowering).

pub mod flatten_buffers;
pub mod guard_accesses;
mod lanewise;
pub mod remove_no_ops;
pub mod simplify;
#[cfg(test)]
mod testing;
pub mod unroll_loops;
pub mod vectorize_loops;
pub mod verify;

pub use flatten_buffers::flatten_buffers;
pub use guard_accesses::guard_accesses;
pub use remove_no_ops::remove_no_ops;
pub use simplify::simplify;
pub use unroll_loops::unroll_loops;
pub use vectorize_loops::vectorize_loops;
pub use verify::{VerifyError, VerifyLevel, verify};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::expr::{Expr, Var};
    use crate::passes::testing::assert_same_results;
    use crate::stmt::{Buffer, ForKind, Func, Stmt};

    /// `C = A x B` on i32 (6x5 by 5x8), rows split by 4 with a tail guard, columns split by 4
    /// and vectorized, the reduction unrolled: roughly what lowering produces.
    fn matmul() -> Func {
        let a = Buffer::new("A", DType::I32, vec![6, 5]);
        let b = Buffer::new("B", DType::I32, vec![5, 8]);
        let c = Buffer::new("C", DType::I32, vec![6, 8]);
        let (io, ii, i) = (Var::index("i.outer"), Var::index("i.inner"), Var::index("i"));
        let (jo, ji, j, k) = (Var::index("j.outer"), Var::index("j.inner"), Var::index("j"), Var::index("k"));
        let (ie, je, ke) = (i.to_expr(), j.to_expr(), k.to_expr());
        let acc = Expr::load(&c, vec![ie.clone(), je.clone()])
            + Expr::load(&a, vec![ie.clone(), ke.clone()]) * Expr::load(&b, vec![ke.clone(), je.clone()]);
        let update = Stmt::for_loop(k, 5, ForKind::Unrolled, Stmt::store(&c, vec![ie.clone(), je.clone()], acc));
        let init = Stmt::store(&c, vec![ie.clone(), je.clone()], Expr::int(DType::I32, 0));
        let columns = Stmt::for_loop(
            jo.clone(),
            2,
            ForKind::Serial,
            Stmt::for_loop(
                ji.clone(),
                4,
                ForKind::Vectorized,
                Stmt::let_stmt(j, jo.to_expr() * 4 + ji.to_expr(), Stmt::seq(vec![init, update])),
            ),
        );
        let rows = Stmt::let_stmt(i, io.to_expr() * 4 + ii.to_expr(), Stmt::if_then(ie.lt(6), columns));
        let body = Stmt::for_loop(io, 2, ForKind::Parallel, Stmt::for_loop(ii, 4, ForKind::Serial, rows));
        Func { name: "matmul".into(), params: vec![a, b, c], body }
    }

    #[test]
    fn the_pass_pipeline_preserves_results_and_proves_every_access() {
        let f = matmul();
        assert_eq!(verify(&f, VerifyLevel::Lowered), Ok(()));
        let mut stages = vec![f.clone()];
        // The order of `lower::lower`.
        let pipeline: [fn(&Func) -> Func; 7] =
            [simplify, flatten_buffers, simplify, vectorize_loops, unroll_loops, simplify, remove_no_ops];
        for pass in pipeline {
            let next = pass(stages.last().unwrap());
            assert_eq!(verify(&next, VerifyLevel::Lowered), Ok(()), "{next}");
            assert_same_results(&f, &next);
            stages.push(next);
        }
        let last = stages.last().unwrap();
        let guarded = guard_accesses(last);
        assert!(guarded.body.same_node(&last.body), "every access is provable:\n{guarded}");
        assert_eq!(verify(&guarded, VerifyLevel::Final), Ok(()));
        assert_eq!(
            format!("{guarded}"),
            "func matmul(A: i32[6, 5], B: i32[5, 8], C: i32[6, 8]) {
  parallel i.outer in 0..2 {
    for i.inner in 0..4 {
      let i = i.outer*4 + i.inner
      if i < 6 {
        for j.outer in 0..2 {
          C[ramp(i*8 + j.outer*4, 1, 4)] = broadcast(0i32, 4)
          C[ramp(i*8 + j.outer*4, 1, 4)] = C[ramp(i*8 + j.outer*4, 1, 4)] + broadcast(A[i*5], 4)*B[ramp(j.outer*4, 1, 4)]
          C[ramp(i*8 + j.outer*4, 1, 4)] = C[ramp(i*8 + j.outer*4, 1, 4)] + broadcast(A[i*5 + 1], 4)*B[ramp(j.outer*4 + 8, 1, 4)]
          C[ramp(i*8 + j.outer*4, 1, 4)] = C[ramp(i*8 + j.outer*4, 1, 4)] + broadcast(A[i*5 + 2], 4)*B[ramp(j.outer*4 + 16, 1, 4)]
          C[ramp(i*8 + j.outer*4, 1, 4)] = C[ramp(i*8 + j.outer*4, 1, 4)] + broadcast(A[i*5 + 3], 4)*B[ramp(j.outer*4 + 24, 1, 4)]
          C[ramp(i*8 + j.outer*4, 1, 4)] = C[ramp(i*8 + j.outer*4, 1, 4)] + broadcast(A[i*5 + 4], 4)*B[ramp(j.outer*4 + 32, 1, 4)]
        }
      }
    }
  }
}
"
        );
    }
}
