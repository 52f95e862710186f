//! Expressions. Each operator has a scalar form (the definition, matching `interp::scalar`)
//! and, where x64 has a fitting 128-bit instruction, a piece-wise vector form.
//!
//! Int8 dot products (`byte_dot`) are recognized whole: an exact u8 × i8 sum of four products
//! added to an i32 accumulator is emitted as the CLIF tree Cranelift folds into one `vpdpbusd`
//! on VNNI targets (and lowers to an exact widening sequence elsewhere); the saturating
//! VPMADDUBSW form, only when the expression itself saturates, as `x86_pmaddubsw`.

use rustc_hash::FxHashMap as HashMap;

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{InstBuilder, MemFlagsData, Type, Value, types};
use cranelift_module::Module;
use ir::expr::{BinOp, CmpOp, VectorReduceOp};
use ir::interp::scalar::{self, Scalar, int_value};
use ir::{Buffer, DType, Expr, ExprKind, ScalarType};

use super::cse::is_trivial;
use super::func::{BufLoc, FnTx};
use super::interleaved;
use super::types::{Val, is_pieces, lane_type, lanes_per_piece, piece_type};
use crate::error::CompileError;

/// The integer constant in every lane of `e`, if it is one (`Int` or `Broadcast(Int)`).
fn uniform_int(e: &Expr) -> Option<i64> {
    match e.kind() {
        ExprKind::Int(c) => Some(*c),
        ExprKind::Broadcast(x) => x.as_int(),
        _ => None,
    }
}

fn is_half(s: ScalarType) -> bool {
    matches!(s, ScalarType::F16 | ScalarType::BF16)
}

