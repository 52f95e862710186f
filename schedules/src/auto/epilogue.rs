//! The epilogue at the GEMM tile (the `.epi` sketches): the element-wise epilogue of a
//! tensorized contraction (a requantization) declared as an `IntrinKind::Map` over one output
//! row of GEMM rows × columns, and the output tensorized with it per row, as the `x86_conv`
//! template tensorizes its requantization. Lowering's `fuse_epilogues` then moves each row's
//! Map into the resetting GEMM calls that write its tiles (`GemmMap` calls: the tile is mapped
//! while in registers), so no pass over a whole i32 accumulator remains.
//!
//! The declaration is the epilogue's own body, its reads redirected: the accumulator read at
//! the tile's `[i, j]`, every other tensor (compensation, bias, per-channel parameters) read at
//! its own indices with the row axis `i`, the column axis `j` and every outer axis 0 (the
//! tensorize proof puts the outer axes in the call's origin). `fuse_epilogues` fuses where the
//! Map's accumulator rows are `ld` apart and each of its blocks (one per outer iteration) is
//! `rows · ld` after the last; its other operands must be per column (`[n]`) or per element.

use rustc_hash::FxHashMap as HashMap;

use ir::expr::ExprKind;
use ir::intrin::{IntrinKind, TensorIntrin, decl_tensor_intrin};
use ir::mutator::{Mutator, substitute_map, walk_expr};
use ir::te::{Tensor, compute_vec, placeholder_vec};
use ir::{DType, Expr, Var};

use super::tensorize::Contraction;

/// Why the epilogue of `c` cannot be computed at the tile, or `None` where it can be tried
/// (the declaration and the tensorize proof may still refuse a particular epilogue).
pub fn unsupported(c: &Contraction, flat: bool) -> Option<String> {
    let rank = c.axes.len();
    if c.epilogue.is_none() {
        return Some("the contraction is the output (no epilogue)".into());
    }
    if c.output.dtype() != DType::I32 {
        return Some("the accumulator is not i32 (GemmMap fuses int8 and int16 GEMMs)".into());
    }
    if flat {
        return Some(
            "flat rows: an output row's accumulators are a source row apart, not a block of the GEMM (fuse_epilogues \
             needs the Map's blocks one after the other)"
                .into(),
        );
    }
    if rank < 2 || c.cols != rank - 1 || c.rows != rank - 2 {
        return Some(
            "the GEMM's rows and columns are not the output's last two axes (a Map row is an [rows, columns] block)"
                .into(),
        );
    }
    None
}

/// Reads redirected into the declaration.
struct Redirect<'a> {
    acc: &'a Tensor,
    acc_decl: &'a Tensor,
    tile: [Expr; 2],
    /// The epilogue's axes and what each becomes in the declaration.
    map: HashMap<Var, Expr>,
    /// The declaration's input per tensor read, in first-read order.
    inputs: Vec<(Tensor, Tensor)>,
    error: Option<String>,
}

impl Mutator for Redirect<'_> {
    fn mutate_expr(&mut self, expr: &Expr) -> Expr {
        let expr = walk_expr(self, expr);
        let ExprKind::TensorRead(t, idx) = expr.kind() else { return expr };
        if t == self.acc {
            return self.acc_decl.at_vec(self.tile.to_vec());
        }
        let decl = match self.inputs.iter().find(|(from, _)| from == t) {
            Some((_, d)) => d.clone(),
            None => match placeholder_vec(t.shape().to_vec(), t.dtype(), t.name()) {
                Ok(d) => {
                    self.inputs.push((t.clone(), d.clone()));
                    d
                }
                Err(e) => {
                    self.error.get_or_insert(e.to_string());
                    return expr;
                }
            },
        };
        decl.at_vec(idx.iter().map(|e| substitute_map(e, &self.map)).collect())
    }
}

/// The Map of one output row of `output` (the epilogue rebuilt on the accumulator `acc`,
/// whose last two axes are the GEMM's rows and columns): `requantize`-like, named
/// `<output>.row_{m}x{n}`, inputs the accumulator `[m, n]` first (as `fuse_epilogues` wants
/// it), then the other tensors the epilogue reads in first-read order. Errors where the
/// declaration refuses the body (an index with no axis of its own in some dimension).
pub fn row_map(output: &Tensor, acc: &Tensor) -> Result<TensorIntrin, String> {
    let axes = output.axes();
    let rank = axes.len();
    let body = output.body().ok_or("the epilogue has no body")?;
    if rank < 2 {
        return Err("the epilogue has fewer than two axes".into());
    }
    let (m, n) = (axes[rank - 2].extent(), axes[rank - 1].extent());
    let acc_decl = placeholder_vec(vec![m, n], acc.dtype(), "acc").map_err(|e| e.to_string())?;
    let (mut inputs, mut error) = (Vec::new(), None);
    let out = compute_vec(
        vec![m, n],
        |ij| {
            let mut map: HashMap<Var, Expr> = HashMap::default();
            for (d, ax) in axes.iter().enumerate() {
                let to = match d {
                    d if d == rank - 2 => ij[0].clone(),
                    d if d == rank - 1 => ij[1].clone(),
                    _ => Expr::index(0),
                };
                map.insert(ax.var().clone(), to);
            }
            let tile = [ij[0].clone(), ij[1].clone()];
            let mut r = Redirect { acc, acc_decl: &acc_decl, tile, map: map.clone(), inputs: Vec::new(), error: None };
            let redirected = r.mutate_expr(body);
            inputs = r.inputs;
            error = r.error;
            // Any other use of the epilogue's axes (none in a requantization) likewise.
            substitute_map(&redirected, &map)
        },
        &format!("{}.row", output.name()),
    )
    .map_err(|e| e.to_string())?;
    if let Some(e) = error {
        return Err(e);
    }
    let mut decl_inputs = vec![&acc_decl];
    decl_inputs.extend(inputs.iter().map(|(_, d)| d));
    decl_tensor_intrin(&format!("{}.row_{m}x{n}", output.name()), IntrinKind::Map { m, n }, &out, &decl_inputs)
        .map_err(|e| e.to_string())
}
