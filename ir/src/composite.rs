//! Composite intrinsics: a GEMM whose result goes straight through an element-wise `Map`
//! (`IntrinKind::GemmMap`), and the `Map` declaration resized to the GEMM's tile that it needs.
//! `passes::fuse_epilogues` builds them from calls already in the IR; a kernel can then map the
//! accumulators while they are in registers instead of storing and reloading them.

use rustc_hash::FxHashMap as HashMap;

use crate::dtype::DType;
use crate::error::TeError;
use crate::expr::{Expr, ExprKind, Var};
use crate::intrin::{IntrinKind, TensorIntrin, TensorIntrinData, decl_tensor_intrin, reset_value};
use crate::mutator::{Mutator, walk_expr};
use crate::stmt::{ForKind, Operand, Stmt};
use crate::te::{Tensor, TensorId, compute_vec, placeholder_vec, placeholder_vec_in_range};

/// The `IntrinKind::GemmMap` of `gemm` (an `Int8Gemm` or `Int16Gemm` declaration) then `map`
/// (a `Map` declaration of the GEMM's `m` rows and its first `n` columns, `n` at most the
/// GEMM's, whose input 0 is `i32[m, n]`), named `<gemm>_<map>`.
///
/// Errors (`TeError::BadIntrinsic`) if the kinds or the sizes do not chain.
pub fn gemm_map(gemm: &TensorIntrin, map: &TensorIntrin) -> Result<TensorIntrin, TeError> {
    let name = format!("{}_{}", gemm.name, map.name);
    let bad = |what: &str, expected: String, found: String| TeError::BadIntrinsic {
        intrin: name.clone(),
        what: what.to_string(),
        expected,
        found,
    };
    let (gm, gn) = match gemm.kind {
        IntrinKind::Int8Gemm { m, n, .. } | IntrinKind::Int16Gemm { m, n, .. } => (m, n),
        other => return Err(bad("first part", "an Int8Gemm or Int16Gemm".into(), format!("{other:?}"))),
    };
    // A GEMM declaration sums into i32 from 0: the temporary starts there.
    let zero = reset_value(gemm).is_some_and(|v| matches!(v.kind(), ExprKind::Int(0)));
    if !zero {
        return Err(bad("first part", "a sum with identity 0".into(), gemm.name.clone()));
    }
    let IntrinKind::Map { m, n } = map.kind else {
        return Err(bad("second part", "a Map".into(), format!("{:?}", map.kind)));
    };
    let first = map.inputs.first();
    let chains =
        m == gm && (1..=gn).contains(&n) && first.is_some_and(|t| t.dtype() == DType::I32 && t.shape() == [m, n]);
    if !chains {
        let found = first.map_or("no input".into(), |t| format!("{}{:?} over [{m}, {n}]", t.dtype(), t.shape()));
        return Err(bad("Map input 0", format!("i32[{gm}, 1..={gn}], the GEMM's output's first columns"), found));
    }
    let mut inputs = gemm.inputs.clone();
    inputs.extend(map.inputs[1..].iter().cloned());
    Ok(TensorIntrin::from_data(TensorIntrinData {
        name,
        kind: IntrinKind::GemmMap { m, n },
        inputs,
        output: map.output.clone(),
        parts: Some((gemm.clone(), map.clone())),
    }))
}

/// The `Map` declaration `map` over an `[m, n]` block instead of its own: the same body, each
/// `[M, N]` input now `[m, n]`, each `[N]` input `[n]` and each `[M]` one `[m]` (same names, dtypes and value
/// ranges), named `<map>_tile_{m}x{n}`; `map` itself when the sizes are its own. Nodes the
/// body shares stay shared (a kernel evaluates a shared node once).
///
/// Errors (`TeError::BadIntrinsic`) if `map` is not a `Map`, or as `decl_tensor_intrin` does
/// for a non-positive size.
pub fn map_tile(map: &TensorIntrin, m: i64, n: i64) -> Result<TensorIntrin, TeError> {
    let IntrinKind::Map { m: big_m, n: big_n } = map.kind else {
        return Err(TeError::BadIntrinsic {
            intrin: map.name.clone(),
            what: "kind".into(),
            expected: "a Map".into(),
            found: format!("{:?}", map.kind),
        });
    };
    if (m, n) == (big_m, big_n) {
        return Ok(map.clone());
    }
    let mut tensors = HashMap::default();
    let mut inputs = Vec::with_capacity(map.inputs.len());
    for (input, per_row) in map.inputs.iter().zip(map.map_rows()) {
        let shape = match (input.shape().len(), per_row) {
            (2, _) => vec![m, n],
            (_, true) => vec![m],
            (_, false) => vec![n],
        };
        let resized = match input.value_range() {
            Some((lo, hi)) => placeholder_vec_in_range(shape, input.dtype(), lo..=hi, input.name())?,
            None => placeholder_vec(shape, input.dtype(), input.name())?,
        };
        tensors.insert(input.id(), resized.clone());
        inputs.push(resized);
    }
    let body = map.output.body().expect("a Map declaration is a compute");
    let old_axes: Vec<Var> = map.output.axes().iter().map(|a| a.var().clone()).collect();
    let output = compute_vec(
        vec![m, n],
        |axes| {
            let vars: HashMap<Var, Expr> = old_axes.iter().cloned().zip(axes.iter().cloned()).collect();
            crate::mutator::rebind(body, vars, &tensors)
        },
        map.output.name(),
    )?;
    let input_refs: Vec<&Tensor> = inputs.iter().collect();
    decl_tensor_intrin(&format!("{}_tile_{m}x{n}", map.name), IntrinKind::Map { m, n }, &output, &input_refs)
}