impl<M: Module> FnTx<'_, '_, '_, M> {
    /// Translates `e`, reusing an earlier translation of a structurally equal pure expression.
    pub fn expr(&mut self, e: &Expr) -> Result<Val, CompileError> {
        if is_trivial(e) {
            return self.translate_expr(e);
        }
        let number = self.cache.number(e, &self.cx.readonly);
        if let Some(v) = number.and_then(|n| self.cache.get(n)) {
            return Ok(v);
        }
        let v = self.translate_expr(e)?;
        if let Some(n) = number {
            self.cache.insert(n, v.clone());
        }
        Ok(v)
    }

    fn translate_expr(&mut self, e: &Expr) -> Result<Val, CompileError> {
        let dtype = e.dtype();
        match e.kind() {
            ExprKind::Int(v) => Ok(Val::scalar(self.iconst(lane_type(dtype.scalar), *v))),
            ExprKind::Float(f) => Ok(Val::scalar(match dtype.scalar {
                ScalarType::F32 => self.b.ins().f32const(*f as f32),
                ScalarType::F64 => self.b.ins().f64const(*f),
                ScalarType::F16 => self.iconst(types::I16, half::f16::from_f64(*f).to_bits() as i64),
                ScalarType::BF16 => self.iconst(types::I16, half::bf16::from_f64(*f).to_bits() as i64),
                other => return Err(self.unsupported(format!("float constant of type {other}"))),
            })),
            ExprKind::Var(v) => self
                .env
                .get(&v.id())
                .cloned()
                .ok_or_else(|| self.unsupported(format!("variable {} is not in scope", v.name()))),
            ExprKind::Binary(op, a, b) => self.binary(*op, dtype, a, b),
            ExprKind::Cmp(op, a, b) => self.compare(*op, a, b),
            ExprKind::Not(a) => {
                let v = self.expr(a)?;
                Ok(match v {
                    Val::Lanes(lanes) if dtype.is_bool() => {
                        Val::Lanes(lanes.into_iter().map(|x| self.b.ins().bxor_imm_u(x, 1)).collect())
                    }
                    Val::Lanes(parts) => Val::Lanes(parts.into_iter().map(|x| self.b.ins().bnot(x)).collect()),
                    Val::Pieces(parts) => Val::Pieces(parts.into_iter().map(|x| self.b.ins().bnot(x)).collect()),
                })
            }
            ExprKind::Cast(a) => {
                let v = self.expr(a)?;
                Ok(self.cast(v, a.dtype(), dtype.scalar, false))
            }
            ExprKind::SaturatingCast(a) => {
                let v = self.expr(a)?;
                Ok(self.cast(v, a.dtype(), dtype.scalar, true))
            }
            ExprKind::Round(a) => {
                let v = self.expr(a)?;
                self.round(dtype, v)
            }
            ExprKind::Sqrt(a) => {
                let v = self.expr(a)?;
                self.sqrt(dtype, v)
            }
            ExprKind::Reinterpret(a) => {
                let v = self.expr(a)?;
                self.reinterpret(a.dtype(), dtype, v)
            }
            ExprKind::Select(c, t, f) => self.select(dtype, c, t, f),
            ExprKind::Fma(a, b, c) => {
                let (a, b, c) = (self.expr(a)?, self.expr(b)?, self.expr(c)?);
                self.fma(dtype, a, b, c)
            }
            ExprKind::Load(buffer, indices) => match self.load_runs(dtype, buffer, indices)? {
                Some(v) => Ok(v),
                None => self.load(dtype, buffer, indices),
            },
            ExprKind::Ramp(base, stride) => self.ramp(dtype, base, stride),
            ExprKind::Broadcast(x) => {
                if x.dtype().is_vector() {
                    return Err(self.unsupported(format!("Broadcast of the vector {}", x.dtype())));
                }
                let x = self.expr(x)?.as_scalar();
                Ok(self.broadcast(dtype, x))
            }
            ExprKind::VectorReduce(op, x) => self.vector_reduce(*op, dtype, x),
            ExprKind::TensorRead(..) | ExprKind::Reduce(_) => {
                Err(self.unsupported("a tensor-expression node (TensorRead or Reduce)"))
            }
        }
    }

    fn binary(&mut self, op: BinOp, dtype: DType, a: &Expr, b: &Expr) -> Result<Val, CompileError> {
        if op == BinOp::Add
            && let Some(v) = self.byte_dot(dtype, a, b)?
        {
            return Ok(v);
        }
        if op == BinOp::Mul
            && let Some(v) = self.byte_mul(dtype, a, b)?
        {
            return Ok(v);
        }
        let s = dtype.scalar;
        if s.is_float() && matches!(op, BinOp::And | BinOp::Or | BinOp::Xor | BinOp::Shl | BinOp::Shr) {
            return Err(self.unsupported(format!("operator {} on {dtype}", op.symbol())));
        }
        if s.is_int() && matches!(op, BinOp::Div | BinOp::Mod) {
            // Floor division by a positive power of two is an arithmetic shift, modulo a mask.
            let c = uniform_int(b).map(|c| int_value(s, c));
            if let Some(c) = c.filter(|c| *c > 0 && (*c as u128).is_power_of_two()) {
                let x = self.expr(a)?;
                return Ok(self.map_parts(x, |tx, p, ty| match op {
                    BinOp::Div => {
                        let k = tx.iconst(types::I32, c.trailing_zeros() as i64);
                        if s.is_signed_int() { tx.b.ins().sshr(p, k) } else { tx.b.ins().ushr(p, k) }
                    }
                    _ => {
                        let m = tx.iconst(ty.lane_type(), (c - 1) as i64);
                        let m = if ty.is_vector() { tx.b.ins().splat(ty, m) } else { m };
                        tx.b.ins().band(p, m)
                    }
                }));
            }
        }
        if s.is_int() && matches!(op, BinOp::Shl | BinOp::Shr) && is_pieces(dtype) {
            // Vector shifts take one amount for all lanes.
            if let ExprKind::Broadcast(amount) = b.kind() {
                let x = self.expr(a)?;
                let amount = self.expr(amount)?.as_scalar();
                return Ok(self.map_parts(x, |tx, p, _| match op {
                    BinOp::Shl => tx.b.ins().ishl(p, amount),
                    _ if s.is_signed_int() => tx.b.ins().sshr(p, amount),
                    _ => tx.b.ins().ushr(p, amount),
                }));
            }
        }
        let x = self.expr(a)?;
        let y = self.expr(b)?;
        Ok(self.binary_vals(op, dtype, x, y))
    }

    /// Applies `f(part, type of part)` to every lane or piece.
    fn map_parts(&mut self, v: Val, mut f: impl FnMut(&mut Self, Value, Type) -> Value) -> Val {
        let mut map = |tx: &mut Self, parts: Vec<Value>| {
            parts
                .into_iter()
                .map(|p| {
                    let ty = tx.b.func.dfg.value_type(p);
                    f(tx, p, ty)
                })
                .collect()
        };
        match v {
            Val::Lanes(parts) => Val::Lanes(map(self, parts)),
            Val::Pieces(parts) => Val::Pieces(map(self, parts)),
        }
    }

    /// `x op y` on translated values of `dtype`.
    pub fn binary_vals(&mut self, op: BinOp, dtype: DType, x: Val, y: Val) -> Val {
        let s = dtype.scalar;
        if is_half(s) {
            // Exactly `interp::scalar::binary`: compute in f64, round once to the 16-bit type.
            let wide = DType::F64.with_lanes(dtype.lanes);
            let x = self.cast(x, dtype, ScalarType::F64, false);
            let y = self.cast(y, dtype, ScalarType::F64, false);
            let r = self.binary_vals(op, wide, x, y);
            return self.cast(r, wide, s, false);
        }
        let (x, y) = (self.natural(x, dtype), self.natural(y, dtype));
        if let (Val::Pieces(xs), Val::Pieces(ys)) = (&x, &y)
            && let Some(r) = self.vector_binary(op, s, xs, ys)
        {
            return Val::Pieces(r);
        }
        let xl = self.lanes(&x, dtype);
        let yl = self.lanes(&y, dtype);
        let r: Vec<Value> = xl.into_iter().zip(yl).map(|(x, y)| self.scalar_binary(op, s, x, y)).collect();
        self.pack_lanes(dtype, &r)
    }

    fn vector_binary(&mut self, op: BinOp, s: ScalarType, xs: &[Value], ys: &[Value]) -> Option<Vec<Value>> {
        let pty = piece_type(s);
        let mut out = Vec::with_capacity(xs.len());
        for (&x, &y) in xs.iter().zip(ys) {
            let r = if s.is_bool() {
                match op {
                    BinOp::And | BinOp::Min | BinOp::Mul | BinOp::Div => self.b.ins().band(x, y),
                    BinOp::Or | BinOp::Max | BinOp::Add => self.b.ins().bor(x, y),
                    BinOp::Xor | BinOp::Sub => self.b.ins().bxor(x, y),
                    BinOp::Shl => x,
                    BinOp::Shr => self.b.ins().band_not(x, y),
                    BinOp::Mod => self.vconst(pty, [0; 16]),
                }
            } else if s.is_int() {
                match op {
                    BinOp::Add => self.b.ins().iadd(x, y),
                    BinOp::Sub => self.b.ins().isub(x, y),
                    BinOp::Mul if pty == types::I8X16 => {
                        // No byte multiply on x64: multiply 16-bit halves and keep the low bytes.
                        let lo = {
                            let (a, b) = (self.b.ins().swiden_low(x), self.b.ins().swiden_low(y));
                            self.b.ins().imul(a, b)
                        };
                        let hi = {
                            let (a, b) = (self.b.ins().swiden_high(x), self.b.ins().swiden_high(y));
                            self.b.ins().imul(a, b)
                        };
                        self.narrow_wrap(&[lo, hi])[0]
                    }
                    BinOp::Mul => self.b.ins().imul(x, y),
                    BinOp::And => self.b.ins().band(x, y),
                    BinOp::Or => self.b.ins().bor(x, y),
                    BinOp::Xor => self.b.ins().bxor(x, y),
                    BinOp::Min if s.is_signed_int() => self.b.ins().smin(x, y),
                    BinOp::Min => self.b.ins().umin(x, y),
                    BinOp::Max if s.is_signed_int() => self.b.ins().smax(x, y),
                    BinOp::Max => self.b.ins().umax(x, y),
                    BinOp::Div | BinOp::Mod | BinOp::Shl | BinOp::Shr => return None,
                }
            } else {
                match op {
                    BinOp::Add => self.b.ins().fadd(x, y),
                    BinOp::Sub => self.b.ins().fsub(x, y),
                    BinOp::Mul => self.b.ins().fmul(x, y),
                    BinOp::Div => self.b.ins().fdiv(x, y),
                    BinOp::Min | BinOp::Max => self.float_min_max(op == BinOp::Max, x, y),
                    BinOp::Mod if s == ScalarType::F64 => self.float_floor_mod(x, y),
                    _ => return None,
                }
            };
            out.push(r);
        }
        Some(out)
    }

    /// `interp::scalar::round`: Cranelift's `nearest` (round to nearest, ties to even; `roundss`
    /// / `roundps` with SSE4.1) on every f32/f64 lane or 128-bit piece. f16 and bf16 round in
    /// f64 and convert back, which is exact: the rounded value of a 16-bit float is again one.
    fn round(&mut self, dtype: DType, v: Val) -> Result<Val, CompileError> {
        let s = dtype.scalar;
        if is_half(s) {
            let wide = DType::F64.with_lanes(dtype.lanes);
            let x = self.cast(v, dtype, ScalarType::F64, false);
            let r = self.round(wide, x)?;
            return Ok(self.cast(r, wide, s, false));
        }
        if !s.is_float() {
            return Err(self.unsupported(format!("round of {dtype} (defined on floats only)")));
        }
        Ok(self.map_parts(v, |tx, p, _| tx.b.ins().nearest(p)))
    }

    /// `interp::scalar::sqrt`: Cranelift's `sqrt` (`sqrtss`/`sqrtps`, correctly rounded) on
    /// every f32/f64 lane or piece; f16 and bf16 take the f64 root and round once, as the
    /// interpreter does.
    fn sqrt(&mut self, dtype: DType, v: Val) -> Result<Val, CompileError> {
        let s = dtype.scalar;
        if is_half(s) {
            let wide = DType::F64.with_lanes(dtype.lanes);
            let x = self.cast(v, dtype, ScalarType::F64, false);
            let r = self.sqrt(wide, x)?;
            return Ok(self.cast(r, wide, s, false));
        }
        if !s.is_float() {
            return Err(self.unsupported(format!("sqrt of {dtype} (defined on floats only)")));
        }
        Ok(self.map_parts(v, |tx, p, _| tx.b.ins().sqrt(p)))
    }

    /// `interp::scalar::fma`: Cranelift's `fma`, rounded once. With FMA (AVX2 and up) it is one
    /// `vfmadd` per piece; below, lane by lane, where Cranelift calls the C library's `fmaf`/`fma`
    /// (correctly rounded too).
    fn fma(&mut self, dtype: DType, a: Val, b: Val, c: Val) -> Result<Val, CompileError> {
        if !matches!(dtype.scalar, ScalarType::F32 | ScalarType::F64) {
            return Err(self.unsupported(format!("fma of {dtype} (defined on f32 and f64 only)")));
        }
        if self.cx.level >= crate::isa::IsaLevel::Avx2
            && let (Val::Pieces(xs), Val::Pieces(ys), Val::Pieces(zs)) = (&a, &b, &c)
        {
            let r = xs.iter().zip(ys).zip(zs).map(|((&x, &y), &z)| self.b.ins().fma(x, y, z)).collect();
            return Ok(Val::Pieces(r));
        }
        let (xl, yl, zl) = (self.lanes(&a, dtype), self.lanes(&b, dtype), self.lanes(&c, dtype));
        let r: Vec<Value> = xl.into_iter().zip(yl).zip(zl).map(|((x, y), z)| self.b.ins().fma(x, y, z)).collect();
        Ok(self.pack_lanes(dtype, &r))
    }

    /// `interp::scalar::reinterpret`: a bitcast of every lane or piece. f16/bf16 already live as
    /// their raw bits in an I16, so between 16-bit types (and between integer types of one
    /// width) the value is unchanged.
    fn reinterpret(&mut self, from: DType, to: DType, v: Val) -> Result<Val, CompileError> {
        if from.bits() != to.bits() || from.is_bool() || to.is_bool() || from.lanes != to.lanes {
            return Err(self.unsupported(format!("reinterpret of {from} as {to}")));
        }
        Ok(match v {
            Val::Pieces(parts) => {
                let ty = piece_type(to.scalar);
                Val::Pieces(parts.into_iter().map(|p| self.bitcast_vec(p, ty)).collect())
            }
            Val::Lanes(parts) => {
                let ty = lane_type(to.scalar);
                let flags = MemFlagsData::new();
                Val::Lanes(
                    parts
                        .into_iter()
                        .map(
                            |p| {
                                if self.b.func.dfg.value_type(p) == ty { p } else { self.b.ins().bitcast(ty, flags, p) }
                            },
                        )
                        .collect(),
                )
            }
        })
    }

    /// Rust's `f64::min`/`max` as `interp::scalar` uses them: a NaN operand yields the other
    /// operand, and on ties (including +0 vs -0) the first operand.
    fn float_min_max(&mut self, max: bool, x: Value, y: Value) -> Value {
        let cc = if max { FloatCC::GreaterThan } else { FloatCC::LessThan };
        let better = self.b.ins().fcmp(cc, y, x);
        let x_nan = self.b.ins().fcmp(FloatCC::Unordered, x, x);
        let take_y = self.b.ins().bor(better, x_nan);
        let ty = self.b.func.dfg.value_type(x);
        if ty.is_vector() {
            let mask = self.bitcast_vec(take_y, ty);
            self.b.ins().bitselect(mask, y, x)
        } else {
            self.b.ins().select(take_y, y, x)
        }
    }

    /// `x - y * floor(x / y)` in f64, in the interpreter's order of operations.
    fn float_floor_mod(&mut self, x: Value, y: Value) -> Value {
        let q = self.b.ins().fdiv(x, y);
        let f = self.b.ins().floor(q);
        let p = self.b.ins().fmul(y, f);
        self.b.ins().fsub(x, p)
    }

    fn scalar_binary(&mut self, op: BinOp, s: ScalarType, x: Value, y: Value) -> Value {
        if s.is_bool() {
            return match op {
                BinOp::And | BinOp::Min | BinOp::Mul | BinOp::Div => self.b.ins().band(x, y),
                BinOp::Or | BinOp::Max | BinOp::Add => self.b.ins().bor(x, y),
                BinOp::Xor | BinOp::Sub => self.b.ins().bxor(x, y),
                BinOp::Shl => x,
                BinOp::Shr => self.b.ins().band_not(x, y),
                BinOp::Mod => self.iconst(types::I8, 0),
            };
        }
        if s.is_float() {
            return match op {
                BinOp::Add => self.b.ins().fadd(x, y),
                BinOp::Sub => self.b.ins().fsub(x, y),
                BinOp::Mul => self.b.ins().fmul(x, y),
                BinOp::Div => self.b.ins().fdiv(x, y),
                BinOp::Min | BinOp::Max => self.float_min_max(op == BinOp::Max, x, y),
                BinOp::Mod if s == ScalarType::F32 => {
                    let (x, y) = (self.b.ins().fpromote(types::F64, x), self.b.ins().fpromote(types::F64, y));
                    let r = self.float_floor_mod(x, y);
                    self.b.ins().fdemote(types::F32, r)
                }
                BinOp::Mod => self.float_floor_mod(x, y),
                _ => unreachable!("bitwise operators on floats are rejected in `binary`"),
            };
        }
        let signed = s.is_signed_int();
        match op {
            BinOp::Add => self.b.ins().iadd(x, y),
            BinOp::Sub => self.b.ins().isub(x, y),
            BinOp::Mul => self.b.ins().imul(x, y),
            BinOp::And => self.b.ins().band(x, y),
            BinOp::Or => self.b.ins().bor(x, y),
            BinOp::Xor => self.b.ins().bxor(x, y),
            BinOp::Min if signed => self.b.ins().smin(x, y),
            BinOp::Min => self.b.ins().umin(x, y),
            BinOp::Max if signed => self.b.ins().smax(x, y),
            BinOp::Max => self.b.ins().umax(x, y),
            // Cranelift takes shift amounts modulo the width, as the IR does.
            BinOp::Shl => self.b.ins().ishl(x, y),
            BinOp::Shr if signed => self.b.ins().sshr(x, y),
            BinOp::Shr => self.b.ins().ushr(x, y),
            BinOp::Div | BinOp::Mod => self.int_div_mod(op == BinOp::Div, s, x, y),
        }
    }

    /// Floor division or modulo with `x / 0 == x % 0 == 0` and `MIN / -1 == MIN`. The divisor
    /// given to the machine instruction is never 0 or -1, so it can never trap.
    fn int_div_mod(&mut self, div: bool, s: ScalarType, x: Value, y: Value) -> Value {
        let ty = lane_type(s);
        let signed = s.is_signed_int();
        // 8- and 16-bit operands are divided as i32; the result wraps back exactly.
        let (x, y, wty) = if s.bits() < 32 {
            let ext = |tx: &mut Self, v| {
                if signed { tx.b.ins().sextend(types::I32, v) } else { tx.b.ins().uextend(types::I32, v) }
            };
            (ext(self, x), ext(self, y), types::I32)
        } else {
            (x, y, ty)
        };
        let zero = self.iconst(wty, 0);
        let one = self.iconst(wty, 1);
        let y_zero = self.b.ins().icmp_imm_s(IntCC::Equal, y, 0);
        let r = if signed {
            let y_m1 = self.b.ins().icmp_imm_s(IntCC::Equal, y, -1);
            let bad = self.b.ins().bor(y_zero, y_m1);
            let d = self.b.ins().select(bad, one, y);
            let q = self.b.ins().sdiv(x, d);
            let rem = self.b.ins().srem(x, d);
            // Truncated to floor: adjust when the remainder is non-zero with the divisor's
            // opposite sign.
            let rem_nz = self.b.ins().icmp_imm_s(IntCC::NotEqual, rem, 0);
            let signs = self.b.ins().bxor(rem, d);
            let opposite = self.b.ins().icmp_imm_s(IntCC::SignedLessThan, signs, 0);
            let adjust = self.b.ins().band(rem_nz, opposite);
            if div {
                let q1 = self.b.ins().iadd_imm_s(q, -1);
                let q = self.b.ins().select(adjust, q1, q);
                let neg = self.b.ins().ineg(x);
                let q = self.b.ins().select(y_m1, neg, q);
                self.b.ins().select(y_zero, zero, q)
            } else {
                let r1 = self.b.ins().iadd(rem, d);
                let rem = self.b.ins().select(adjust, r1, rem);
                self.b.ins().select(y_zero, zero, rem)
            }
        } else {
            let d = self.b.ins().select(y_zero, one, y);
            let r = if div { self.b.ins().udiv(x, d) } else { self.b.ins().urem(x, d) };
            self.b.ins().select(y_zero, zero, r)
        };
        if wty == ty { r } else { self.b.ins().ireduce(ty, r) }
    }

    fn compare(&mut self, op: CmpOp, a: &Expr, b: &Expr) -> Result<Val, CompileError> {
        let dtype = a.dtype();
        let out = DType::BOOL.with_lanes(dtype.lanes);
        let mut x = self.expr(a)?;
        let mut y = self.expr(b)?;
        let mut s = dtype.scalar;
        if is_half(s) {
            x = self.cast(x, dtype, ScalarType::F64, false);
            y = self.cast(y, dtype, ScalarType::F64, false);
            s = ScalarType::F64;
        }
        let dtype = DType { scalar: s, lanes: dtype.lanes };
        let (x, y) = (self.natural(x, dtype), self.natural(y, dtype));
        let cmp = |tx: &mut Self, x, y| {
            if s.is_float() {
                let cc = match op {
                    CmpOp::Eq => FloatCC::Equal,
                    CmpOp::Ne => FloatCC::NotEqual,
                    CmpOp::Lt => FloatCC::LessThan,
                    CmpOp::Le => FloatCC::LessThanOrEqual,
                    CmpOp::Gt => FloatCC::GreaterThan,
                    CmpOp::Ge => FloatCC::GreaterThanOrEqual,
                };
                tx.b.ins().fcmp(cc, x, y)
            } else {
                let signed = s.is_signed_int();
                let cc = match op {
                    CmpOp::Eq => IntCC::Equal,
                    CmpOp::Ne => IntCC::NotEqual,
                    CmpOp::Lt if signed => IntCC::SignedLessThan,
                    CmpOp::Lt => IntCC::UnsignedLessThan,
                    CmpOp::Le if signed => IntCC::SignedLessThanOrEqual,
                    CmpOp::Le => IntCC::UnsignedLessThanOrEqual,
                    CmpOp::Gt if signed => IntCC::SignedGreaterThan,
                    CmpOp::Gt => IntCC::UnsignedGreaterThan,
                    CmpOp::Ge if signed => IntCC::SignedGreaterThanOrEqual,
                    CmpOp::Ge => IntCC::UnsignedGreaterThanOrEqual,
                };
                tx.b.ins().icmp(cc, x, y)
            }
        };
        if let (Val::Pieces(xs), Val::Pieces(ys)) = (&x, &y) {
            // Vector compares produce lane masks as wide as their operands.
            let masks = xs.iter().zip(ys).map(|(&x, &y)| cmp(self, x, y)).collect();
            return Ok(Val::Pieces(masks));
        }
        let xl = self.lanes(&x, dtype);
        let yl = self.lanes(&y, dtype);
        let r: Vec<Value> = xl.into_iter().zip(yl).map(|(x, y)| cmp(self, x, y)).collect();
        Ok(self.pack_lanes(out, &r))
    }

    fn select(&mut self, dtype: DType, c: &Expr, t: &Expr, f: &Expr) -> Result<Val, CompileError> {
        if !c.dtype().is_bool() || (c.dtype().is_vector() && c.dtype().lanes != dtype.lanes) {
            return Err(self.unsupported(format!("Select with a {} condition and {dtype} arms", c.dtype())));
        }
        let tv = self.expr(t)?;
        let tv = self.natural(tv, dtype);
        let fv = self.expr(f)?;
        let fv = self.natural(fv, dtype);
        let scalar_cond = match c.kind() {
            _ if c.dtype().is_scalar() => Some(self.expr(c)?.as_scalar()),
            ExprKind::Broadcast(inner) => Some(self.expr(inner)?.as_scalar()),
            _ => None,
        };
        if let Some(cv) = scalar_cond {
            let parts = tv.parts().iter().zip(fv.parts()).map(|(&t, &f)| self.b.ins().select(cv, t, f)).collect();
            return Ok(match tv {
                Val::Lanes(_) => Val::Lanes(parts),
                Val::Pieces(_) => Val::Pieces(parts),
            });
        }
        let cv = self.expr(c)?;
        match (&tv, &fv) {
            (Val::Pieces(ts), Val::Pieces(fs)) => {
                let masks = self.masks(cv, c.dtype(), dtype.bits());
                let r = masks
                    .into_iter()
                    .zip(ts.iter().zip(fs))
                    .map(|(m, (&t, &f))| {
                        let ty = self.b.func.dfg.value_type(t);
                        let m = self.bitcast_vec(m, ty);
                        self.b.ins().bitselect(m, t, f)
                    })
                    .collect();
                Ok(Val::Pieces(r))
            }
            _ => {
                let cl = self.lanes(&cv, c.dtype());
                let tl = self.lanes(&tv, dtype);
                let fl = self.lanes(&fv, dtype);
                let r: Vec<Value> = cl
                    .into_iter()
                    .zip(tl.into_iter().zip(fl))
                    .map(|(c, (t, f))| self.b.ins().select(c, t, f))
                    .collect();
                Ok(self.pack_lanes(dtype, &r))
            }
        }
    }

    fn ramp(&mut self, dtype: DType, base: &Expr, stride: &Expr) -> Result<Val, CompileError> {
        let s = dtype.scalar;
        let b = self.expr(base)?.as_scalar();
        if !dtype.is_int() {
            // Lane j is `base + cast(j) * stride` with the element type's arithmetic.
            let st = self.expr(stride)?;
            let elem = dtype.element();
            let lanes: Vec<Value> = (0..dtype.lanes as i64)
                .map(|j| {
                    let j = Val::scalar(self.iconst(types::I64, j));
                    let j = self.cast(j, DType::I64, s, false);
                    let offset = self.binary_vals(BinOp::Mul, elem, j, st.clone());
                    self.binary_vals(BinOp::Add, elem, Val::scalar(b), offset).as_scalar()
                })
                .collect();
            return Ok(self.pack_lanes(dtype, &lanes));
        }
        if let (true, Some(c)) = (is_pieces(dtype), stride.as_int()) {
            // Each piece is splat(base) plus a constant vector of offsets.
            let n = lanes_per_piece(s) as i64;
            let pty = piece_type(s);
            let splat = self.b.ins().splat(pty, b);
            let pieces = (0..dtype.lanes as i64 / n)
                .map(|k| {
                    let offsets: Vec<i64> = (0..n).map(|j| (k * n + j).wrapping_mul(c)).collect();
                    let offsets = self.vconst_ints(pty, &offsets);
                    self.b.ins().iadd(splat, offsets)
                })
                .collect();
            return Ok(Val::Pieces(pieces));
        }
        let lanes: Vec<Value> = match stride.as_int() {
            Some(c) => (0..dtype.lanes as i64).map(|j| self.b.ins().iadd_imm_s(b, j.wrapping_mul(c))).collect(),
            None => {
                let st = self.expr(stride)?.as_scalar();
                (0..dtype.lanes as i64)
                    .map(|j| {
                        let step = self.b.ins().imul_imm_s(st, j);
                        self.b.ins().iadd(b, step)
                    })
                    .collect()
            }
        };
        Ok(self.pack_lanes(dtype, &lanes))
    }

    fn vector_reduce(&mut self, op: VectorReduceOp, dtype: DType, x: &Expr) -> Result<Val, CompileError> {
        let in_dtype = x.dtype();
        let (l, m) = (in_dtype.lanes, dtype.lanes);
        if l % m != 0 {
            return Err(self.unsupported(format!("VectorReduce of {in_dtype} to {dtype}")));
        }
        let group = (l / m) as usize;
        let v = self.expr(x)?;
        if group == 1 {
            return Ok(v);
        }
        let s = dtype.scalar;
        if let Val::Pieces(pieces) = &v {
            let n = lanes_per_piece(s);
            if op == VectorReduceOp::Add && s.is_int() && s.bits() <= 32 && group.is_power_of_two() && m % n == 0 {
                // Wrapping integer addition is associative: sum adjacent pairs until each
                // output lane holds its group.
                let mut pieces = pieces.clone();
                for _ in 0..group.trailing_zeros() {
                    pieces = pieces.chunks(2).map(|p| self.b.ins().iadd_pairwise(p[0], p[1])).collect();
                }
                return Ok(Val::Pieces(pieces));
            }
        }
        // Left fold of each group, in lane order.
        let bin = match op {
            VectorReduceOp::Add => BinOp::Add,
            VectorReduceOp::Min => BinOp::Min,
            VectorReduceOp::Max => BinOp::Max,
        };
        let lanes = self.lanes(&v, in_dtype);
        let elem = dtype.element();
        let mut out = Vec::with_capacity(m as usize);
        for chunk in lanes.chunks(group) {
            let mut acc = chunk[0];
            for &next in &chunk[1..] {
                acc = self.binary_vals(bin, elem, Val::scalar(acc), Val::scalar(next)).as_scalar();
            }
            out.push(acc);
        }
        Ok(self.pack_lanes(dtype, &out))
    }
}

