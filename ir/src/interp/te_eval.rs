//! Reference 1: direct evaluation of tensor-expression definitions. Knows nothing of schedules.
//!
//! Every compute reachable from the outputs is evaluated once, after the tensors it reads, fully
//! and point by point in row-major order. A reduction starts from `reducer.identity(dtype)` and
//! folds `reducer.combine(acc, value)` over the points of its axes in row-major order of `axes`,
//! so the result is exactly what the definition says, including float rounding order.
//! `Select` evaluates only the chosen arm, so padding written as a select never reads out of
//! bounds; every other read outside a tensor's shape is `InterpError::OutOfBounds`. Inputs of
//! placeholders with a declared value range are checked against it (`InterpError::ValueRange`).

use std::collections::{HashMap, HashSet};

use crate::expr::{Expr, ExprKind, Var};
use crate::interp::compile::{Compiler, Fault, Frame, Memory, malformed};
use crate::interp::loop_eval::check_value_range;
use crate::interp::{Array, InterpError, Scalar, check_array};
use crate::intrin::TensorIntrin;
use crate::te::{Tensor, TensorId};

/// Evaluates `outputs` from the placeholder arrays in `inputs`; returns one array per output.
pub fn eval_te(outputs: &[&Tensor], inputs: &[(&Tensor, &Array)]) -> Result<Vec<Array>, InterpError> {
    let mut supplied: HashMap<TensorId, &Array> = HashMap::new();
    for &(tensor, array) in inputs {
        if !tensor.is_placeholder() {
            return Err(InterpError::NotAnInput { tensor: tensor.name().to_string() });
        }
        check_array(tensor.name(), tensor.dtype(), tensor.shape(), array)?;
        if let Some(range) = tensor.value_range() {
            check_value_range(tensor.name(), range, array)?;
        }
        if supplied.insert(tensor.id(), array).is_some() {
            return Err(InterpError::DuplicateInput { tensor: tensor.name().to_string() });
        }
    }
    let mut order = Vec::new();
    let mut seen = HashSet::new();
    for tensor in outputs {
        post_order(tensor, &mut seen, &mut order);
    }
    let mut compiler = Compiler::default();
    let mut frame = Frame::default();
    for tensor in &order {
        let array = match tensor.body() {
            Some(body) => evaluate(&mut compiler, &mut frame, tensor, body).map_err(|e| *e)?,
            None => match supplied.get(&tensor.id()) {
                Some(&array) => array.clone(),
                None => return Err(InterpError::MissingInput { tensor: tensor.name().to_string() }),
            },
        };
        let slot = compiler.bind_memory(Memory::Tensor(tensor.id()));
        compiler.grow(&mut frame);
        frame.buffers[slot] = array;
    }
    Ok(outputs
        .iter()
        .map(|t| {
            let slot = compiler.memory(Memory::Tensor(t.id())).expect("every output was evaluated");
            frame.buffers[slot].clone()
        })
        .collect())
}

/// Appends `tensor` after everything it reads, each tensor once.
fn post_order(tensor: &Tensor, seen: &mut HashSet<TensorId>, order: &mut Vec<Tensor>) {
    if !seen.insert(tensor.id()) {
        return;
    }
    for input in tensor.inputs() {
        post_order(&input, seen, order);
    }
    order.push(tensor.clone());
}

/// Computes every element of one compute whose inputs are already in `frame`.
fn evaluate(compiler: &mut Compiler, frame: &mut Frame, tensor: &Tensor, body: &Expr) -> Result<Array, Fault> {
    let run = compile_compute(compiler, tensor, body, false)?;
    compiler.grow(frame);
    let mut out = Array::zeros(tensor.dtype(), tensor.shape());
    run(frame, &mut out)?;
    Ok(out)
}

/// Writes every element of a compute into the array (of the tensor's shape) it is given.
type ComputeFn = Box<dyn Fn(&mut Frame, &mut Array) -> Result<(), Fault>>;

