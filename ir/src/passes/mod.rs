//! Loop-IR passes, one per file, each a function from `Func` to `Func` (Halide-style lowering).

pub mod check_gathers;
mod facts;
pub mod flatten_buffers;
pub mod fuse_epilogues;
pub mod guard_accesses;
mod lanewise;
pub mod partition_loops;
pub mod remove_no_ops;
pub mod simplify;
#[cfg(test)]
mod testing;
pub mod unroll_loops;
pub mod vectorize_loops;
pub mod verify;
pub mod zero_segment_range;

pub use check_gathers::{check_gathers, checked_buffers};
pub use flatten_buffers::flatten_buffers;
pub use fuse_epilogues::fuse_epilogues;
pub use guard_accesses::guard_accesses;
pub use partition_loops::partition_loops;
pub use remove_no_ops::remove_no_ops;
pub use simplify::simplify;
pub use unroll_loops::unroll_loops;
pub use vectorize_loops::vectorize_loops;
pub use verify::{VerifyError, VerifyLevel, verify};
pub use zero_segment_range::zero_segment_range;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::expr::{Expr, Var};
    use crate::passes::testing::{assert_same_results, run};
    use crate::stmt::{Buffer, ForKind, Func, Operand, Stmt, StmtKind};

    /// The passes of `lower::lower` up to `guard_accesses`, in its order (`fuse_epilogues`,
    /// which only some code generators get, left out).
    const PIPELINE: [fn(&Func) -> Func; 9] = [
        simplify,
        flatten_buffers,
        partition_loops,
        simplify,
        zero_segment_range,
        vectorize_loops,
        unroll_loops,
        simplify,
        remove_no_ops,
    ];

    /// `f` through `PIPELINE` and `guard_accesses`, asserting that every pass leaves valid IR
    /// with the same results and that `guard_accesses` then has nothing left to guard.
    fn run_pipeline(f: &Func) -> Func {
        let mut last = f.clone();
        for pass in PIPELINE {
            let next = pass(&last);
            assert_eq!(verify(&next, VerifyLevel::Lowered), Ok(()), "{next}");
            assert_same_results(f, &next);
            last = next;
        }
        let guarded = guard_accesses(&last);
        assert!(guarded.body.same_node(&last.body), "every access is provable:\n{guarded}");
        assert_eq!(verify(&guarded, VerifyLevel::Final), Ok(()));
        guarded
    }

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
        let guarded = run_pipeline(&f);
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

    /// A generic intrinsic copying 4 i32 elements, `copy4(In[origin], Out[v*4])` with the
    /// equivalent loop as fallback, inside a loop of 4 iterations of the given kind.
    fn copy_calls(kind: ForKind, origin: impl Fn(&Expr) -> Expr, params: Vec<Buffer>) -> Func {
        use crate::intrin::{IntrinKind, decl_tensor_intrin};
        use crate::te::{compute, placeholder};
        let x = placeholder([4], DType::I32, "x").unwrap();
        let copy = compute([4], |i| x.at([&i[0]]), "copy").unwrap();
        let intrin = decl_tensor_intrin("copy4", IntrinKind::Generic, &copy, &[&x]).unwrap();
        let (input, out) = (params[0].clone(), params[params.len() - 1].clone());
        let (v, e) = (Var::index("v"), Var::index("e"));
        let from = origin(&v.to_expr());
        let to = v.to_expr() * 4;
        let fallback = Stmt::for_loop(
            e.clone(),
            4,
            ForKind::Serial,
            Stmt::store(&out, vec![to.clone() + e.to_expr()], Expr::load(&input, vec![from.clone() + e.to_expr()])),
        );
        let operands = vec![
            Operand { buffer: input, origin: vec![from], strides: vec![1] },
            Operand { buffer: out, origin: vec![to], strides: vec![1] },
        ];
        let body = Stmt::for_loop(v, 4, kind, Stmt::call(intrin, operands, false, fallback));
        Func { name: "copies".into(), params, body }
    }

    fn calls(f: &Func) -> usize {
        let mut n = 0;
        crate::mutator::for_each_stmt(&f.body, &mut |s| n += matches!(s.kind(), StmtKind::Call { .. }) as usize);
        n
    }

    #[test]
    fn calls_pass_through_the_pipeline_serial_and_copied_by_unrolling() {
        let params = || vec![Buffer::new("In", DType::I32, vec![16]), Buffer::new("Out", DType::I32, vec![16])];
        let reversed = |v: &Expr| Expr::index(12) - v.clone() * 4;
        for kind in [ForKind::Vectorized, ForKind::Unrolled] {
            let f = copy_calls(kind, reversed, params());
            let guarded = run_pipeline(&f);
            let expected = match kind {
                ForKind::Vectorized => {
                    "func copies(In: i32[16], Out: i32[16]) {\n  for v in 0..4 {\n    call copy4(In[12 - v*4] strides [1], Out[v*4] strides [1])\n  }\n}\n"
                }
                _ => {
                    "func copies(In: i32[16], Out: i32[16]) {\n  call copy4(In[12] strides [1], Out[0] strides [1])\n  call copy4(In[8] strides [1], Out[4] strides [1])\n  call copy4(In[4] strides [1], Out[8] strides [1])\n  call copy4(In[0] strides [1], Out[12] strides [1])\n}\n"
                }
            };
            assert_eq!(guarded.to_string(), expected);
            assert_eq!(calls(&guarded), if kind == ForKind::Unrolled { 4 } else { 1 });
        }
    }

    #[test]
    fn unprovable_call_regions_run_the_fallback_instead() {
        let params = vec![
            Buffer::new("In", DType::I32, vec![16]),
            Buffer::new("Idx", DType::I64, vec![4]),
            Buffer::new("Out", DType::I32, vec![16]),
        ];
        let idx = params[1].clone();
        let f = copy_calls(ForKind::Serial, |v| Expr::load(&idx, vec![v.clone()]), params);
        let g = guard_accesses(&f);
        assert_eq!(
            g.to_string(),
            "func copies(In: i32[16], Idx: i64[4], Out: i32[16]) {
  for v in 0..4 {
    if Idx[v] >= 0 & Idx[v] + 3 < 16 {
      call copy4(In[Idx[v]] strides [1], Out[v*4] strides [1])
    } else {
      for e in 0..4 {
        Out[v*4 + e] = In[min(max(Idx[v] + e, 0), 15)]
      }
    }
  }
}
"
        );
        assert_eq!(verify(&g, VerifyLevel::Final), Ok(()));
        // The test inputs hold indices in [-50, 50]: the unguarded call reads out of bounds.
        assert!(matches!(run(&f), Err(crate::interp::InterpError::OutOfBounds { .. })));
        run(&g).expect("guarded calls stay in bounds");
    }

    #[test]
    fn malformed_calls_are_reported_by_the_verifier() {
        let params = vec![Buffer::new("In", DType::I32, vec![4, 4]), Buffer::new("Out", DType::I8, vec![16])];
        let f = copy_calls(ForKind::Serial, |v| v.clone() * 4, params);
        let StmtKind::For { body, .. } = f.body.kind() else { unreachable!() };
        let StmtKind::Call { intrin, operands, fallback, .. } = body.kind() else { unreachable!() };
        let mut wrong = operands.clone();
        wrong[0].strides = vec![4, 1];
        wrong.push(operands[0].clone());
        let bad = Func { body: Stmt::call(intrin.clone(), wrong, false, fallback.clone()), ..f.clone() };
        let errors: Vec<String> = verify(&bad, VerifyLevel::Final).unwrap_err().iter().map(|e| e.to_string()).collect();
        let headline = "in `call copy4(In[v*4] strides [4, 1], Out[v*4] strides [1], In[v*4] strides [1])`";
        for expected in [
            "call of copy4: the operand count must be 2 (inputs, then the output), found 3",
            "call of copy4: the stride count of operand In (for x[4]) must be 1, found 2",
            "call of copy4: the element type of operand Out (for copy) must be i32, found i8",
            "variable v is not bound by an enclosing For or Let",
        ] {
            assert!(errors.iter().any(|e| e.contains(expected) && e.contains(headline)), "{expected}: {errors:#?}");
        }
        // Only a reduction has an identity to reset its output to.
        let reset = Stmt::call(intrin.clone(), operands.clone(), true, fallback.clone());
        let bad = Func { body: Stmt::for_loop(Var::index("v"), 4, ForKind::Serial, reset), ..f.clone() };
        let errors: Vec<String> = verify(&bad, VerifyLevel::Final).unwrap_err().iter().map(|e| e.to_string()).collect();
        assert!(
            errors
                .iter()
                .any(|e| e
                    .contains("call of copy4: a reset must be a declaration that reduces, with a constant identity")),
            "{errors:#?}"
        );
    }
}