/// True if every value of the integer type `from` is a value of `to` (the cast is exact).
fn widens(from: DType, to: DType) -> bool {
    match (from.scalar.int_range(), to.scalar.int_range()) {
        (Some((flo, fhi)), Some((tlo, thi))) => tlo <= flo && fhi <= thi,
        _ => false,
    }
}

/// The bytes `x` and whether they are signed, if `e` is `x` converted by exact integer casts.
fn byte_operand(e: &Expr) -> Option<(&Expr, bool)> {
    let mut x = e;
    while let ExprKind::Cast(inner) | ExprKind::SaturatingCast(inner) = x.kind()
        && widens(inner.dtype(), x.dtype())
    {
        x = inner;
    }
    match x.dtype().scalar {
        ScalarType::U8 => Some((x, false)),
        ScalarType::I8 => Some((x, true)),
        _ => None,
    }
}

/// `(u, s)` if `e` is the exact i32 product of unsigned bytes `u` and signed bytes `s`, in
/// either order.
fn byte_product(e: &Expr) -> Option<(&Expr, &Expr)> {
    let ExprKind::Binary(BinOp::Mul, p, q) = e.kind() else {
        return None;
    };
    if e.dtype().scalar != ScalarType::I32 {
        return None;
    }
    match (byte_operand(p)?, byte_operand(q)?) {
        ((u, false), (s, true)) | ((s, true), (u, false)) => Some((u, s)),
        _ => None,
    }
}