/// Compiles the evaluation of `tensor` (whose body is `body`) over its whole shape, reading its
/// inputs from the memories bound in `compiler`. A reduction folds from the reducer's identity,
/// or from the element already in the array when `update` is set.
fn compile_compute(compiler: &mut Compiler, tensor: &Tensor, body: &Expr, update: bool) -> Result<ComputeFn, Fault> {
    let dtype = tensor.dtype();
    let axis_slots: Vec<usize> = tensor.axes().iter().map(|a| compiler.bind_scalar(a.var())).collect();
    let extents: Vec<i64> = tensor.axes().iter().map(|a| a.extent()).collect();
    Ok(match body.kind() {
        ExprKind::Reduce(r) => {
            let reduce_slots: Vec<usize> = r.axes.iter().map(|a| compiler.bind_scalar(a.var())).collect();
            let reduce_extents: Vec<i64> = r.axes.iter().map(|a| a.extent()).collect();
            let source = compiler.compile(&r.source)?;
            // One definition of every reducer: its own `combine`, on two fresh variables.
            let (acc_var, value_var) = (Var::new("acc", dtype), Var::new("value", dtype));
            let combine = r.reducer.combine(acc_var.to_expr(), value_var.to_expr());
            let identity = r.reducer.identity(dtype);
            if combine.dtype() != dtype || identity.dtype() != dtype {
                return Err(Box::new(malformed(format!(
                    "compute {tensor}: reducer {} combines {} from identity {} but the reduction produces {dtype}",
                    r.reducer.name(),
                    combine.dtype(),
                    identity.dtype()
                ))));
            }
            let (acc_slot, value_slot) = (compiler.bind_scalar(&acc_var), compiler.bind_scalar(&value_var));
            let combine = compiler.compile(&combine)?;
            let identity = compiler.compile(&identity)?;
            Box::new(move |frame: &mut Frame, out: &mut Array| {
                let mut flat = 0;
                for_each_point(frame, &axis_slots, &extents, |frame: &mut Frame| {
                    let mut acc = if update { out.get(flat) } else { identity(frame, 0)? };
                    for_each_point(frame, &reduce_slots, &reduce_extents, |frame: &mut Frame| {
                        frame.scalars[value_slot] = source(frame, 0)?;
                        frame.scalars[acc_slot] = acc;
                        acc = combine(frame, 0)?;
                        Ok(())
                    })?;
                    out.set(flat, acc);
                    flat += 1;
                    Ok(())
                })
            })
        }
        _ => {
            let body = compiler.compile(body)?;
            Box::new(move |frame: &mut Frame, out: &mut Array| {
                let mut flat = 0;
                for_each_point(frame, &axis_slots, &extents, |frame: &mut Frame| {
                    out.set(flat, body(frame, 0)?);
                    flat += 1;
                    Ok(())
                })
            })
        }
    })
}

/// The declaration of a tensor intrinsic, compiled once to be applied to the operand regions of
/// every execution of a `Call` (see `StmtKind::Call`).
pub(crate) struct CompiledIntrin {
    compiler: Compiler,
    input_slots: Vec<usize>,
    run: ComputeFn,
    /// `IntrinKind::GemmMap`: its GEMM part; `run` is then the Map part's.
    gemm: Option<GemmPart>,
}

/// The GEMM part of a compiled `GemmMap`.
struct GemmPart {
    compiled: Box<CompiledIntrin>,
    /// The GEMM's inputs (the call's first operands).
    inputs: usize,
    /// The GEMM's output shape.
    shape: Vec<i64>,
    /// The Map's input 0 shape: the GEMM's rows, its first columns.
    map_shape: Vec<i64>,
}

impl CompiledIntrin {
    pub fn new(intrin: &TensorIntrin) -> Result<CompiledIntrin, InterpError> {
        if let Some((gemm, map)) = &intrin.parts {
            let first = CompiledIntrin::new(gemm)?;
            let mut second = CompiledIntrin::new(map)?;
            let map_input = map.inputs.first().map_or_else(Vec::new, |t| t.shape().to_vec());
            second.gemm = Some(GemmPart {
                compiled: Box::new(first),
                inputs: gemm.inputs.len(),
                shape: gemm.output.shape().to_vec(),
                map_shape: map_input,
            });
            return Ok(second);
        }
        let mut compiler = Compiler::default();
        let input_slots = intrin.inputs.iter().map(|t| compiler.bind_memory(Memory::Tensor(t.id()))).collect();
        let body = intrin.output.body().ok_or_else(|| malformed(format!("intrinsic {intrin} has no compute")))?;
        let run = compile_compute(&mut compiler, &intrin.output, body, true).map_err(|e| *e)?;
        Ok(CompiledIntrin { compiler, input_slots, run, gemm: None })
    }

