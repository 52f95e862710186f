//! Reference 2: an interpreter of the loop IR at any stage of lowering.
//!
//! It accepts multi-dimensional and flat accesses, scalar and vector values, and every loop kind;
//! `Parallel`, `Vectorized` and `Unrolled` loops run serially, which the statement semantics
//! (`stmt.rs`) define to be equivalent. Deliberate choices where the IR leaves freedom:
//! * `Allocate` provides a zero-filled buffer (the IR calls it uninitialized; reading it before
//!   writing is not detected).
//! * `Select` evaluates only the chosen arm of each lane.
//! * A vector `Store` evaluates and bounds-checks every lane before writing any, then writes
//!   lanes in increasing order, so it reads memory as it was before the store.
//!
//! * A tensor-intrinsic `Call` runs its declaration (`StmtKind::Call`), never its fallback: the
//!   input regions are gathered into arrays of the declaration's shapes, the declaration's compute
//!   is evaluated by the tensor-expression evaluator on them (updating the gathered output region
//!   for a reduction), and the output region is written back. Tests compare it with the fallback.
//!
//! Any access outside its buffer, in any lane, is `InterpError::OutOfBounds` (for a call, the
//! flat index of the first region element outside its buffer).
//!
//! Arguments of parameters with a declared value range (`Buffer::value_range`) are checked
//! against it before anything runs (`InterpError::ValueRange`).

use crate::dtype::DType;
use crate::expr::ExprKind;
use crate::interp::compile::{Compiler, ExprFn, Fault, Frame, Memory, Slot, malformed};
use crate::interp::te_eval::CompiledIntrin;
use crate::interp::{Access, Array, InterpError, Scalar, check_array};
use crate::stmt::{Func, Stmt, StmtKind};

type StmtFn = Box<dyn Fn(&mut Frame) -> Result<(), Fault>>;

/// Runs `func` on `args`, given in `func.params` order. Count, element types and shapes are
/// checked before anything runs. The arrays are updated in place, also when an error stops the
/// run part way.
pub fn run_func(func: &Func, args: &mut [Array]) -> Result<(), InterpError> {
    if args.len() != func.params.len() {
        return Err(InterpError::ArgumentCount {
            func: func.name.clone(),
            expected: func.params.len(),
            found: args.len(),
        });
    }
    for (param, arg) in func.params.iter().zip(args.iter()) {
        check_array(param.name(), param.dtype(), param.shape(), arg)?;
        if let Some(range) = param.value_range() {
            check_value_range(param.name(), range, arg)?;
        }
    }
    let mut compiler = Compiler::default();
    let slots: Vec<usize> = func.params.iter().map(|p| compiler.bind_memory(Memory::Buffer(p.id()))).collect();
    let body = compile_stmt(&mut compiler, &func.body)?;
    let mut frame = Frame::default();
    compiler.grow(&mut frame);
    // The frame owns the arguments while the body runs; they go back whatever the outcome.
    for (&slot, arg) in slots.iter().zip(args.iter_mut()) {
        std::mem::swap(&mut frame.buffers[slot], arg);
    }
    let result = body(&mut frame);
    for (&slot, arg) in slots.iter().zip(args.iter_mut()) {
        std::mem::swap(&mut frame.buffers[slot], arg);
    }
    result.map_err(|e| *e)
}

/// Checks that every element of `array` lies in the declared `range` of parameter `name`.
pub(crate) fn check_value_range(name: &str, (lo, hi): (i64, i64), array: &Array) -> Result<(), InterpError> {
    match array.to_i64_vec().iter().enumerate().find(|(_, v)| !(lo..=hi).contains(*v)) {
        Some((index, &found)) => Err(InterpError::ValueRange { name: name.to_string(), lo, hi, index, found }),
        None => Ok(()),
    }
}

/// One operand region of a compiled call: its memory slot, flat origin, and the flat offset of
/// every declaration element (row-major) from the origin.
struct Region {
    slot: usize,
    name: String,
    shape: Vec<i64>,
    origin: ExprFn,
    offsets: Vec<i64>,
    dtype: DType,
    decl_shape: Vec<i64>,
}