/// The loop nest that computes the declaration `intrin` (a compute over its inputs, not a
/// `GemmMap`) on `operands` (flat origins, one stride per declaration dimension): per output
/// point, the reduction's identity first with `reset`, then every reduce point folded in
/// row-major order, or the body stored for a declaration without reduction. `None` for a
/// composite or an operand count that does not match.
pub fn call_nest(intrin: &TensorIntrin, operands: &[Operand], reset: bool) -> Option<Stmt> {
    let tensors = intrin.operand_tensors();
    if intrin.parts.is_some() || operands.len() != tensors.len() || operands.iter().any(|o| o.origin.len() != 1) {
        return None;
    }
    let output = &intrin.output;
    let body = output.body()?;
    let flat = |operand: &Operand, index: &[Expr]| {
        index.iter().zip(&operand.strides).fold(operand.origin[0].clone(), |acc, (i, &s)| acc + i.clone() * s)
    };
    let loops: Vec<(Var, i64)> = output.axes().iter().map(|a| (Var::index(a.var().name()), a.extent())).collect();
    let mut vars: HashMap<Var, Expr> =
        output.axes().iter().zip(&loops).map(|(a, (v, _))| (a.var().clone(), v.to_expr())).collect();
    let reduce = match body.kind() {
        ExprKind::Reduce(r) => Some(r),
        _ => None,
    };
    let reduce_loops: Vec<(Var, i64)> =
        reduce.map(|r| r.axes.iter().map(|a| (Var::index(a.var().name()), a.extent())).collect()).unwrap_or_default();
    if let Some(r) = reduce {
        vars.extend(r.axes.iter().zip(&reduce_loops).map(|(a, (v, _))| (a.var().clone(), v.to_expr())));
    }
    let reads: HashMap<TensorId, Operand> =
        intrin.inputs.iter().zip(operands).map(|(t, o)| (t.id(), o.clone())).collect();
    let mut lower = Lower { vars: &vars, reads: &reads, flat: &flat };
    let out = operands.last().expect("an output operand");
    let out_index = vec![flat(out, &loops.iter().map(|(v, _)| v.to_expr()).collect::<Vec<_>>())];
    let nest = |loops: &[(Var, i64)], inner: Stmt| {
        loops.iter().rev().fold(inner, |body, (v, extent)| Stmt::for_loop(v.clone(), *extent, ForKind::Serial, body))
    };
    let point = match reduce {
        Some(r) => {
            let current = Expr::load(&out.buffer, out_index.clone());
            let update = r.reducer.combine(current, lower.mutate_expr(&r.source));
            let update = nest(&reduce_loops, Stmt::store(&out.buffer, out_index.clone(), update));
            match reset {
                true => Stmt::seq(vec![Stmt::store(&out.buffer, out_index, reset_value(intrin)?), update]),
                false => update,
            }
        }
        None => Stmt::store(&out.buffer, out_index, lower.mutate_expr(body)),
    };
    Some(nest(&loops, point))
}

/// A declaration's expression in loop IR: axes as loop variables, input reads as loads.
struct Lower<'a, F: Fn(&Operand, &[Expr]) -> Expr> {
    vars: &'a HashMap<Var, Expr>,
    reads: &'a HashMap<TensorId, Operand>,
    flat: &'a F,
}