/// `(u, s)` if `e`, of dtype `out`, is `vector_reduce_add(u * s, out.lanes)` of exact byte
/// products (`byte_product`), 4 per output lane.
fn quad_products(e: &Expr, out: DType) -> Option<(&Expr, &Expr)> {
    match e.kind() {
        ExprKind::VectorReduce(VectorReduceOp::Add, x) if x.dtype().lanes == 4 * out.lanes => byte_product(x),
        _ => None,
    }
}

/// `[(u, s); 2]` if `e`, of dtype `out`, is
/// `vector_reduce_add(i32(sat_i16(u*s + u'*s')), out.lanes)` of exact byte products with two
/// saturated pair sums per output lane: VPMADDUBSW then a pairwise add.
fn saturated_pair_products(e: &Expr, out: DType) -> Option<[(&Expr, &Expr); 2]> {
    let ExprKind::VectorReduce(VectorReduceOp::Add, x) = e.kind() else {
        return None;
    };
    let ExprKind::Cast(pairs) = x.kind() else {
        return None;
    };
    let ExprKind::SaturatingCast(sum) = pairs.kind() else {
        return None;
    };
    let ExprKind::Binary(BinOp::Add, p, q) = sum.kind() else {
        return None;
    };
    let shape = x.dtype().lanes == 2 * out.lanes
        && pairs.dtype().scalar == ScalarType::I16
        && sum.dtype().scalar == ScalarType::I32;
    shape.then_some([byte_product(p)?, byte_product(q)?])
}