    /// Updates `out` (the output's current values) from the input arrays, by the declaration.
    /// A `GemmMap` runs its GEMM from zero into a temporary, then its Map on the temporary's
    /// first columns (all of them, or as many as the Map has) and the remaining inputs.
    pub fn apply(&self, mut inputs: Vec<Array>, out: &mut Array) -> Result<(), Fault> {
        if let Some(GemmPart { compiled, inputs: count, shape, map_shape }) = &self.gemm {
            let rest = inputs.split_off((*count).min(inputs.len()));
            let mut temporary = Array::zeros(crate::dtype::DType::I32, shape);
            compiled.apply(inputs, &mut temporary)?;
            if let ([rows, columns], [_, map_columns]) = (shape.as_slice(), map_shape.as_slice())
                && map_columns < columns
            {
                let mut first = Array::zeros(crate::dtype::DType::I32, map_shape);
                for r in 0..*rows {
                    for c in 0..*map_columns {
                        first.set((r * map_columns + c) as usize, temporary.get((r * columns + c) as usize));
                    }
                }
                temporary = first;
            }
            inputs = std::iter::once(temporary).chain(rest).collect();
        }
        let mut frame = Frame::default();
        self.compiler.grow(&mut frame);
        for (&slot, array) in self.input_slots.iter().zip(inputs) {
            frame.buffers[slot] = array;
        }
        (self.run)(&mut frame, out)
    }
}