impl<F: Fn(&Operand, &[Expr]) -> Expr> Mutator for Lower<'_, F> {
    fn mutate_expr(&mut self, expr: &Expr) -> Expr {
        let walked = walk_expr(self, expr);
        match walked.kind() {
            ExprKind::Var(v) if self.vars.contains_key(v) => self.vars[v].clone(),
            ExprKind::TensorRead(t, idx) if self.reads.contains_key(&t.id()) => {
                let operand = &self.reads[&t.id()];
                Expr::load(&operand.buffer, vec![(self.flat)(operand, idx)])
            }
            _ => walked,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interp::{Array, eval_te};
    use crate::te::{compute, placeholder};

    /// `out = u8(min(max(f32(acc - comp[c]) * s[c] + r[p, c], 0), 255))`: a requantization
    /// with a column and a row input.
    fn requantize(m: i64, n: i64) -> TensorIntrin {
        let acc = placeholder([m, n], DType::I32, "acc").unwrap();
        let comp = placeholder([n], DType::I32, "comp").unwrap();
        let s = placeholder([n], DType::F32, "s").unwrap();
        let r = placeholder([m, n], DType::U8, "r").unwrap();
        let out = compute(
            [m, n],
            |i| {
                let (p, c) = (&i[0], &i[1]);
                let x = (acc.at([p, c]) - comp.at([c])).cast(DType::F32) * s.at([c]) + r.at([p, c]).cast(DType::F32);
                x.round().saturating_cast(DType::U8)
            },
            "out",
        )
        .unwrap();
        decl_tensor_intrin(&format!("rq_{m}x{n}"), IntrinKind::Map { m, n }, &out, &[&acc, &comp, &s, &r]).unwrap()
    }

    fn gemm(m: i64, n: i64, k: i64) -> TensorIntrin {
        let a = placeholder([m, k], DType::U8, "A").unwrap();
        let b = placeholder([k / 4, n, 4], DType::I8, "B").unwrap();
        let size = crate::intrin::Int8GemmSize { m, n, k, segments: 1 };
        let c = crate::intrin::int8_gemm_compute(&a, &b, size, false, "C").unwrap();
        decl_tensor_intrin("g", IntrinKind::Int8Gemm { m, n, k, segments: 1, saturating: false }, &c, &[&a, &b])
            .unwrap()
    }

    fn pattern(t: &Tensor, seed: i64) -> Array {
        let len: i64 = t.shape().iter().product();
        let values: Vec<i64> = (0..len).map(|i| (i * 37 + seed * 11) % 251 - 100).collect();
        let values: Vec<i64> = match t.dtype() {
            d if d == DType::U8 => values.iter().map(|&v| v.rem_euclid(256)).collect(),
            d if d == DType::I8 => values.iter().map(|&v| v.clamp(-128, 127)).collect(),
            _ => values,
        };
        Array::from_i64(t.dtype(), t.shape(), &values)
    }

    #[test]
    fn a_resized_map_computes_the_block_of_the_original() {
        let (big, tile) = (requantize(6, 32), map_tile(&requantize(6, 32), 2, 16).unwrap());
        assert_eq!(tile.kind, IntrinKind::Map { m: 2, n: 16 });
        assert_eq!(
            tile.inputs.iter().map(|t| t.shape().to_vec()).collect::<Vec<_>>(),
            [vec![2, 16], vec![16], vec![16], vec![2, 16]]
        );
        let arrays: Vec<Array> = big.inputs.iter().enumerate().map(|(s, t)| pattern(t, s as i64)).collect();
        let pairs: Vec<(&Tensor, &Array)> = big.inputs.iter().zip(&arrays).collect();
        let whole = eval_te(&[&big.output], &pairs).unwrap().remove(0);
        // The block at rows 2..4, columns 16..32.
        let (p0, c0) = (2, 16);
        let block = |a: &Array, t: &Tensor| {
            let flat: Vec<i64> = if t.shape().len() == 2 {
                (0..2).flat_map(|p| (0..16).map(move |c| (p0 + p) * 32 + c0 + c)).collect()
            } else {
                (0..16).map(|c| c0 + c).collect()
            };
            let mut b = Array::zeros(t.dtype(), &if t.shape().len() == 2 { vec![2, 16] } else { vec![16] });
            flat.iter().enumerate().for_each(|(i, &f)| b.set(i, a.get(f as usize)));
            b
        };
        let small: Vec<Array> = arrays.iter().zip(&big.inputs).map(|(a, t)| block(a, t)).collect();
        let pairs: Vec<(&Tensor, &Array)> = tile.inputs.iter().zip(&small).collect();
        let got = eval_te(&[&tile.output], &pairs).unwrap().remove(0);
        let want = block(&whole, &big.output);
        assert!(got.bits_eq(&want));
    }

    #[test]
    fn parts_chain_only_with_matching_rows_and_at_most_the_columns() {
        let fused = gemm_map(&gemm(4, 16, 8), &requantize(4, 16)).unwrap();
        assert_eq!(fused.kind, IntrinKind::GemmMap { m: 4, n: 16 });
        let names: Vec<&str> = fused.operand_tensors().iter().map(|t| t.name()).collect();
        assert_eq!(names, ["A", "B", "comp", "s", "r", "out"]);
        assert!(gemm_map(&gemm(4, 16, 8), &requantize(4, 32)).is_err());
        assert!(gemm_map(&gemm(4, 16, 8), &requantize(2, 16)).is_err());
        // A Map of the first columns of the GEMM's tile (the last panel of a wider output).
        let partial = gemm_map(&gemm(4, 16, 8), &requantize(4, 8)).unwrap();
        assert_eq!(partial.kind, IntrinKind::GemmMap { m: 4, n: 8 });
        assert!(gemm_map(&requantize(4, 16), &requantize(4, 16)).is_err());
    }
}