/// `index` as a lane-invariant scalar (`None` for 0) plus a constant offset per lane, when it
/// is built from ramps with constant strides, broadcasts, `+`, and `*`, `/`, `%` of offsets by
/// constants.
fn lane_offsets(index: &Expr) -> Option<(Option<&Expr>, Vec<i64>)> {
    /// A scalar base as its non-constant part and a constant (simplified indices end in one).
    fn constant_or(base: &Expr) -> (Option<&Expr>, i64) {
        match base.kind() {
            ExprKind::Int(c) => (None, *c),
            ExprKind::Binary(op @ (BinOp::Add | BinOp::Sub), x, c) if base.dtype() == DType::INDEX => {
                match c.as_int() {
                    Some(c) if *op == BinOp::Add => (Some(x), c),
                    Some(c) => (Some(x), c.wrapping_neg()),
                    None => (Some(base), 0),
                }
            }
            _ => (Some(base), 0),
        }
    }
    let n = index.dtype().lanes as i64;
    match index.kind() {
        ExprKind::Ramp(base, stride) => {
            let (base, c) = constant_or(base);
            let s = stride.as_int()?;
            Some((base, (0..n).map(|l| c.wrapping_add(l.wrapping_mul(s))).collect()))
        }
        ExprKind::Broadcast(base) => {
            let (base, c) = constant_or(base);
            Some((base, vec![c; n as usize]))
        }
        ExprKind::Binary(BinOp::Add, x, y) => {
            let ((bx, ox), (by, oy)) = (lane_offsets(x)?, lane_offsets(y)?);
            let base = match (bx, by) {
                (Some(_), Some(_)) => return None,
                (b, None) | (None, b) => b,
            };
            Some((base, ox.iter().zip(&oy).map(|(a, b)| a.wrapping_add(*b)).collect()))
        }
        ExprKind::Binary(op @ (BinOp::Mul | BinOp::Div | BinOp::Mod), x, y) => {
            let c = uniform_int(y)?;
            let (None, offsets) = lane_offsets(x)? else {
                return None;
            };
            let apply = |o: i64| scalar::binary(*op, ScalarType::I64, Scalar::Int(o), Scalar::Int(c)).as_int();
            Some((None, offsets.into_iter().map(apply).collect()))
        }
        _ => None,
    }
}

