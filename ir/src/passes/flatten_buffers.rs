//! Flattening of multi-dimensional buffer accesses to one element index.

use crate::expr::{BinOp, Expr, ExprKind};
use crate::mutator::{Mutator, walk_expr, walk_stmt};
use crate::passes::lanewise;
use crate::stmt::{Buffer, Func, Operand, Stmt, StmtKind};

/// Rewrites every `Load` and `Store` with one index per dimension into a single row-major
/// element index `Σ idx_d * stride_d` (`Buffer::strides`); a zero-dimensional buffer is
/// indexed by 0. The origins of `Call` operands are flattened the same way (their strides are
/// flat already).
///
/// Vector indices (of `n` lanes, with scalar indices in other dimensions broadcast) flatten
/// lane-wise, and integer ramp algebra keeps `A[i, ramp(j, 1, n)]` as `A[ramp(i*48 + j, 1, n)]`
/// so contiguous accesses stay recognisable. Strides of 1 and constant terms of 0 are omitted
/// and constants folded; nothing else is simplified.
///
/// Does not check bounds (`guard_accesses` does) or change buffers: their shapes stay as
/// declared. Accesses to one-dimensional buffers are returned unchanged.
pub fn flatten_buffers(func: &Func) -> Func {
    let body = Flatten.mutate_stmt(&func.body);
    Func { name: func.name.clone(), params: func.params.clone(), body }
}

struct Flatten;

/// `Σ indices[d] * strides[d]` for a buffer that is not one-dimensional.
fn flat_index(buffer: &Buffer, indices: &[Expr]) -> Expr {
    assert_eq!(
        indices.len(),
        buffer.shape().len(),
        "flatten_buffers: {} has {} dimensions but is accessed with {} indices",
        buffer.name(),
        buffer.shape().len(),
        indices.len()
    );
    let mut fold = lanewise::fold;
    let mut flat: Option<Expr> = None;
    for (index, stride) in indices.iter().zip(buffer.strides()) {
        let term = lanewise::binary(BinOp::Mul, index, &Expr::index(stride), &mut fold);
        flat = Some(match flat {
            None => term,
            Some(acc) => lanewise::binary(BinOp::Add, &acc, &term, &mut fold),
        });
    }
    flat.unwrap_or_else(|| Expr::index(0))
}

impl Mutator for Flatten {
    fn mutate_expr(&mut self, expr: &Expr) -> Expr {
        let walked = walk_expr(self, expr);
        match walked.kind() {
            ExprKind::Load(buffer, indices) if indices.len() != 1 => {
                Expr::load(buffer, vec![flat_index(buffer, indices)])
            }
            _ => walked,
        }
    }

    fn mutate_stmt(&mut self, stmt: &Stmt) -> Stmt {
        let walked = walk_stmt(self, stmt);
        match walked.kind() {
            StmtKind::Store { buffer, indices, value } if indices.len() != 1 => {
                Stmt::store(buffer, vec![flat_index(buffer, indices)], value.clone())
            }
            StmtKind::Call { intrin, operands, reset, fallback, range }
                if operands.iter().any(|op| op.origin.len() != 1) =>
            {
                let flat = |op: &Operand| {
                    let origin =
                        if op.origin.len() == 1 { op.origin.clone() } else { vec![flat_index(&op.buffer, &op.origin)] };
                    Operand { buffer: op.buffer.clone(), origin, strides: op.strides.clone() }
                };
                let operands = operands.iter().map(flat).collect();
                Stmt::call_in_range(intrin.clone(), operands, *reset, fallback.clone(), range.clone())
            }
            _ => walked,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::expr::Var;
    use crate::stmt::ForKind;

    #[test]
    fn scalar_accesses_become_row_major_sums() {
        let a = Buffer::new("A", DType::F32, vec![4, 6, 8]);
        let c = Buffer::new("C", DType::F32, vec![4, 8]);
        let s = Buffer::new("S", DType::F32, vec![]);
        let (i, j, k) = (Var::index("i"), Var::index("j"), Var::index("k"));
        let load = Expr::load(&a, vec![i.to_expr(), j.to_expr(), k.to_expr()]);
        let corner = Expr::load(&a, vec![Expr::index(1), Expr::index(2), Expr::index(3)]);
        let body = Stmt::seq(vec![
            Stmt::store(&c, vec![i.to_expr(), k.to_expr()], load + corner),
            Stmt::store(&s, vec![], Expr::load(&c, vec![i.to_expr(), Expr::index(0)])),
        ]);
        let loops = Stmt::for_loop(
            i.clone(),
            4,
            ForKind::Serial,
            Stmt::for_loop(j.clone(), 6, ForKind::Serial, Stmt::for_loop(k.clone(), 8, ForKind::Serial, body)),
        );
        let f = Func { name: "f".into(), params: vec![a, c, s], body: loops };
        assert_eq!(
            format!("{}", flatten_buffers(&f)),
            "func f(A: f32[4, 6, 8], C: f32[4, 8], S: f32[]) {
  for i in 0..4 {
    for j in 0..6 {
      for k in 0..8 {
        C[i*8 + k] = A[i*48 + j*8 + k] + A[67]
        S[0] = C[i*8]
      }
    }
  }
}
"
        );
    }

    #[test]
    fn vector_indices_stay_ramps() {
        let a = Buffer::new("A", DType::I32, vec![16, 32]);
        let b = Buffer::new("B", DType::I32, vec![32, 16]);
        let i = Var::index("i");
        let ramp = Expr::ramp(Expr::index(8), Expr::index(1), 8);
        let row = Expr::load(&a, vec![i.to_expr(), ramp.clone()]);
        let column = Expr::load(&b, vec![ramp, i.to_expr()]);
        let body = Stmt::store(
            &a,
            vec![Expr::broadcast(i.to_expr(), 8), Expr::ramp(Expr::index(0), Expr::index(2), 8)],
            row + column,
        );
        let f =
            Func { name: "f".into(), params: vec![a, b], body: Stmt::for_loop(i.clone(), 16, ForKind::Serial, body) };
        assert_eq!(
            format!("{}", flatten_buffers(&f)),
            "func f(A: i32[16, 32], B: i32[32, 16]) {
  for i in 0..16 {
    A[ramp(i*32, 2, 8)] = A[ramp(i*32 + 8, 1, 8)] + B[ramp(128 + i, 16, 8)]
  }
}
"
        );
    }

    #[test]
    fn one_dimensional_accesses_are_untouched() {
        let a = Buffer::new("A", DType::U8, vec![10]);
        let i = Var::index("i");
        let body = Stmt::store(&a, vec![i.to_expr()], Expr::load(&a, vec![Expr::index(9) - i.to_expr()]));
        let f = Func { name: "f".into(), params: vec![a], body: Stmt::for_loop(i, 10, ForKind::Serial, body) };
        assert!(flatten_buffers(&f).body.same_node(&f.body));
    }
}