impl Region {
    /// The flat buffer index of every element, bounds-checked.
    fn positions(&self, f: &Frame, access: Access) -> Result<Vec<usize>, Fault> {
        let origin = (self.origin)(f, 0)?.as_int();
        let len = f.buffers[self.slot].len() as i64;
        self.offsets
            .iter()
            .map(|o| {
                let i = origin + o;
                if (0..len).contains(&i) {
                    Ok(i as usize)
                } else {
                    Err(Box::new(InterpError::OutOfBounds {
                        access,
                        name: self.name.clone(),
                        index: vec![i],
                        shape: self.shape.clone(),
                    }))
                }
            })
            .collect()
    }

    fn gather(&self, f: &Frame, positions: &[usize]) -> Array {
        let buffer = &f.buffers[self.slot];
        let mut array = Array::zeros(self.dtype, &self.decl_shape);
        for (p, &i) in positions.iter().enumerate() {
            array.set(p, buffer.get(i));
        }
        array
    }
}

fn compile_stmt(c: &mut Compiler, stmt: &Stmt) -> Result<StmtFn, InterpError> {
    Ok(match stmt.kind() {
        StmtKind::For { var, extent, body, .. } => {
            if var.dtype() != DType::INDEX {
                return Err(malformed(format!("loop variable {var} has type {}, expected i64", var.dtype())));
            }
            let slot = c.bind_scalar(var);
            let body = compile_stmt(c, body)?;
            c.unbind_var(var);
            let extent = *extent;
            Box::new(move |f| {
                for i in 0..extent {
                    f.scalars[slot] = Scalar::Int(i);
                    body(f)?;
                }
                Ok(())
            })
        }
        StmtKind::Let { var, value, body } => {
            if var.dtype() != value.dtype() {
                return Err(malformed(format!(
                    "let {var}: the variable has type {} but its value `{value}` has type {}",
                    var.dtype(),
                    value.dtype()
                )));
            }
            // The value is compiled outside the variable's own scope.
            let value = c.compile(value)?;
            let slot = c.bind_var(var);
            let body = compile_stmt(c, body)?;
            c.unbind_var(var);
            match slot {
                Slot::Scalar(s) => Box::new(move |f| {
                    f.scalars[s] = value(f, 0)?;
                    body(f)
                }),
                Slot::Vector(s) => {
                    let lanes = var.dtype().lanes as usize;
                    Box::new(move |f| {
                        f.vectors[s] = (0..lanes).map(|l| value(f, l)).collect::<Result<_, _>>()?;
                        body(f)
                    })
                }
            }
        }
        StmtKind::Store { buffer, indices, value } => {
            let slot = c.buffer_slot(buffer)?;
            let lanes = value.dtype().lanes as usize;
            let index_lanes = indices.iter().map(|i| i.dtype().lanes as usize).max().unwrap_or(1);
            if value.dtype().element() != buffer.dtype() || index_lanes != lanes {
                return Err(malformed(format!(
                    "store to {}: a {} buffer indexed with {index_lanes} lanes cannot take the value `{value}` of type {}",
                    buffer.name(),
                    buffer.dtype(),
                    value.dtype()
                )));
            }
            let index = c.compile_index(Access::Write, buffer.name(), buffer.shape(), indices)?;
            let value = c.compile(value)?;
            if lanes == 1 {
                Box::new(move |f| {
                    let i = index.eval(f, 0)?;
                    let v = value(f, 0)?;
                    f.buffers[slot].set(i, v);
                    Ok(())
                })
            } else {
                Box::new(move |f| {
                    let writes =
                        (0..lanes).map(|l| Ok((index.eval(f, l)?, value(f, l)?))).collect::<Result<Vec<_>, Fault>>()?;
                    let buffer = &mut f.buffers[slot];
                    for (i, v) in writes {
                        buffer.set(i, v);
                    }
                    Ok(())
                })
            }
        }
        StmtKind::If { cond, then_case, else_case } => {
            if cond.dtype() != DType::BOOL {
                return Err(malformed(format!("if condition `{cond}` has type {}, expected bool", cond.dtype())));
            }
            let cond = c.compile(cond)?;
            let then_case = compile_stmt(c, then_case)?;
            let else_case = else_case.as_ref().map(|e| compile_stmt(c, e)).transpose()?;
            Box::new(move |f| {
                if cond(f, 0)?.as_bool() {
                    then_case(f)
                } else if let Some(else_case) = &else_case {
                    else_case(f)
                } else {
                    Ok(())
                }
            })
        }
        StmtKind::BoundsCheck { cond, buffer } => {
            if cond.dtype().element() != DType::BOOL {
                return Err(malformed(format!(
                    "bounds check condition `{cond}` has type {}, expected bool",
                    cond.dtype()
                )));
            }
            let lanes = cond.dtype().lanes as usize;
            let name = buffer.name().to_string();
            let cond = c.compile(cond)?;
            Box::new(move |f| {
                for lane in 0..lanes {
                    if !cond(f, lane)?.as_bool() {
                        return Err(Box::new(InterpError::IndexCheck { name: name.clone() }));
                    }
                }
                Ok(())
            })
        }
        StmtKind::Seq(stmts) => {
            let stmts = stmts.iter().map(|s| compile_stmt(c, s)).collect::<Result<Vec<_>, _>>()?;
            Box::new(move |f| stmts.iter().try_for_each(|s| s(f)))
        }
        StmtKind::Allocate { buffer, body } => {
            let memory = Memory::Buffer(buffer.id());
            let slot = c.bind_memory(memory);
            let body = compile_stmt(c, body)?;
            c.unbind_memory(memory);
            let (dtype, shape) = (buffer.dtype(), buffer.shape().to_vec());
            Box::new(move |f| {
                f.buffers[slot] = Array::zeros(dtype, &shape);
                let result = body(f);
                // Release the memory; a re-entered allocation starts from zero again.
                f.buffers[slot] = Array::zeros(dtype, &[0]);
                result
            })
        }
        StmtKind::Call { intrin, operands, reset, range, .. } => {
            let tensors = intrin.operand_tensors();
            // The segments outside the range: `A`'s elements there read as 0.
            let range = match (range, crate::intrin::segmented_gemm(intrin)) {
                (None, _) => None,
                (Some(r), Some(segments)) => Some((c.compile(&r.first)?, c.compile(&r.last)?, segments)),
                (Some(_), None) => {
                    return Err(malformed(format!("call of {intrin} has a segment range, but no segments")));
                }
            };
            let reset_to = match (reset, crate::intrin::reset_value(intrin)) {
                (false, _) => None,
                (true, Some(identity)) => Some(match identity.kind() {
                    ExprKind::Float(v) => Scalar::Float(*v),
                    ExprKind::Int(v) => Scalar::Int(*v),
                    _ => unreachable!("reset_value gives constants"),
                }),
                (true, None) => {
                    return Err(malformed(format!(
                        "call of {intrin} resets, but its declaration does not reduce to a constant identity"
                    )));
                }
            };
            if operands.len() != tensors.len() {
                return Err(malformed(format!(
                    "call of {intrin} has {} operands, expected {} (inputs, then the output)",
                    operands.len(),
                    tensors.len()
                )));
            }
            let mut regions = Vec::new();
            for (op, tensor) in operands.iter().zip(&tensors) {
                let shape = tensor.shape();
                if op.buffer.dtype() != tensor.dtype() || op.strides.len() != shape.len() {
                    return Err(malformed(format!(
                        "call of {intrin}: operand {} ({}, {} strides) cannot stand for {tensor}: {}{shape:?}",
                        op.buffer.name(),
                        op.buffer.dtype(),
                        op.strides.len(),
                        tensor.dtype()
                    )));
                }
                if op.origin.len() != 1 && op.origin.len() != op.buffer.shape().len() {
                    return Err(malformed(format!(
                        "call of {intrin}: operand {} has {} origin indices, expected {} or 1",
                        op.buffer.name(),
                        op.origin.len(),
                        op.buffer.shape().len()
                    )));
                }
                let mut offsets = vec![0i64];
                for (&extent, &stride) in shape.iter().zip(&op.strides) {
                    offsets = offsets.iter().flat_map(|o| (0..extent).map(move |p| o + p * stride)).collect();
                }
                regions.push(Region {
                    slot: c.buffer_slot(&op.buffer)?,
                    name: op.buffer.name().to_string(),
                    shape: op.buffer.shape().to_vec(),
                    origin: c.compile(&op.flat_origin())?,
                    offsets,
                    dtype: tensor.dtype(),
                    decl_shape: shape.to_vec(),
                });
            }
            let declaration = CompiledIntrin::new(intrin)?;
            Box::new(move |f| {
                let (output, inputs) = regions.split_last().expect("a call has an output operand");
                let mut arrays = inputs
                    .iter()
                    .map(|r| Ok(r.gather(f, &r.positions(f, Access::Read)?)))
                    .collect::<Result<Vec<_>, Fault>>()?;
                if let Some((first, last, segments)) = &range {
                    let count = segments.count;
                    let first = first(f, 0)?.as_int().clamp(0, count);
                    let last = last(f, 0)?.as_int().clamp(first, count);
                    // `A: [m, S, k]`, in row-major order.
                    let a = &mut arrays[0];
                    for p in 0..a.len() {
                        let s = (p as i64 / segments.k) % count;
                        if s < first || s >= last {
                            a.set(p, Scalar::Int(0));
                        }
                    }
                }
                let positions = output.positions(f, Access::Write)?;
                let mut out = output.gather(f, &positions);
                if let Some(identity) = reset_to {
                    (0..positions.len()).for_each(|p| out.set(p, identity));
                }
                declaration.apply(arrays, &mut out)?;
                let buffer = &mut f.buffers[output.slot];
                for (p, &i) in positions.iter().enumerate() {
                    buffer.set(i, out.get(p));
                }
                Ok(())
            })
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expr::{Expr, Var, VectorReduceOp};
    use crate::stmt::{Buffer, ForKind};

    fn idx(v: i64) -> Expr {
        Expr::index(v)
    }

    fn i32c(v: i64) -> Expr {
        Expr::int(DType::I32, v)
    }

    fn ramp(base: Expr, stride: i64, lanes: u16) -> Expr {
        Expr::ramp(base, idx(stride), lanes)
    }

    fn lp(var: &Var, extent: i64, kind: ForKind, body: Stmt) -> Stmt {
        Stmt::for_loop(var.clone(), extent, kind, body)
    }

    fn func(params: &[&Buffer], body: Stmt) -> Func {
        Func { name: "f".into(), params: params.iter().map(|b| (*b).clone()).collect(), body }
    }

    /// `C[i, j] = A[i, j] * 2 + B[j]` over a 3x4 grid, with multi-dimensional or flat accesses.
    fn affine(flat: bool) -> Func {
        let a = Buffer::new("A", DType::I32, vec![3, 4]);
        let b = Buffer::new("B", DType::I32, vec![4]);
        let c = Buffer::new("C", DType::I32, vec![3, 4]);
        let (i, j) = (Var::index("i"), Var::index("j"));
        let at = if flat { vec![i.to_expr() * 4 + j.to_expr()] } else { vec![i.to_expr(), j.to_expr()] };
        let value = Expr::load(&a, at.clone()) * i32c(2) + Expr::load(&b, vec![j.to_expr()]);
        let body = lp(&i, 3, ForKind::Parallel, lp(&j, 4, ForKind::Unrolled, Stmt::store(&c, at, value)));
        func(&[&a, &b, &c], body)
    }

    fn affine_args() -> Vec<Array> {
        vec![
            Array::from_i64(DType::I32, &[3, 4], &(0..12).map(|v| v * 7 - 40).collect::<Vec<_>>()),
            Array::from_i64(DType::I32, &[4], &[1, -2, 3, i32::MAX as i64]),
            Array::zeros(DType::I32, &[3, 4]),
        ]
    }

    #[test]
    fn scalar_loop_nest_with_multi_dim_accesses() {
        let mut args = affine_args();
        run_func(&affine(false), &mut args).unwrap();
        let (a, b) = (args[0].to_i64_vec(), args[1].to_i64_vec());
        let expected: Vec<i64> =
            (0..12).map(|p| (a[p] as i32).wrapping_mul(2).wrapping_add(b[p % 4] as i32) as i64).collect();
        assert_eq!(args[2].to_i64_vec(), expected);
    }

    #[test]
    fn flat_accesses_agree_with_multi_dim() {
        let (mut multi, mut flat) = (affine_args(), affine_args());
        run_func(&affine(false), &mut multi).unwrap();
        run_func(&affine(true), &mut flat).unwrap();
        assert!(multi[2].bits_eq(&flat[2]), "{:?}", multi[2].first_difference(&flat[2]));
        assert_ne!(flat[2].to_i64_vec(), vec![0; 12]);
    }

    #[test]
    fn vector_ramp_loads_and_stores() {
        let a = Buffer::new("A", DType::F32, vec![16]);
        let c = Buffer::new("C", DType::F32, vec![16]);
        let o = Var::index("o");
        let dense = ramp(o.to_expr() * 8, 1, 8);
        let two = Expr::broadcast(Expr::float(DType::F32, 2.0), 8);
        // C[o*8 .. o*8+8] = A[o*8 .. o*8+8] * 2 + A[o, o+2, .., o+14]
        let value = Expr::load(&a, vec![dense.clone()]) * two + Expr::load(&a, vec![ramp(o.to_expr(), 2, 8)]);
        let f = func(&[&a, &c], lp(&o, 2, ForKind::Vectorized, Stmt::store(&c, vec![dense], value)));
        let a_vals: Vec<f64> = (0..16).map(|v| v as f64 * 0.5 - 3.0).collect();
        let mut args = vec![Array::from_f64(DType::F32, &[16], &a_vals), Array::zeros(DType::F32, &[16])];
        run_func(&f, &mut args).unwrap();
        let expected: Vec<f64> = (0..16).map(|p| a_vals[p] * 2.0 + a_vals[p / 8 + 2 * (p % 8)]).collect();
        assert_eq!(args[1].to_f64_vec(), expected);
    }

    #[test]
    fn vector_reduce_dot_product_and_wrapping_groups() {
        let a = Buffer::new("A", DType::U8, vec![2, 8]);
        let b = Buffer::new("B", DType::I8, vec![8]);
        let c = Buffer::new("C", DType::I32, vec![2]);
        let d = Buffer::new("D", DType::I8, vec![4]);
        let i = Var::index("i");
        let lanes = ramp(idx(0), 1, 8);
        // Multi-dim vector load: a scalar row index and a vector column index.
        let prod = Expr::load(&a, vec![i.to_expr(), lanes.clone()]).cast(DType::I32)
            * Expr::load(&b, vec![lanes.clone()]).cast(DType::I32);
        let dot = Stmt::store(&c, vec![i.to_expr()], Expr::vector_reduce(VectorReduceOp::Add, prod, 1));
        // 8 i8 lanes of B folded into 2 lanes by wrapping add, and into 1 by max and min.
        let b_vec = Expr::load(&b, vec![lanes]);
        let groups =
            Stmt::store(&d, vec![ramp(idx(0), 1, 2)], Expr::vector_reduce(VectorReduceOp::Add, b_vec.clone(), 2));
        let hi = Stmt::store(&d, vec![idx(2)], Expr::vector_reduce(VectorReduceOp::Max, b_vec.clone(), 1));
        let lo = Stmt::store(&d, vec![idx(3)], Expr::vector_reduce(VectorReduceOp::Min, b_vec, 1));
        let body = Stmt::seq(vec![lp(&i, 2, ForKind::Serial, dot), groups, hi, lo]);
        let f = func(&[&a, &b, &c, &d], body);
        let a_vals: Vec<i64> = (0..16).map(|v| (v * 29 + 200) % 256).collect();
        let b_vals = [100, 100, 100, 100, -128, 127, -1, 5];
        let mut args = vec![
            Array::from_i64(DType::U8, &[2, 8], &a_vals),
            Array::from_i64(DType::I8, &[8], &b_vals),
            Array::zeros(DType::I32, &[2]),
            Array::zeros(DType::I8, &[4]),
        ];
        run_func(&f, &mut args).unwrap();
        let dot = |row: usize| (0..8).map(|k| a_vals[row * 8 + k] * b_vals[k]).sum::<i64>();
        assert_eq!(args[2].to_i64_vec(), vec![dot(0), dot(1)]);
        // 400 wraps to -112 in i8; -128 + 127 - 1 + 5 = 3.
        assert_eq!(args[3].to_i64_vec(), vec![-112, 3, 127, -128]);
    }

    #[test]
    fn vector_let_if_else_and_allocate() {
        let c = Buffer::new("C", DType::I32, vec![4]);
        let e = Buffer::new("E", DType::I32, vec![3]);
        let t = Buffer::new("T", DType::I32, vec![4]);
        let u = Buffer::new("U", DType::I32, vec![2]);
        let v = Var::new("v", DType::I32.with_lanes(4));
        let j = Var::index("j");
        // let v = [0, 3, 6, 9]; T[0..4] = v * v; C[j] = T[j] > 10 ? T[j] : -1 (as an if/else).
        let square = Stmt::store(&t, vec![ramp(idx(0), 1, 4)], v.to_expr() * v.to_expr());
        let t_j = Expr::load(&t, vec![j.to_expr()]);
        let branch = Stmt::new(StmtKind::If {
            cond: t_j.gt(i32c(10)),
            then_case: Stmt::store(&c, vec![j.to_expr()], t_j.clone()),
            else_case: Some(Stmt::store(&c, vec![j.to_expr()], i32c(-1))),
        });
        let fill = Stmt::seq(vec![square, lp(&j, 4, ForKind::Serial, branch)]);
        let vector_part = Stmt::let_stmt(v.clone(), Expr::ramp(i32c(0), i32c(3), 4), Stmt::allocate(t.clone(), fill));
        // An allocation inside a loop is fresh (zero) on every iteration: E[k] = (U[0] += 5).
        let k = Var::index("k");
        let u0 = Expr::load(&u, vec![idx(0)]);
        let bump = Stmt::seq(vec![
            Stmt::store(&u, vec![idx(0)], u0.clone() + i32c(5)),
            Stmt::store(&e, vec![k.to_expr()], Expr::load(&u, vec![idx(0)]) + Expr::load(&u, vec![idx(1)])),
        ]);
        let scalar_part = lp(&k, 3, ForKind::Serial, Stmt::allocate(u.clone(), bump));
        let f = func(&[&c, &e], Stmt::seq(vec![vector_part, scalar_part]));
        let mut args = vec![Array::zeros(DType::I32, &[4]), Array::zeros(DType::I32, &[3])];
        run_func(&f, &mut args).unwrap();
        assert_eq!(args[0].to_i64_vec(), vec![-1, -1, 36, 81]);
        assert_eq!(args[1].to_i64_vec(), vec![5, 5, 5]);
    }

    #[test]
    fn vector_store_reads_before_writing_and_writes_lanes_in_order() {
        let c = Buffer::new("C", DType::I64, vec![4]);
        let d = Buffer::new("D", DType::I64, vec![1]);
        let shift = Stmt::store(&c, vec![ramp(idx(1), 1, 3)], Expr::load(&c, vec![ramp(idx(0), 1, 3)]));
        let same_address = Stmt::store(&d, vec![Expr::broadcast(idx(0), 4)], ramp(idx(10), 1, 4));
        let f = func(&[&c, &d], Stmt::seq(vec![shift, same_address]));
        let mut args = vec![Array::from_i64(DType::I64, &[4], &[1, 2, 3, 4]), Array::zeros(DType::I64, &[1])];
        run_func(&f, &mut args).unwrap();
        assert_eq!(args[0].to_i64_vec(), vec![1, 1, 2, 3]);
        assert_eq!(args[1].to_i64_vec(), vec![13]);
    }

    #[test]
    fn vector_select_is_lane_wise_and_lazy() {
        let a = Buffer::new("A", DType::I32, vec![4]);
        let c = Buffer::new("C", DType::I32, vec![8]);
        let lanes = ramp(idx(0), 1, 8);
        // Lanes 4..8 would read A out of bounds; their condition is false, so they never do.
        let inside = lanes.lt(Expr::broadcast(idx(4), 8));
        let x = Expr::load(&a, vec![lanes.clone()]);
        let abs = Expr::select(x.gt(Expr::broadcast(i32c(0), 8)), x.clone(), Expr::broadcast(i32c(0), 8) - x);
        let value = Expr::select(inside, abs, Expr::broadcast(i32c(-1), 8));
        let f = func(&[&a, &c], Stmt::store(&c, vec![lanes], value));
        let mut args = vec![Array::from_i64(DType::I32, &[4], &[-5, 6, 0, -7]), Array::zeros(DType::I32, &[8])];
        run_func(&f, &mut args).unwrap();
        assert_eq!(args[1].to_i64_vec(), vec![5, 6, 0, 7, -1, -1, -1, -1]);
    }

    #[test]
    fn out_of_bounds_in_any_lane_is_a_typed_error() {
        let a = Buffer::new("A", DType::I32, vec![4]);
        let c = Buffer::new("C", DType::I32, vec![2, 3]);
        let read = func(&[&a, &c], Stmt::store(&c, vec![ramp(idx(0), 1, 4)], Expr::load(&a, vec![ramp(idx(1), 1, 4)])));
        let args = || vec![Array::zeros(DType::I32, &[4]), Array::zeros(DType::I32, &[2, 3])];
        let mut run_args = args();
        assert_eq!(
            run_func(&read, &mut run_args).unwrap_err(),
            InterpError::OutOfBounds { access: Access::Read, name: "A".into(), index: vec![4], shape: vec![4] }
        );
        // The arguments are handed back even when the run fails.
        assert_eq!(run_args[1].shape(), &[2, 3]);

        let i = Var::index("i");
        let write = func(&[&a, &c], lp(&i, 2, ForKind::Serial, Stmt::store(&c, vec![i.to_expr(), idx(3)], i32c(1))));
        let err = run_func(&write, &mut args()).unwrap_err();
        assert_eq!(
            err,
            InterpError::OutOfBounds { access: Access::Write, name: "C".into(), index: vec![0, 3], shape: vec![2, 3] }
        );
        let flat = func(&[&a, &c], Stmt::store(&c, vec![ramp(idx(3), 1, 4)], Expr::broadcast(i32c(1), 4)));
        let err = run_func(&flat, &mut args()).unwrap_err();
        assert_eq!(err.to_string(), "out-of-bounds write of C: flat index 6 (6 elements) is outside shape [2, 3]");
    }

    #[test]
    fn arguments_are_checked_before_running() {
        let f = affine(false);
        assert_eq!(
            run_func(&f, &mut affine_args()[..2].to_vec()).unwrap_err(),
            InterpError::ArgumentCount { func: "f".into(), expected: 3, found: 2 }
        );
        let mut args = affine_args();
        args[1] = Array::zeros(DType::I64, &[4]);
        assert_eq!(
            run_func(&f, &mut args).unwrap_err(),
            InterpError::ArgumentDType { name: "B".into(), expected: DType::I32, found: DType::I64 }
        );
        let mut args = affine_args();
        args[2] = Array::zeros(DType::I32, &[4, 3]);
        assert_eq!(
            run_func(&f, &mut args).unwrap_err(),
            InterpError::ArgumentShape { name: "C".into(), expected: vec![3, 4], found: vec![4, 3] }
        );
    }

    #[test]
    fn malformed_ir_is_reported() {
        let c = Buffer::new("C", DType::I64, vec![2]);
        let stray = Buffer::new("S", DType::I64, vec![2]);
        let x = Var::index("x");
        let unbound = func(&[&c], Stmt::store(&c, vec![idx(0)], x.to_expr()));
        let err = run_func(&unbound, &mut [Array::zeros(DType::I64, &[2])]).unwrap_err();
        assert!(matches!(&err, InterpError::Malformed { reason } if reason.contains("variable x")), "{err}");
        let unknown = func(&[&c], Stmt::store(&c, vec![idx(0)], Expr::load(&stray, vec![idx(0)])));
        let err = run_func(&unknown, &mut [Array::zeros(DType::I64, &[2])]).unwrap_err();
        assert!(matches!(&err, InterpError::Malformed { reason } if reason.contains("buffer S")), "{err}");
    }
}
