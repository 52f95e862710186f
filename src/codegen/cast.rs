//! Conversions between dtypes (`Cast`, `SaturatingCast`), following `interp::scalar::cast`.
//!
//! Every conversion has a per-lane scalar form. Vectors whose source and target are both held
//! as 128-bit pieces use widening, narrowing, pack and convert instructions where they are
//! exact. All f16/bf16 conversions go through `half_to_f64`/`f64_to_half`, the only call sites
//! of the host helpers, so results are bit-identical to the `half` crate the interpreter uses.

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{InstBuilder, Value, types};
use cranelift_module::Module;
use ir::{DType, ScalarType};

use super::func::FnTx;
use super::types::{Val, is_pieces, lane_type, piece_type};
use crate::abi::HostFn;

/// True if every value of `from` is a value of `to` (so saturation never clamps).
fn range_contains(to: ScalarType, from: ScalarType) -> bool {
    let (flo, fhi) = if from.is_bool() { (0, 1) } else { from.int_range().expect("integer type") };
    let (tlo, thi) = to.int_range().expect("integer type");
    tlo <= flo && fhi <= thi
}

impl<M: Module> FnTx<'_, '_, '_, M> {
    /// Converts `v` of dtype `from` to the scalar type `to` with the same lane count.
    pub fn cast(&mut self, v: Val, from: DType, to: ScalarType, saturating: bool) -> Val {
        if from.scalar == to {
            return v;
        }
        let to_dtype = DType { scalar: to, lanes: from.lanes };
        if let Val::Pieces(pieces) = &v
            && is_pieces(to_dtype)
            && let Some(r) = self.vector_cast(pieces, from, to, saturating)
        {
            return Val::Pieces(r);
        }
        let lanes = self.lanes(&v, from);
        let out: Vec<Value> = lanes.into_iter().map(|x| self.scalar_cast(x, from.scalar, to, saturating)).collect();
        self.pack_lanes(to_dtype, &out)
    }

    /// `half::f16::to_f64` / `half::bf16::to_f64` of the raw bits in an I16.
    pub fn half_to_f64(&mut self, x: Value, from: ScalarType) -> Value {
        let f = if from == ScalarType::F16 { HostFn::F16ToF64 } else { HostFn::Bf16ToF64 };
        let bits = self.b.ins().uextend(types::I32, x);
        self.call_host(f, &[bits])[0]
    }

    /// `half::f16::from_f64` / `half::bf16::from_f64`, as raw bits in an I16.
    pub fn f64_to_half(&mut self, x: Value, to: ScalarType) -> Value {
        let f = if to == ScalarType::F16 { HostFn::F64ToF16 } else { HostFn::F64ToBf16 };
        let bits = self.call_host(f, &[x])[0];
        self.b.ins().ireduce(types::I16, bits)
    }

    /// A float of type F32 or F64 holding the exact value of `x` (f16/bf16 widen to F64).
    fn native_float(&mut self, x: Value, from: ScalarType) -> Value {
        match from {
            ScalarType::F16 | ScalarType::BF16 => self.half_to_f64(x, from),
            _ => x,
        }
    }

    fn scalar_cast(&mut self, x: Value, from: ScalarType, to: ScalarType, saturating: bool) -> Value {
        if to.is_bool() {
            if from.is_float() {
                let f = self.native_float(x, from);
                let zero = self.zero(self.b.func.dfg.value_type(f));
                return self.b.ins().fcmp(FloatCC::NotEqual, f, zero);
            }
            return self.b.ins().icmp_imm_s(IntCC::NotEqual, x, 0);
        }
        if to.is_float() {
            // Native result type; f16/bf16 round from f64 exactly as `round_float` does.
            let native = if to == ScalarType::F32 { types::F32 } else { types::F64 };
            let f = if from.is_float() {
                let f = self.native_float(x, from);
                match (self.b.func.dfg.value_type(f), native) {
                    (a, b) if a == b => f,
                    (types::F32, _) => self.b.ins().fpromote(types::F64, f),
                    _ => self.b.ins().fdemote(types::F32, f),
                }
            } else if from.is_signed_int() {
                self.b.ins().fcvt_from_sint(native, x)
            } else {
                self.b.ins().fcvt_from_uint(native, x)
            };
            return if to.is_float() && matches!(to, ScalarType::F16 | ScalarType::BF16) {
                self.f64_to_half(f, to)
            } else {
                f
            };
        }
        let ty = lane_type(to);
        let (lo, hi) = to.int_range().expect("integer target");
        if from.is_float() {
            // Truncate and saturate, NaN to 0 (Rust's `as`).
            let f = self.native_float(x, from);
            return match (to.bits(), to.is_signed_int()) {
                (32 | 64, true) => self.b.ins().fcvt_to_sint_sat(ty, f),
                (32 | 64, false) => self.b.ins().fcvt_to_uint_sat(ty, f),
                _ => {
                    let i = self.b.ins().fcvt_to_sint_sat(types::I32, f);
                    let lo = self.iconst(types::I32, lo as i64);
                    let hi = self.iconst(types::I32, hi as i64);
                    let i = self.b.ins().smax(i, lo);
                    let i = self.b.ins().smin(i, hi);
                    self.b.ins().ireduce(ty, i)
                }
            };
        }
        let signed = from.is_signed_int();
        let fty = lane_type(from);
        let mut x = x;
        if saturating && !range_contains(to, from) {
            let (flo, fhi) = from.int_range().expect("integer source");
            if lo > flo {
                let c = self.iconst(fty, lo as i64);
                x = if signed { self.b.ins().smax(x, c) } else { self.b.ins().umax(x, c) };
            }
            if hi < fhi {
                let c = self.iconst(fty, hi as i64);
                x = if signed { self.b.ins().smin(x, c) } else { self.b.ins().umin(x, c) };
            }
        }
        match from.bits().cmp(&to.bits()) {
            std::cmp::Ordering::Equal => x,
            std::cmp::Ordering::Greater => self.b.ins().ireduce(ty, x),
            std::cmp::Ordering::Less if signed => self.b.ins().sextend(ty, x),
            std::cmp::Ordering::Less => self.b.ins().uextend(ty, x),
        }
    }

    /// A piece-wise conversion when one exists; both dtypes are held as pieces.
    fn vector_cast(&mut self, pieces: &[Value], from: DType, to: ScalarType, saturating: bool) -> Option<Vec<Value>> {
        use ScalarType::*;
        let fs = from.scalar;
        let map = |tx: &mut Self, ps: Vec<Value>, f: &dyn Fn(&mut Self, Value) -> Value| -> Vec<Value> {
            ps.into_iter().map(|p| f(tx, p)).collect()
        };
        if fs.is_bool() {
            // Masks of the target width, negated: all ones becomes 1.
            let bits = match to {
                F32 => 32,
                F64 => 64,
                _ if to.is_int() => to.bits(),
                _ => return None,
            };
            let masks = self.masks(Val::Pieces(pieces.to_vec()), from, bits);
            let ones = map(self, masks, &|tx, m| tx.b.ins().ineg(m));
            return Some(match to {
                F32 => map(self, ones, &|tx, p| tx.b.ins().fcvt_from_sint(types::F32X4, p)),
                F64 => map(self, ones, &|tx, p| tx.b.ins().fcvt_from_sint(types::F64X2, p)),
                _ => ones,
            });
        }
        if to.is_bool() {
            if !(fs.is_int() || matches!(fs, F32 | F64)) {
                return None;
            }
            let zero = self.zero(piece_type(fs));
            return Some(map(self, pieces.to_vec(), &|tx, p| {
                if fs.is_int() {
                    tx.b.ins().icmp(IntCC::NotEqual, p, zero)
                } else {
                    tx.b.ins().fcmp(FloatCC::NotEqual, p, zero)
                }
            }));
        }
        match (fs, to) {
            _ if fs.is_int() && to.is_int() => Some(self.int_vector_cast(pieces.to_vec(), fs, to, saturating)),
            (_, F32) if fs.is_int() && fs.bits() <= 32 => {
                // Small integers are exact in i32; u32 needs the unsigned conversion.
                if fs == U32 {
                    Some(map(self, pieces.to_vec(), &|tx, p| tx.b.ins().fcvt_from_uint(types::F32X4, p)))
                } else {
                    let wide = self.int_vector_cast(pieces.to_vec(), fs, I32, false);
                    Some(map(self, wide, &|tx, p| tx.b.ins().fcvt_from_sint(types::F32X4, p)))
                }
            }
            (_, F64) if fs.is_int() => {
                let target = if fs.is_signed_int() { I64 } else { U64 };
                let wide = self.int_vector_cast(pieces.to_vec(), fs, target, false);
                Some(map(self, wide, &|tx, p| {
                    if fs.is_signed_int() {
                        tx.b.ins().fcvt_from_sint(types::F64X2, p)
                    } else {
                        tx.b.ins().fcvt_from_uint(types::F64X2, p)
                    }
                }))
            }
            (F32, U32) => Some(map(self, pieces.to_vec(), &|tx, p| tx.b.ins().fcvt_to_uint_sat(types::I32X4, p))),
            (F32, U8 | U16) => {
                // Clamp into the target's range in f32, then truncate: `maxps` (a NaN lane gives
                // the 0 bound, as the cast defines) and `minps` are exact here and three
                // instructions where the saturating i32 conversion takes seven.
                let lo_v = self.splat_f32(0.0);
                let hi_v = self.splat_f32(if to == U8 { 255.0 } else { 65535.0 });
                let i = map(self, pieces.to_vec(), &|tx, p| {
                    let above_lo = tx.b.ins().fcmp(FloatCC::LessThan, lo_v, p);
                    let above_lo = tx.bitcast_vec(above_lo, types::F32X4);
                    let at_least_lo = tx.b.ins().bitselect(above_lo, p, lo_v);
                    let below_hi = tx.b.ins().fcmp(FloatCC::LessThan, at_least_lo, hi_v);
                    let below_hi = tx.bitcast_vec(below_hi, types::F32X4);
                    let clamped = tx.b.ins().bitselect(below_hi, at_least_lo, hi_v);
                    tx.b.ins().x86_cvtt2dq(types::I32X4, clamped)
                });
                Some(self.int_vector_cast(i, I32, to, true))
            }
            (F32, _) if to.is_int() && to.bits() <= 32 => {
                // Truncate to i32, then saturate into the narrower type.
                let i = map(self, pieces.to_vec(), &|tx, p| tx.b.ins().fcvt_to_sint_sat(types::I32X4, p));
                Some(self.int_vector_cast(i, I32, to, true))
            }
            (F32, F64) => {
                let mut out = Vec::with_capacity(pieces.len() * 2);
                for &p in pieces {
                    let lo = self.b.ins().fvpromote_low(p);
                    let high_half =
                        self.shuffle_bytes(p, p, [8, 9, 10, 11, 12, 13, 14, 15, 8, 9, 10, 11, 12, 13, 14, 15]);
                    let high_half = self.bitcast_vec(high_half, types::F32X4);
                    let hi = self.b.ins().fvpromote_low(high_half);
                    out.push(lo);
                    out.push(hi);
                }
                Some(out)
            }
            (F64, F32) => Some(
                pieces
                    .chunks(2)
                    .map(|pair| {
                        let a = self.b.ins().fvdemote(pair[0]);
                        let b = self.b.ins().fvdemote(pair[1]);
                        let both = self.shuffle_bytes(a, b, [0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23]);
                        self.bitcast_vec(both, types::F32X4)
                    })
                    .collect(),
            ),
            _ => None,
        }
    }

    /// Integer to integer conversion of pieces (wrapping, or saturating).
    fn int_vector_cast(
        &mut self,
        mut pieces: Vec<Value>,
        from: ScalarType,
        to: ScalarType,
        saturating: bool,
    ) -> Vec<Value> {
        let (mut w, tw) = (from.bits(), to.bits());
        if saturating && !range_contains(to, from) {
            if from.is_signed_int() && w > tw && w <= 32 {
                // Pack instructions saturate signed lanes; the last step picks the target's
                // signedness, earlier steps stay signed so the range only shrinks.
                while w > tw {
                    let last = w / 2 == tw;
                    pieces = pieces
                        .chunks(2)
                        .map(|p| {
                            if last && to.is_unsigned_int() {
                                self.b.ins().unarrow(p[0], p[1])
                            } else {
                                self.b.ins().snarrow(p[0], p[1])
                            }
                        })
                        .collect();
                    w /= 2;
                }
                return pieces;
            }
            // Clamp in the source type, after which wrapping is exact.
            let (flo, fhi) = from.int_range().expect("integer source");
            let (lo, hi) = to.int_range().expect("integer target");
            let pty = piece_type(from);
            let signed = from.is_signed_int();
            if lo > flo {
                let c = self.iconst(pty.lane_type(), lo as i64);
                let c = self.b.ins().splat(pty, c);
                pieces = pieces
                    .into_iter()
                    .map(|p| if signed { self.b.ins().smax(p, c) } else { self.b.ins().umax(p, c) })
                    .collect();
            }
            if hi < fhi {
                let c = self.iconst(pty.lane_type(), hi as i64);
                let c = self.b.ins().splat(pty, c);
                pieces = pieces
                    .into_iter()
                    .map(|p| if signed { self.b.ins().smin(p, c) } else { self.b.ins().umin(p, c) })
                    .collect();
            }
        }
        // Widening extends by the source's signedness; narrowing keeps the low bits.
        while w < tw {
            pieces = self.widen(&pieces, from.is_signed_int());
            w *= 2;
        }
        while w > tw {
            pieces = self.narrow_wrap(&pieces);
            w /= 2;
        }
        pieces
    }
}