impl<M: Module> FnTx<'_, '_, '_, M> {
    /// `acc + dot` (either order) for an int8 dot product `dot` into i32 lanes (a multiple of 4,
    /// so whole pieces), translated as a whole; `None` for any other addition.
    ///
    /// Exact `vector_reduce_add(i32(u8) * i32(i8), n/4)` (`quad_products`) becomes, per 128-bit
    /// piece, `iadd(iadd_pairwise(iadd_pairwise(swiden_low lo, swiden_high lo),
    /// iadd_pairwise(swiden_low hi, swiden_high hi)), acc)` with `lo = imul(swiden_low s,
    /// uwiden_low u)` and `hi` likewise: exact (each i16 product of a u8 and an i8 fits, so do
    /// the sums in i32, and `acc +` wraps as the IR's does), and exactly the tree, operand order
    /// included, that Cranelift folds into one `vpdpbusd` with AVX-VNNI or AVX512-VNNI+VL.
    ///
    /// Saturating `vector_reduce_add(i32(sat_i16(pair sums)), n/2)` (`saturated_pair_products`)
    /// is what VPMADDUBSW computes: `x86_pmaddubsw` on the interleaved bytes, then the pairwise
    /// add of its i16 lanes and `acc`. An exact dot product never takes this form.
    fn byte_dot(&mut self, dtype: DType, a: &Expr, b: &Expr) -> Result<Option<Val>, CompileError> {
        if dtype.scalar != ScalarType::I32 || !dtype.lanes.is_multiple_of(4) {
            return Ok(None);
        }
        for (acc, dot) in [(a, b), (b, a)] {
            if let Some((u, s)) = quad_products(dot, dtype) {
                let (acc, u, s) = (self.expr(acc)?, self.expr(u)?, self.expr(s)?);
                let pieces = acc.parts().iter().zip(u.parts().iter().zip(s.parts()));
                let r = pieces.map(|(&acc, (&u, &s))| self.dot_piece(u, s, acc)).collect();
                return Ok(Some(Val::Pieces(r)));
            }
            if let Some([(u0, s0), (u1, s1)]) = saturated_pair_products(dot, dtype) {
                let acc = self.expr(acc)?;
                let u = self.interleave_bytes(u0, u1)?;
                let s = self.interleave_bytes(s0, s1)?;
                let pieces = acc.parts().iter().zip(u.parts().iter().zip(s.parts()));
                let r = pieces
                    .map(|(&acc, (&u, &s))| {
                        let pairs = self.b.ins().x86_pmaddubsw(s, u);
                        let (lo, hi) = (self.b.ins().swiden_low(pairs), self.b.ins().swiden_high(pairs));
                        let quads = self.b.ins().iadd_pairwise(lo, hi);
                        self.b.ins().iadd(quads, acc)
                    })
                    .collect();
                return Ok(Some(Val::Pieces(r)));
            }
        }
        Ok(None)
    }

    /// `i32(u) * i32(s)` of unsigned bytes `u` and signed bytes `s`, 16 lanes at a time, as
    /// 16-bit products (`pmullw`) sign-extended to i32: every such product lies in
    /// `-32640..=32385`, so the 16-bit product is exact and cheaper than four 32-bit multiplies
    /// of bytes widened twice. `None` where the operands are not such bytes or the lanes do not
    /// fill byte pieces (the general multiply, its slow twin, applies).
    fn byte_mul(&mut self, dtype: DType, a: &Expr, b: &Expr) -> Result<Option<Val>, CompileError> {
        if dtype.scalar != ScalarType::I32 || !dtype.lanes.is_multiple_of(16) {
            return Ok(None);
        }
        let (u, s) = match (byte_operand(a), byte_operand(b)) {
            (Some((u, false)), Some((s, true))) | (Some((s, true)), Some((u, false))) => (u, s),
            _ => return Ok(None),
        };
        let (Val::Pieces(us), Val::Pieces(ss)) = (self.expr(u)?, self.expr(s)?) else {
            return Ok(None);
        };
        let mut out = Vec::with_capacity(4 * us.len());
        for (&u, &s) in us.iter().zip(&ss) {
            let b = &mut self.b;
            let lo = {
                let (u, s) = (b.ins().uwiden_low(u), b.ins().swiden_low(s));
                b.ins().imul(u, s)
            };
            let hi = {
                let (u, s) = (b.ins().uwiden_high(u), b.ins().swiden_high(s));
                b.ins().imul(u, s)
            };
            out.extend([
                b.ins().swiden_low(lo),
                b.ins().swiden_high(lo),
                b.ins().swiden_low(hi),
                b.ins().swiden_high(hi),
            ]);
        }
        Ok(Some(Val::Pieces(out)))
    }

    /// One piece of the exact dot product (see `byte_dot`): 16 unsigned bytes `u` times 16
    /// signed bytes `s`, groups of 4 summed into the i32 lanes of `acc`.
    fn dot_piece(&mut self, u: Value, s: Value, acc: Value) -> Value {
        let b = &mut self.b;
        let (s_lo, u_lo) = (b.ins().swiden_low(s), b.ins().uwiden_low(u));
        let lo = b.ins().imul(s_lo, u_lo);
        let (s_hi, u_hi) = (b.ins().swiden_high(s), b.ins().uwiden_high(u));
        let hi = b.ins().imul(s_hi, u_hi);
        let (lo_lo, lo_hi) = (b.ins().swiden_low(lo), b.ins().swiden_high(lo));
        let lo_pairs = b.ins().iadd_pairwise(lo_lo, lo_hi);
        let (hi_lo, hi_hi) = (b.ins().swiden_low(hi), b.ins().swiden_high(hi));
        let hi_pairs = b.ins().iadd_pairwise(hi_lo, hi_hi);
        let quads = b.ins().iadd_pairwise(lo_pairs, hi_pairs);
        b.ins().iadd(quads, acc)
    }

    /// The bytes of `even` and `odd` (same dtype) interleaved lane by lane, as pieces: one
    /// gather when both load one buffer at offsets from one base, else lane by lane.
    fn interleave_bytes(&mut self, even: &Expr, odd: &Expr) -> Result<Val, CompileError> {
        let dtype = even.dtype().with_lanes(2 * even.dtype().lanes);
        if let (ExprKind::Load(buffer, ei), ExprKind::Load(other, oi)) = (even.kind(), odd.kind())
            && buffer == other
            && let ([ei], [oi]) = (ei.as_slice(), oi.as_slice())
            && let (Some((eb, eo)), Some((ob, oo))) = (lane_offsets(ei), lane_offsets(oi))
            && match (eb, ob) {
                (Some(x), Some(y)) => x.structurally_eq(y),
                (x, y) => x.is_none() && y.is_none(),
            }
        {
            let offsets: Vec<i64> = eo.iter().zip(&oo).flat_map(|(e, o)| [*e, *o]).collect();
            if let Some(v) = self.gather_runs(dtype, buffer, eb, &offsets)? {
                return Ok(v);
            }
        }
        let (e, o) = (self.expr(even)?, self.expr(odd)?);
        let (e, o) = (self.lanes(&e, even.dtype()), self.lanes(&o, odd.dtype()));
        let lanes: Vec<Value> = e.into_iter().zip(o).flat_map(|(e, o)| [e, o]).collect();
        Ok(self.pack_lanes(dtype, &lanes))
    }

    /// A vector load whose index is a base plus constant lane offsets (`lane_offsets`), other
    /// than a ramp or broadcast (`load` handles those), through `gather_runs`.
    fn load_runs(&mut self, dtype: DType, buffer: &Buffer, indices: &[Expr]) -> Result<Option<Val>, CompileError> {
        let [index] = indices else {
            return Ok(None);
        };
        if matches!(index.kind(), ExprKind::Ramp(..) | ExprKind::Broadcast(_)) {
            return Ok(None);
        }
        match lane_offsets(index) {
            Some((base, offsets)) => self.gather_runs(dtype, buffer, base, &offsets),
            None => Ok(None),
        }
    }

    /// Lanes of `dtype` at element offsets `offsets` from `base` in `buffer`, when the offsets
    /// form runs of 4, 8 or 16 contiguous bytes: one load per distinct run, put together into
    /// pieces (a row of `A` repeated for every column is one 32-bit load and a splat), or
    /// interleaved runs of whole 16-byte windows (`interleaved`). `None` if they do neither, or
    /// the buffer is not in memory.
    fn gather_runs(
        &mut self,
        dtype: DType,
        buffer: &Buffer,
        base: Option<&Expr>,
        offsets: &[i64],
    ) -> Result<Option<Val>, CompileError> {
        let Some(BufLoc::Memory(ptr)) = self.buffers.get(&buffer.id()).cloned() else {
            return Ok(None);
        };
        if dtype.is_bool() || !is_pieces(dtype) {
            return Ok(None);
        }
        let bytes = dtype.scalar.bytes();
        let contiguous = |run: &[i64]| run.windows(2).all(|w| w[1] == w[0] + 1);
        let run = [16, 8, 4]
            .into_iter()
            .filter(|&chunk| chunk >= bytes)
            .map(|chunk| chunk / bytes)
            .find(|&run| offsets.chunks(run).all(contiguous));
        let byte_offsets: Option<Vec<i32>> =
            offsets.iter().map(|&o| o.checked_mul(bytes as i64).and_then(|b| i32::try_from(b).ok())).collect();
        let Some(byte_offsets) = byte_offsets else {
            return Ok(None);
        };
        // Not runs: interleaved runs, loaded whole and shuffled (`interleaved`).
        let interleaved = if run.is_none() { interleaved::plan(&byte_offsets, bytes) } else { None };
        if run.is_none() && interleaved.is_none() {
            return Ok(None);
        }
        let addr = match base {
            Some(base) => {
                let i = self.expr(base)?.as_scalar();
                let scaled = if bytes == 1 { i } else { self.b.ins().ishl_imm_u(i, bytes.trailing_zeros() as i64) };
                self.b.ins().iadd(ptr, scaled)
            }
            None => ptr,
        };
        // In bounds (`guard_accesses`), so it cannot trap; pure if nothing stores to the buffer.
        let mut flags = MemFlagsData::new().with_notrap();
        if self.cx.readonly.contains(&buffer.id()) {
            flags = flags.with_readonly().with_can_move();
        }
        let Some(run) = run else {
            let plan = interleaved.expect("a plan where there are no runs");
            return Ok(Some(Val::Pieces(self.load_interleaved(addr, flags, piece_type(dtype.scalar), plan))));
        };
        let chunk_ty = match run * bytes {
            16 => piece_type(dtype.scalar),
            8 => types::I64,
            _ => types::I32,
        };
        let mut loaded: HashMap<i32, Value> = HashMap::default();
        let chunks: Vec<Value> = byte_offsets
            .chunks(run)
            .map(|run| *loaded.entry(run[0]).or_insert_with(|| self.b.ins().load(chunk_ty, flags, addr, run[0])))
            .collect();
        Ok(Some(Val::Pieces(self.pieces_of_chunks(&chunks, piece_type(dtype.scalar)))))
    }
}