/// Calls `visit` at every point of the box `extents` in row-major order (the last coordinate
/// fastest), with coordinate `d` in `frame.scalars[slots[d]]`. A zero-dimensional box has one point.
fn for_each_point(
    frame: &mut Frame,
    slots: &[usize],
    extents: &[i64],
    mut visit: impl FnMut(&mut Frame) -> Result<(), Fault>,
) -> Result<(), Fault> {
    if extents.iter().any(|&e| e <= 0) {
        return Ok(());
    }
    let mut point = vec![0i64; extents.len()];
    for &slot in slots {
        frame.scalars[slot] = Scalar::Int(0);
    }
    loop {
        visit(frame)?;
        let mut d = extents.len();
        loop {
            if d == 0 {
                return Ok(());
            }
            d -= 1;
            point[d] += 1;
            if point[d] < extents[d] {
                frame.scalars[slots[d]] = Scalar::Int(point[d]);
                break;
            }
            point[d] = 0;
            frame.scalars[slots[d]] = Scalar::Int(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::expr::select;
    use crate::interp::Access;
    use crate::te::{comm_reducer, compute, max, placeholder, reduce_axis, sum};

    /// Deterministic values covering the whole range of a narrow type.
    fn pattern(len: usize, mul: i64, add: i64) -> Vec<i64> {
        (0..len as i64).map(|i| (i * mul + add) % 256).collect()
    }

    #[test]
    fn matmul_u8_i8_to_i32_matches_plain_loop() {
        let (m, n, kk) = (7usize, 5usize, 9usize);
        let a = placeholder([m as i64, kk as i64], DType::U8, "A").unwrap();
        let b = placeholder([n as i64, kk as i64], DType::I8, "B").unwrap();
        let k = reduce_axis(kk as i64, "k").unwrap();
        let c = compute(
            [m as i64, n as i64],
            |i| sum(DType::I32, &[&k], a.at([&i[0], &k]).cast(DType::I32) * b.at([&i[1], &k]).cast(DType::I32)),
            "C",
        )
        .unwrap();
        let a_vals = pattern(m * kk, 37, 11);
        let b_vals: Vec<i64> = pattern(n * kk, 53, 7).iter().map(|v| v - 128).collect();
        let a_arr = Array::from_i64(DType::U8, a.shape(), &a_vals);
        let b_arr = Array::from_i64(DType::I8, b.shape(), &b_vals);
        assert!(a_vals.contains(&255) || a_vals.iter().any(|&v| v > 200));
        let out = eval_te(&[&c], &[(&a, &a_arr), (&b, &b_arr)]).unwrap();
        let mut expected = vec![0i64; m * n];
        for i in 0..m {
            for j in 0..n {
                let mut acc = 0i32;
                for p in 0..kk {
                    acc = acc.wrapping_add(a_vals[i * kk + p] as i32 * b_vals[j * kk + p] as i32);
                }
                expected[i * n + j] = acc as i64;
            }
        }
        assert_eq!(out[0].dtype(), DType::I32);
        assert_eq!(out[0].shape(), &[m as i64, n as i64]);
        assert_eq!(out[0].to_i64_vec(), expected);
    }

    #[test]
    fn max_reduction_of_negatives_and_nan() {
        let a = placeholder([2, 3], DType::I16, "A").unwrap();
        let k = reduce_axis(3, "k").unwrap();
        let m = compute([2], |i| max(DType::I16, &[&k], a.at([&i[0], &k])), "M").unwrap();
        let a_arr = Array::from_i64(DType::I16, &[2, 3], &[-300, -7, -32768, 5, 9, -1]);
        let out = eval_te(&[&m], &[(&a, &a_arr)]).unwrap();
        assert_eq!(out[0].to_i64_vec(), vec![-7, 9]);

        // Float max returns the non-NaN operand, so a NaN element is skipped.
        let f = placeholder([4], DType::F32, "F").unwrap();
        let k = reduce_axis(4, "k").unwrap();
        let fm = compute([1], |_| max(DType::F32, &[&k], f.at([&k])), "FM").unwrap();
        let f_arr = Array::from_f64(DType::F32, &[4], &[-3.5, f64::NAN, -1.25, -8.0]);
        assert_eq!(eval_te(&[&fm], &[(&f, &f_arr)]).unwrap()[0].to_f64_vec(), vec![-1.25]);
    }

    #[test]
    fn custom_reducer_folds_its_combine_expression() {
        let prod = comm_reducer("prod", DType::I32, |x, y| x * y, Expr::int(DType::I32, 1)).unwrap();
        let a = placeholder([2, 4], DType::I32, "A").unwrap();
        let k = reduce_axis(4, "k").unwrap();
        let p = compute([2], |i| prod.reduce(DType::I32, &[&k], a.at([&i[0], &k])), "P").unwrap();
        let vals = [3, -2, 5, 7, 65536, 65536, 3, 1];
        let a_arr = Array::from_i64(DType::I32, &[2, 4], &vals);
        let out = eval_te(&[&p], &[(&a, &a_arr)]).unwrap();
        let wrapped = (65536i32).wrapping_mul(65536).wrapping_mul(3);
        assert_eq!(out[0].to_i64_vec(), vec![-210, wrapped as i64]);

        // A reducer over two axes visits them in row-major order: "keep the later" is not
        // commutative, so it exposes the order (the last point is [1, 2]).
        let last = comm_reducer("last", DType::I64, |_, y| y.clone(), Expr::index(-1)).unwrap();
        let (r, s) = (reduce_axis(2, "r").unwrap(), reduce_axis(3, "s").unwrap());
        let l = compute([1], |_| last.reduce(DType::I64, &[&r, &s], &r * 10 + &s), "L").unwrap();
        assert_eq!(eval_te(&[&l], &[]).unwrap()[0].to_i64_vec(), vec![12]);
    }

    #[test]
    fn f16_sum_rounds_every_step_in_axis_order() {
        let a = placeholder([2, 4], DType::F16, "A").unwrap();
        let k = reduce_axis(4, "k").unwrap();
        let s = compute([2], |i| sum(DType::F16, &[&k], a.at([&i[0], &k])), "S").unwrap();
        let vals = [1.0, 4e-4, 4e-4, 4e-4, 4e-4, 4e-4, 4e-4, 1.0];
        let a_arr = Array::from_f64(DType::F16, &[2, 4], &vals);
        let out = eval_te(&[&s], &[(&a, &a_arr)]).unwrap();
        let fold = |row: &[f64]| row.iter().fold(half::f16::ZERO, |acc, &v| acc + half::f16::from_f64(v)).to_f64();
        assert_eq!(out[0].to_f64_vec(), vec![fold(&vals[..4]), fold(&vals[4..])]);
        assert_eq!(out[0].to_f64_vec()[0], 1.0);
        assert!(out[0].to_f64_vec()[1] > 1.0);
    }

    #[test]
    fn select_padding_never_reads_out_of_bounds() {
        let a = placeholder([4, 4], DType::I32, "A").unwrap();
        let padded = compute(
            [6, 6],
            |i| {
                let inside = i[0].ge(1) & i[0].le(4) & i[1].ge(1) & i[1].le(4);
                select(inside, a.at([&(&i[0] - 1), &(&i[1] - 1)]), Expr::int(DType::I32, 0))
            },
            "P",
        )
        .unwrap();
        let (r, s) = (reduce_axis(3, "r").unwrap(), reduce_axis(3, "s").unwrap());
        let blur =
            compute([4, 4], |i| sum(DType::I32, &[&r, &s], padded.at([&(&i[0] + &*r), &(&i[1] + &*s)])), "B").unwrap();
        let vals: Vec<i64> = (1..=16).collect();
        let a_arr = Array::from_i64(DType::I32, &[4, 4], &vals);
        let out = eval_te(&[&padded, &blur], &[(&a, &a_arr)]).unwrap();
        let at =
            |y: i64, x: i64| if (0..4).contains(&y) && (0..4).contains(&x) { vals[(y * 4 + x) as usize] } else { 0 };
        let expected_pad: Vec<i64> = (0..36).map(|p| at(p / 6 - 1, p % 6 - 1)).collect();
        assert_eq!(out[0].to_i64_vec(), expected_pad);
        let expected_blur: Vec<i64> = (0..16)
            .map(|p| {
                let (y, x) = (p / 4, p % 4);
                (-1..=1).flat_map(|dy| (-1..=1).map(move |dx| (dy, dx))).map(|(dy, dx)| at(y + dy, x + dx)).sum()
            })
            .collect();
        assert_eq!(out[1].to_i64_vec(), expected_blur);
    }

    #[test]
    fn elementwise_arithmetic_follows_scalar_semantics() {
        let a = placeholder([4], DType::I32, "A").unwrap();
        let q = compute([4], |i| a.at([&i[0]]) / Expr::int(DType::I32, 2), "Q").unwrap();
        let m = compute([4], |i| a.at([&i[0]]) % Expr::int(DType::I32, 3), "M").unwrap();
        let w = compute([4], |i| (q.at([&i[0]]) + m.at([&i[0]])).cast(DType::U8) + 250, "W").unwrap();
        let a_arr = Array::from_i64(DType::I32, &[4], &[-7, 7, -1, 20]);
        let out = eval_te(&[&q, &m, &w], &[(&a, &a_arr)]).unwrap();
        assert_eq!(out[0].to_i64_vec(), vec![-4, 3, -1, 10]);
        assert_eq!(out[1].to_i64_vec(), vec![2, 1, 2, 2]);
        // q + m = [-2, 4, 1, 12]; as u8 it wraps to [254, 4, 1, 12], then + 250 wraps at 8 bits.
        assert_eq!(out[2].to_i64_vec(), vec![248, 254, 251, 6]);
    }

    #[test]
    fn out_of_bounds_gather_is_a_typed_error() {
        // An affine read that leaves A is rejected by `compute`; a gather is checked when it runs.
        let a = placeholder([4], DType::I32, "A").unwrap();
        let idx = placeholder([4], DType::I64, "idx").unwrap();
        let b = compute([4], |i| a.at([&idx.at([&i[0]])]), "B").unwrap();
        let a_arr = Array::zeros(DType::I32, &[4]);
        let idx_arr = Array::from_i64(DType::I64, &[4], &[0, 3, 4, 1]);
        let err = eval_te(&[&b], &[(&a, &a_arr), (&idx, &idx_arr)]).unwrap_err();
        assert_eq!(
            err,
            InterpError::OutOfBounds { access: Access::Read, name: "A".into(), index: vec![4], shape: vec![4] }
        );
        assert_eq!(err.to_string(), "out-of-bounds read of A: index [4] is outside shape [4]");
        let in_range = Array::from_i64(DType::I64, &[4], &[3, 2, 1, 0]);
        assert!(eval_te(&[&b], &[(&a, &a_arr), (&idx, &in_range)]).is_ok());
    }

    #[test]
    fn bad_inputs_are_typed_errors() {
        let a = placeholder([2, 3], DType::U8, "A").unwrap();
        let b = compute([2, 3], |i| a.at([&i[0], &i[1]]) + 1, "B").unwrap();
        let good = Array::zeros(DType::U8, &[2, 3]);
        assert_eq!(eval_te(&[&b], &[]).unwrap_err(), InterpError::MissingInput { tensor: "A".into() });
        let wrong_type = Array::zeros(DType::I8, &[2, 3]);
        assert_eq!(
            eval_te(&[&b], &[(&a, &wrong_type)]).unwrap_err(),
            InterpError::ArgumentDType { name: "A".into(), expected: DType::U8, found: DType::I8 }
        );
        let wrong_shape = Array::zeros(DType::U8, &[3, 2]);
        assert_eq!(
            eval_te(&[&b], &[(&a, &wrong_shape)]).unwrap_err(),
            InterpError::ArgumentShape { name: "A".into(), expected: vec![2, 3], found: vec![3, 2] }
        );
        assert_eq!(
            eval_te(&[&b], &[(&a, &good), (&b, &good)]).unwrap_err(),
            InterpError::NotAnInput { tensor: "B".into() }
        );
        assert_eq!(
            eval_te(&[&b], &[(&a, &good), (&a, &good)]).unwrap_err(),
            InterpError::DuplicateInput { tensor: "A".into() }
        );
        assert_eq!(eval_te(&[&b], &[(&a, &good)]).unwrap()[0].to_i64_vec(), vec![1; 6]);
    }

    #[test]
    fn declared_value_ranges_are_checked_and_reach_lowered_buffers() {
        use crate::te::placeholder_in_range;
        let err = placeholder_in_range([4], DType::U8, 0..=300, "X").unwrap_err();
        assert_eq!(err.to_string(), "placeholder X: value range 0..=300 must be non-empty and inside the range of u8");
        assert!(placeholder_in_range([4], DType::F32, 0..=1, "X").is_err());
        let (lo, hi) = (5, 4);
        assert!(placeholder_in_range([4], DType::I8, lo..=hi, "X").is_err());
        let x = placeholder_in_range([4], DType::U8, 0..=127, "X").unwrap();
        assert_eq!(x.value_range(), Some((0, 127)));
        let y = compute([4], |i| x.at([&i[0]]) * 2, "Y").unwrap();
        assert_eq!(y.value_range(), None);
        let bad = Array::from_i64(DType::U8, &[4], &[0, 127, 128, 5]);
        let range_error = InterpError::ValueRange { name: "X".into(), lo: 0, hi: 127, index: 2, found: 128 };
        assert_eq!(eval_te(&[&y], &[(&x, &bad)]).unwrap_err(), range_error);
        let func = crate::lower::lower(&crate::schedule::create_schedule(&[&y]), &[&x, &y], "f").unwrap();
        assert_eq!(func.params[0].value_range(), Some((0, 127)));
        assert_eq!(func.params[1].value_range(), None);
        let mut args = vec![bad, Array::zeros(DType::U8, &[4])];
        assert_eq!(crate::interp::run_func(&func, &mut args).unwrap_err(), range_error);
        args[0] = Array::from_i64(DType::U8, &[4], &[0, 127, 100, 5]);
        crate::interp::run_func(&func, &mut args).unwrap();
        assert_eq!(args[1].to_i64_vec(), vec![0, 254, 200, 10]);
    }
}
