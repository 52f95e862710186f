//! Element-wise map kernels (`IntrinKind::Map`): the declaration's body compiled, node by node,
//! to zmm or ymm code, for what Cranelift's 128-bit vectors make slow (a requantization is
//! about a dozen vector operations per 16 outputs on zmm, four times as many on xmm).
//!
//! A kernel computes `out[p, c] = f(…)` for `p < m`, `c < n` under the SysV signature
//! `fn(in_0, …, in_last, out)`: one pointer per operand (at most six), each at the operand's
//! origin; `[m, n]` operands advance by their row stride per row, `[n]` operands do not. The
//! columns run in vectors of 16 (zmm) or 8 (ymm) lanes; a zmm kernel finishes a row's partial
//! vector under opmask k2 (masked-off lanes are never accessed), a ymm kernel needs `n` to be a
//! multiple of 8.
//!
//! Each node becomes instructions that give the IR's result for every input (`ir::expr`):
//! * i32 `+ - *`: `vpaddd`, `vpsubd`, `vpmulld` (wrapping); f32 `+ - * /`: `vaddps`, `vsubps`,
//!   `vmulps`, `vdivps` (IEEE, round to nearest even: the MXCSR default, never changed by
//!   this process);
//! * `f32(x)` of i32: `vcvtdq2ps` (round to nearest even); of a u8 or i8 input: `vpmovzxbd` or
//!   `vpmovsxbd` from memory first (exact);
//! * `round(x)`: `vrndscaleps`/`vroundps` with immediate 0 (nearest, ties to even; NaN, ±0 and
//!   ±∞ unchanged);
//! * `c ? t : f` with `c` a float comparison: `vcmpps` with the ordered predicate (false on
//!   NaN, as the IR's comparisons; `!=` unordered: true on NaN), then a blend;
//! * the store of an f32 value as u8 or i8 (`Cast` and `SaturatingCast` agree on float → int:
//!   toward zero, saturated, NaN → 0): NaN lanes zeroed (i8 only: `vmaxps` below already turns
//!   NaN into the lower bound 0 of u8), then `vmaxps` with the lower bound as second operand
//!   (returned for NaN), `vminps` with the upper, `vcvttps2dq` (exact on the clamped integral
//!   or truncated value), and a narrowing store (`vpmovdb`; ymm: `vpackssdw` +
//!   `vpackuswb`/`vpacksswb`, which cannot saturate on values already in range). Where a row
//!   holds four vectors or more, they go four at a time: `vminps` with the upper bound only,
//!   the conversion, then the packs, whose saturation is the clamp from below (a NaN or a
//!   value below `i32::MIN` converts to `0x80000000`, the lowest byte after the packs), and
//!   `vpermd` to undo their interleaving by 128-bit lanes: three fewer instructions per
//!   vector;
//! * that store of `round(x / s + zp)` with constants `s` and `zp` (a requantization): the
//!   quotient by one FMA with the reciprocal of `s` wherever that provably rounds to the same
//!   integer, the division itself in the rare vectors where it may not (`ScaledRounding`):
//!   `vdivps` alone retired one zmm vector per ~10 cycles, the requantization's bottleneck. A
//!   zmm group of four vectors takes one check for all four (`Gen::scaled_group`).
//!
//! Any other node, dtype or operand layout is `KernelError::Unsupported`, and the call runs its
//! loop nest. Registers: only caller-saved ones (rax, rcx, rdx, rsi, rdi, r8–r11, vector
//! registers, k2, k3); the kernel ends with `vzeroupper`.

use std::collections::HashMap;

use iced_x86::Register;
use iced_x86::code_asm::registers::{xmm::get_xmm, ymm::get_ymm, zmm::get_zmm};
use iced_x86::code_asm::*;
use ir::expr::{BinOp, CmpOp, Expr, ExprKind};
use ir::intrin::{IntrinKind, TensorIntrin};
use ir::{DType, Tensor};

use crate::error::KernelError;
use crate::isa::VectorWidth;

/// The problem of one map kernel: the block and each operand's row stride.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct MapShape {
    pub m: i64,
    pub n: i64,
    /// Per operand (the inputs in call order, then the output): elements between rows, 0 for an
    /// `[n]` operand.
    pub row_strides: Vec<i64>,
}

/// Argument registers of the SysV calling convention, in order.
const ARGS: [AsmRegister64; 6] = [rdi, rsi, rdx, rcx, r8, r9];
/// The column of the current vector.
const COLUMN: AsmRegister64 = rax;
const ROW_COUNT: AsmRegister64 = r10;

/// Assembles the kernel of `decl` (an `IntrinKind::Map` declaration) at `width`.
pub fn assemble_map(width: VectorWidth, decl: &TensorIntrin, shape: &MapShape) -> Result<Vec<u8>, KernelError> {
    let unsupported = |what: String| Err(KernelError::Unsupported { what });
    let IntrinKind::Map { m, n } = decl.kind else {
        return unsupported(format!("{} is not a Map declaration", decl.name));
    };
    let operands = decl.operand_tensors();
    if (m, n) != (shape.m, shape.n) || shape.row_strides.len() != operands.len() {
        return unsupported(format!("a shape for {}x{} with {} operands", m, n, operands.len()));
    }
    if operands.len() > ARGS.len() {
        return unsupported(format!("{} operands (at most {} are passed in registers)", operands.len(), ARGS.len()));
    }
    let lanes = width.lanes() as i64;
    if width == VectorWidth::Ymm && n % lanes != 0 {
        return unsupported(format!("{n} columns on ymm (a multiple of {lanes})"));
    }
    // Groups of four vectors need four more registers across the body; a body that does not
    // fit with them runs vector by vector.
    let assemble = |grouped: bool| -> Result<Vec<u8>, KernelError> {
        let mut g = Gen::new(width, decl, grouped)?;
        g.kernel(shape)?;
        Ok(g.a.assemble(0)?)
    };
    assemble(true).or_else(|_| assemble(false))
}

/// The type of a vector value: 32-bit lanes of integers or floats.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Lane {
    I32,
    F32,
}

fn lane_of(dtype: DType) -> Option<Lane> {
    match dtype {
        d if d == DType::I32 => Some(Lane::I32),
        d if d == DType::F32 => Some(Lane::F32),
        _ => None,
    }
}

/// A node's identity within the declaration's body (shared subtrees are evaluated once).
fn node(e: &Expr) -> usize {
    std::ptr::from_ref(e.kind()) as usize
}

/// The float → int store of a u8 or i8 output: the value it converts.
fn narrowing_store(root: &Expr, out: DType) -> Option<&Expr> {
    match root.kind() {
        ExprKind::Cast(x) | ExprKind::SaturatingCast(x)
            if root.dtype() == out && (out == DType::U8 || out == DType::I8) && x.dtype() == DType::F32 =>
        {
            Some(x)
        }
        _ => None,
    }
}

/// `round(x / s + zp)` (`zp` 0 when the body has no addition) in f32, with constants `s` and
/// `zp` for which the reciprocal `y = 1/s` (rounded to f32, `|y - 1/s| ≤ (2^-24 + 2^-53)·|1/s|`)
/// decides the rounding exactly wherever `t = RN(x·y + zp)` (one FMA) lies farther than
/// `0.5 - 2^-10` from the half-integers around `k = round(t)`: then `round(x / s + zp) = k`.
///
/// Why: with `q = x / s` (real) and `v = RN(RN(q) + zp)` the value the body rounds,
/// `|x·y - q| ≤ 2^-24·(1 + 2^-29)·|q|` and `|RN(q) - q| ≤ 2^-24·|q|`, and each of `t` and `v`
/// is one more rounding (`≤ 2^-24` relative). Where `|t| ≤ 2^10` (and `|zp| ≤ 2^9`, so
/// `|q| < 2^10.6`), `|t - v| < 2^-12.3 + 2^-14 + 2^-13.3 < 2^-11`; so `|t - k| < 0.5 - 2^-10`
/// gives `|v - k| < 0.5`, and `v` rounds to `k` (no tie). Where `|t| > 2^10` (finite), `v` is
/// within a relative `2^-20` of `t`: both lie beyond every integer destination's range on the
/// same side, and the store saturates them alike — and the check still runs (it fails only
/// for a fraction near one half, or NaN and ±∞, which take the exact path).
struct ScaledRounding<'e> {
    x: &'e Expr,
    s: f32,
    y: f32,
    zp: f32,
}

impl<'e> ScaledRounding<'e> {
    fn of(e: &'e Expr) -> Option<ScaledRounding<'e>> {
        let f32_const = |e: &Expr| match e.kind() {
            ExprKind::Float(v) if e.dtype() == DType::F32 => Some(*v as f32),
            _ => None,
        };
        let ExprKind::Round(inner) = e.kind() else { return None };
        let (quotient, zp) = match inner.kind() {
            ExprKind::Binary(BinOp::Add, q, zp) => (q, f32_const(zp)?),
            _ => (inner, 0.0),
        };
        let ExprKind::Binary(BinOp::Div, x, s) = quotient.kind() else { return None };
        let s = f32_const(s)?;
        let y = (1.0 / f64::from(s)) as f32;
        let exact_types = [e, inner, quotient, x].iter().all(|n| n.dtype() == DType::F32);
        (exact_types && s.is_normal() && y.is_normal() && zp.is_finite() && zp.abs() <= 512.0)
            .then_some(ScaledRounding { x, s, y, zp })
    }

    /// `[y, s, zp, |·| mask, margin]`, as f32 bits in the kernel's constant registers.
    fn constants(&self) -> [f32; 5] {
        [self.y, self.s, self.zp, f32::from_bits(0x7fff_ffff), 0.5 - 1.0 / 1024.0]
    }
}

struct Gen<'d> {
    a: CodeAssembler,
    width: VectorWidth,
    decl: &'d TensorIntrin,
    /// f32 or i32 constants by bits, in registers loaded once.
    constants: HashMap<u32, usize>,
    /// Registers not holding a constant or a live value.
    free: Vec<usize>,
    /// Live values of the current vector: node → (register, uses left).
    live: HashMap<usize, (usize, usize)>,
    /// Uses of each node by its parents in the body.
    uses: HashMap<usize, usize>,
    /// Whether the current vector is the masked partial one (zmm only).
    masked: bool,
    /// Whether a narrowing store runs in groups of `GROUP` vectors, saturated by packing.
    grouped: bool,
    /// Elements from `COLUMN` to the current vector (within a group).
    offset: i32,
}

/// Vectors per group of a narrowing store: two `vpackssdw` and one `vpackuswb` (or
/// `vpacksswb`) narrow four i32 vectors to one of bytes.
const GROUP: i64 = 4;

impl<'d> Gen<'d> {
    fn new(width: VectorWidth, decl: &'d TensorIntrin, grouped: bool) -> Result<Gen<'d>, KernelError> {
        let mut g = Gen {
            a: CodeAssembler::new(64)?,
            width,
            decl,
            constants: HashMap::new(),
            free: (0..width.registers()).rev().collect(),
            live: HashMap::new(),
            uses: HashMap::new(),
            masked: false,
            grouped,
            offset: 0,
        };
        let body = decl.output.body().expect("a Map declaration is a compute");
        g.count_uses(body);
        Ok(g)
    }

    fn count_uses(&mut self, e: &Expr) {
        let count = self.uses.entry(node(e)).or_insert(0);
        *count += 1;
        if *count > 1 {
            return;
        }
        match e.kind() {
            ExprKind::Binary(_, x, y) | ExprKind::Cmp(_, x, y) => {
                self.count_uses(x);
                self.count_uses(y);
            }
            ExprKind::Cast(x) | ExprKind::SaturatingCast(x) | ExprKind::Round(x) => self.count_uses(x),
            ExprKind::Select(c, t, f) => {
                self.count_uses(c);
                self.count_uses(t);
                self.count_uses(f);
            }
            _ => {}
        }
    }

    fn unsupported<T>(&self, what: impl Into<String>) -> Result<T, KernelError> {
        Err(KernelError::Unsupported { what: what.into() })
    }

    fn allocate(&mut self) -> Result<usize, KernelError> {
        match self.free.pop() {
            Some(r) => Ok(r),
            None => self.unsupported(format!("a body needing more than {} vector registers", self.width.registers())),
        }
    }

    /// A register holding `bits` in every lane, loaded before the loops.
    fn constant(&mut self, bits: u32) -> Result<usize, KernelError> {
        if let Some(&r) = self.constants.get(&bits) {
            return Ok(r);
        }
        // Constants take the highest registers, loaded once; temporaries the lowest.
        let r = self.free.iter().copied().max().ok_or(KernelError::Unsupported {
            what: format!("a body needing more than {} vector registers", self.width.registers()),
        })?;
        self.free.retain(|&f| f != r);
        self.a.mov(r11d, bits)?;
        match self.width {
            VectorWidth::Zmm => self.a.vpbroadcastd(zmm(r), r11d)?,
            VectorWidth::Ymm => {
                self.a.vmovd(xmm(r), r11d)?;
                self.a.vpbroadcastd(ymm(r), xmm(r))?;
            }
        }
        self.constants.insert(bits, r);
        Ok(r)
    }

    /// Loads every constant of the body (and of the narrowing store) before the loops.
    fn load_constants(&mut self, e: &Expr) -> Result<(), KernelError> {
        match e.kind() {
            ExprKind::Int(v) if e.dtype() == DType::I32 => {
                self.constant(*v as i32 as u32)?;
            }
            ExprKind::Float(v) if e.dtype() == DType::F32 => {
                self.constant((*v as f32).to_bits())?;
            }
            ExprKind::Binary(_, x, y) | ExprKind::Cmp(_, x, y) => {
                self.load_constants(x)?;
                self.load_constants(y)?;
            }
            ExprKind::Cast(x) | ExprKind::SaturatingCast(x) | ExprKind::Round(x) => self.load_constants(x)?,
            ExprKind::Select(c, t, f) => {
                self.load_constants(c)?;
                self.load_constants(t)?;
                self.load_constants(f)?;
            }
            _ => {}
        }
        Ok(())
    }

    fn kernel(&mut self, shape: &MapShape) -> Result<(), KernelError> {
        let body = self.decl.output.body().expect("a Map declaration is a compute").clone();
        let out = self.decl.output.dtype();
        self.load_constants(&body)?;
        if let Some(x) = narrowing_store(&body, out) {
            let (lo, hi) = if out == DType::U8 { (0.0f32, 255.0f32) } else { (-128.0, 127.0) };
            self.constant(lo.to_bits())?;
            self.constant(hi.to_bits())?;
            self.constant(0.0f32.to_bits())?;
            if let Some(r) = ScaledRounding::of(x) {
                for c in r.constants() {
                    self.constant(c.to_bits())?;
                }
            }
        }
        let lanes = self.width.lanes() as i64;
        let (full, tail) = (shape.n / lanes * lanes, shape.n % lanes);
        let narrowed = narrowing_store(&body, out);
        let groups = match narrowed {
            Some(_) if self.grouped => shape.n / (GROUP * lanes) * (GROUP * lanes),
            _ => 0,
        };
        let permutation = if groups > 0 { Some(self.permutation()?) } else { None };
        if tail > 0 {
            self.a.mov(r11d, (1u32 << tail) - 1)?;
            self.a.kmovw(k2, r11d)?;
            // The lanes past the block, which a check over every lane must ignore.
            self.a.knotw(k4, k2)?;
        }
        let mut row_top = self.a.create_label();
        if shape.m > 1 {
            self.a.mov(ROW_COUNT, shape.m)?;
        }
        self.a.set_label(&mut row_top)?;
        self.a.xor(eax, eax)?;
        if let (Some(x), Some(permutation)) = (narrowed, permutation) {
            let mut group_top = self.a.create_label();
            self.a.set_label(&mut group_top)?;
            self.masked = false;
            self.group(x, permutation)?;
            self.a.add(COLUMN, (GROUP * lanes) as i32)?;
            self.a.cmp(
                COLUMN,
                i32::try_from(groups).map_err(|_| KernelError::OffsetTooLarge { what: "n", offset: groups })?,
            )?;
            self.a.jb(group_top)?;
        }
        if full > groups {
            let mut column_top = self.a.create_label();
            self.a.set_label(&mut column_top)?;
            self.masked = false;
            self.vector(&body)?;
            self.a.add(COLUMN, lanes as i32)?;
            self.a.cmp(
                COLUMN,
                i32::try_from(full).map_err(|_| KernelError::OffsetTooLarge { what: "n", offset: full })?,
            )?;
            self.a.jb(column_top)?;
        }
        if tail > 0 {
            self.masked = true;
            self.vector(&body)?;
        }
        if shape.m > 1 {
            for (arg, tensor) in self.decl.operand_tensors().into_iter().enumerate() {
                let step = shape.row_strides[arg] * tensor.dtype().bytes() as i64;
                if step != 0 {
                    let step =
                        i32::try_from(step).map_err(|_| KernelError::OffsetTooLarge { what: "a row", offset: step })?;
                    self.a.add(ARGS[arg], step)?;
                }
            }
            self.a.dec(ROW_COUNT)?;
            self.a.jnz(row_top)?;
        }
        self.a.vzeroupper()?;
        self.a.ret()?;
        Ok(())
    }

    /// One vector of outputs at column `COLUMN` of the current row.
    fn vector(&mut self, body: &Expr) -> Result<(), KernelError> {
        self.live.clear();
        let out = self.decl.output.dtype();
        let arg = self.decl.inputs.len();
        if let Some(x) = narrowing_store(body, out) {
            let clamped = self.converted(x, false)?;
            match self.width {
                VectorWidth::Zmm => {
                    let mem = xmmword_ptr(ARGS[arg] + COLUMN);
                    if self.masked {
                        self.a.vpmovdb(mem.k2(), zmm(clamped))?;
                    } else {
                        self.a.vpmovdb(mem, zmm(clamped))?;
                    }
                }
                VectorWidth::Ymm => {
                    let high = self.allocate()?;
                    self.a.vextracti128(xmm(high), ymm(clamped), 1)?;
                    self.a.vpackssdw(xmm(clamped), xmm(clamped), xmm(high))?;
                    if out == DType::U8 {
                        self.a.vpackuswb(xmm(clamped), xmm(clamped), xmm(clamped))?;
                    } else {
                        self.a.vpacksswb(xmm(clamped), xmm(clamped), xmm(clamped))?;
                    }
                    self.a.vmovq(qword_ptr(ARGS[arg] + COLUMN), xmm(clamped))?;
                    self.free.push(high);
                }
            }
            self.free.push(clamped);
            return Ok(());
        }
        if lane_of(out).is_none() || body.dtype() != out {
            return self.unsupported(format!("a store of {} as {out}", body.dtype()));
        }
        let v = self.value(body)?;
        match (self.width, self.masked) {
            (VectorWidth::Zmm, false) => self.a.vmovdqu32(zmmword_ptr(ARGS[arg] + COLUMN * 4), zmm(v))?,
            (VectorWidth::Zmm, true) => self.a.vmovdqu32(zmmword_ptr(ARGS[arg] + COLUMN * 4).k2(), zmm(v))?,
            (VectorWidth::Ymm, _) => self.a.vmovdqu(ymmword_ptr(ARGS[arg] + COLUMN * 4), ymm(v))?,
        }
        self.release(body);
        Ok(())
    }

    /// The value `x` of a narrowing store as i32 in a fresh register: clamped to the output's
    /// range (`saturated_by_packing`: only from above, the packing of `group` saturating the
    /// rest) and converted, NaN as 0.
    fn converted(&mut self, x: &Expr, saturated_by_packing: bool) -> Result<usize, KernelError> {
        let clamped = match ScaledRounding::of(x) {
            Some(r) => {
                let t = self.scaled_by_reciprocal(&r)?;
                let clamped = self.clamped(t, true, saturated_by_packing)?;
                self.free.push(t);
                clamped
            }
            None => {
                let v = self.value(x)?;
                self.clamped(v, false, saturated_by_packing)?
            }
        };
        self.release(x);
        Ok(clamped)
    }

    /// `v` clamped and converted as `converted` says, into a fresh register; `rounds`: to
    /// nearest (the reciprocal path leaves `round` to the conversion; clamping to integral
    /// bounds first commutes with rounding), else truncated.
    fn clamped(&mut self, v: usize, rounds: bool, saturated_by_packing: bool) -> Result<usize, KernelError> {
        let out = self.decl.output.dtype();
        let clamped = self.allocate()?;
        let (lo, hi) = if out == DType::U8 { (0.0f32, 255.0f32) } else { (-128.0, 127.0) };
        let (lo, hi, zero) = (self.constant(lo.to_bits())?, self.constant(hi.to_bits())?, self.constant(0)?);
        let mut source = v;
        if out == DType::I8 {
            // NaN → +0 first: `vmaxps` below would give the lower bound, -128, and so would the
            // packing, from the conversion's 0x80000000.
            self.ordered_only(clamped, v, zero)?;
            source = clamped;
        }
        if saturated_by_packing {
            self.below_to_int(clamped, source, hi, rounds)?;
        } else {
            self.clamp_to_int(clamped, source, (lo, hi), rounds)?;
        }
        Ok(clamped)
    }

    /// `GROUP` vectors of a narrowing store from `COLUMN` on, each converted with the clamp
    /// from above only (`converted`), then narrowed by signed saturation to i16 and signed or unsigned
    /// saturation to bytes — which clamps from below: a NaN or a value below `i32::MIN`
    /// converts to `0x80000000`, which saturates to the lowest byte (a u8 NaN: 0, as the
    /// store's semantics; an i8 NaN was zeroed before). The packs interleave the vectors by
    /// 128-bit lanes; `vpermd` with `permutation` puts their dwords back in order.
    fn group(&mut self, x: &Expr, permutation: usize) -> Result<(), KernelError> {
        let out = self.decl.output.dtype();
        let lanes = self.width.lanes() as i32;
        let mut held = Vec::new();
        match (ScaledRounding::of(x), self.width) {
            (Some(r), VectorWidth::Zmm) => {
                for t in self.scaled_group(&r)? {
                    held.push(self.clamped(t, true, true)?);
                    self.free.push(t);
                }
            }
            _ => {
                for g in 0..GROUP as i32 {
                    self.offset = g * lanes;
                    self.live.clear();
                    held.push(self.converted(x, true)?);
                }
            }
        }
        self.offset = 0;
        let arg = self.decl.inputs.len();
        let [v0, v1, v2, v3] = held[..] else { unreachable!("GROUP is 4") };
        match self.width {
            VectorWidth::Zmm => {
                self.a.vpackssdw(zmm(v0), zmm(v0), zmm(v1))?;
                self.a.vpackssdw(zmm(v2), zmm(v2), zmm(v3))?;
                if out == DType::U8 {
                    self.a.vpackuswb(zmm(v0), zmm(v0), zmm(v2))?;
                } else {
                    self.a.vpacksswb(zmm(v0), zmm(v0), zmm(v2))?;
                }
                self.a.vpermd(zmm(v0), zmm(permutation), zmm(v0))?;
                self.a.vmovdqu8(zmmword_ptr(ARGS[arg] + COLUMN), zmm(v0))?;
            }
            VectorWidth::Ymm => {
                self.a.vpackssdw(ymm(v0), ymm(v0), ymm(v1))?;
                self.a.vpackssdw(ymm(v2), ymm(v2), ymm(v3))?;
                if out == DType::U8 {
                    self.a.vpackuswb(ymm(v0), ymm(v0), ymm(v2))?;
                } else {
                    self.a.vpacksswb(ymm(v0), ymm(v0), ymm(v2))?;
                }
                self.a.vpermd(ymm(v0), ymm(permutation), ymm(v0))?;
                self.a.vmovdqu(ymmword_ptr(ARGS[arg] + COLUMN), ymm(v0))?;
            }
        }
        self.free.extend(held);
        Ok(())
    }

    /// A register holding the dword permutation that undoes the packs' interleaving: after
    /// them, dword `j` of 128-bit lane `i` holds (as 4 bytes) lane `i` of vector `j`, which
    /// belongs at dword `L·j + i` (`L` 128-bit lanes per vector); so dword `p` takes dword
    /// `4·(p % L) + p / L`. Loaded once, like the constants.
    fn permutation(&mut self) -> Result<usize, KernelError> {
        let r = self.free.iter().copied().max().ok_or(KernelError::Unsupported {
            what: format!("a body needing more than {} vector registers", self.width.registers()),
        })?;
        self.free.retain(|&f| f != r);
        let l = self.width.lanes() / 4;
        let index: Vec<u8> = (0..self.width.lanes()).map(|p| (4 * (p % l) + p / l) as u8).collect();
        let word = |bytes: &[u8]| u64::from_le_bytes(bytes.try_into().expect("8 indices"));
        // The bytes are assembled in the lowest free register: `vmovq` from a general register
        // takes only xmm0–xmm15.
        let scratch = self.allocate()?;
        self.a.mov(r11, word(&index[..8]) as i64)?;
        self.a.vmovq(xmm(scratch), r11)?;
        if index.len() > 8 {
            self.a.mov(r11, word(&index[8..]) as i64)?;
            self.a.vpinsrq(xmm(scratch), xmm(scratch), r11, 1)?;
        }
        match self.width {
            VectorWidth::Zmm => self.a.vpmovzxbd(zmm(r), xmm(scratch))?,
            VectorWidth::Ymm => self.a.vpmovzxbd(ymm(r), xmm(scratch))?,
        }
        self.free.push(scratch);
        Ok(r)
    }

    /// `dst` = `src` clamped from above to `hi` (a NaN stays NaN) as i32, rounded to nearest
    /// even or truncated; below the output's range it is whatever the packing saturates.
    fn below_to_int(&mut self, dst: usize, src: usize, hi: usize, rounds: bool) -> Result<(), KernelError> {
        // `vminps` returns its second operand where either is NaN.
        match self.width {
            VectorWidth::Zmm => self.a.vminps(zmm(dst), zmm(hi), zmm(src))?,
            VectorWidth::Ymm => self.a.vminps(ymm(dst), ymm(hi), ymm(src))?,
        }
        self.convert_in_place(dst, rounds)
    }

    /// `dst` converted from f32 to i32 in place, rounded to nearest even or truncated.
    fn convert_in_place(&mut self, dst: usize, rounds: bool) -> Result<(), KernelError> {
        match (self.width, rounds) {
            (VectorWidth::Zmm, true) => self.a.vcvtps2dq(zmm(dst), zmm(dst))?,
            (VectorWidth::Zmm, false) => self.a.vcvttps2dq(zmm(dst), zmm(dst))?,
            (VectorWidth::Ymm, true) => self.a.vcvtps2dq(ymm(dst), ymm(dst))?,
            (VectorWidth::Ymm, false) => self.a.vcvttps2dq(ymm(dst), ymm(dst))?,
        }
        Ok(())
    }

    /// `x / s + zp` into a fresh register, to be rounded to nearest even by the store's
    /// conversion (`ScaledRounding`): `t = x·(1/s) + zp` in one FMA, kept when every lane lies
    /// farther than `0.5 - 2^-10` from the half-integers around its rounding; else the vector is
    /// recomputed by the body's own operations (`vdivps`, `vaddps`).
    fn scaled_by_reciprocal(&mut self, r: &ScaledRounding<'_>) -> Result<usize, KernelError> {
        let vx = self.value(r.x)?;
        let [y, s, zp, abs, margin] = r.constants().map(|c| self.constant(c.to_bits()));
        let (y, s, zp, abs, margin) = (y?, s?, zp?, abs?, margin?);
        let (t, d) = (self.allocate()?, self.allocate()?);
        let mut done = self.a.create_label();
        const LT_OQ: i32 = 0x11;
        match self.width {
            VectorWidth::Zmm => {
                self.a.vmovaps(zmm(t), zmm(vx))?;
                self.a.vfmadd213ps(zmm(t), zmm(y), zmm(zp))?;
                // `t - round(t)`, exact.
                self.a.vreduceps(zmm(d), zmm(t), 0)?;
                self.a.vandps(zmm(d), zmm(d), zmm(abs))?;
                self.a.vcmpps(k3, zmm(d), zmm(margin), LT_OQ)?;
                if self.masked {
                    self.a.kortestw(k3, k4)?;
                } else {
                    self.a.kortestw(k3, k3)?;
                }
                // CF: every lane passed.
                self.a.jb(done)?;
                self.a.vdivps(zmm(t), zmm(vx), zmm(s))?;
                self.a.vaddps(zmm(t), zmm(t), zmm(zp))?;
            }
            VectorWidth::Ymm => {
                self.a.vmovaps(ymm(t), ymm(vx))?;
                self.a.vfmadd213ps(ymm(t), ymm(y), ymm(zp))?;
                self.a.vroundps(ymm(d), ymm(t), 0)?;
                self.a.vsubps(ymm(d), ymm(t), ymm(d))?;
                self.a.vandps(ymm(d), ymm(d), ymm(abs))?;
                self.a.vcmpps(ymm(d), ymm(d), ymm(margin), LT_OQ)?;
                self.a.vmovmskps(r11d, ymm(d))?;
                self.a.cmp(r11d, 0xff)?;
                self.a.je(done)?;
                self.a.vdivps(ymm(t), ymm(vx), ymm(s))?;
                self.a.vaddps(ymm(t), ymm(t), ymm(zp))?;
            }
        }
        self.a.set_label(&mut done)?;
        self.free.push(d);
        self.release(r.x);
        Ok(t)
    }

    /// `scaled_by_reciprocal` for the `GROUP` zmm vectors of a group, into fresh registers, with
    /// one check for all of them: `vrangeps` keeps the largest `|t - round(t)|` of the four
    /// (a NaN stays NaN and fails), so a group takes three `vrangeps`, one compare and one
    /// branch instead of an `and`, a compare and a branch per vector; where any lane of the
    /// group fails, the division recomputes the whole group (`x` evaluated again: its registers
    /// are freed meanwhile).
    fn scaled_group(&mut self, r: &ScaledRounding<'_>) -> Result<Vec<usize>, KernelError> {
        let lanes = self.width.lanes() as i32;
        let [y, s, zp, _, margin] = r.constants().map(|c| self.constant(c.to_bits()));
        let (y, s, zp, margin) = (y?, s?, zp?, margin?);
        const MAX_ABS_SIGN_CLEARED: i32 = 0b1011;
        const LT_OQ: i32 = 0x11;
        let (mut scaled, mut worst) = (Vec::new(), None);
        for g in 0..GROUP as i32 {
            self.offset = g * lanes;
            self.live.clear();
            let vx = self.value(r.x)?;
            let t = self.allocate()?;
            self.a.vmovaps(zmm(t), zmm(vx))?;
            self.a.vfmadd213ps(zmm(t), zmm(y), zmm(zp))?;
            self.release(r.x);
            let d = self.allocate()?;
            // `t - round(t)`, exact.
            self.a.vreduceps(zmm(d), zmm(t), 0)?;
            match worst {
                None => worst = Some(d),
                Some(w) => {
                    self.a.vrangeps(zmm(w), zmm(w), zmm(d), MAX_ABS_SIGN_CLEARED)?;
                    self.free.push(d);
                }
            }
            scaled.push(t);
        }
        let worst = worst.expect("a group has vectors");
        let mut done = self.a.create_label();
        self.a.vcmpps(k3, zmm(worst), zmm(margin), LT_OQ)?;
        self.a.kortestw(k3, k3)?;
        // CF: every lane passed.
        self.a.jb(done)?;
        self.free.push(worst);
        for (g, &t) in scaled.iter().enumerate() {
            self.offset = g as i32 * lanes;
            self.live.clear();
            let vx = self.value(r.x)?;
            self.a.vdivps(zmm(t), zmm(vx), zmm(s))?;
            self.a.vaddps(zmm(t), zmm(t), zmm(zp))?;
            self.release(r.x);
        }
        self.a.set_label(&mut done)?;
        Ok(scaled)
    }

    /// `dst` = `src` clamped to `[lo, hi]` (registers holding the bounds; a NaN gives `lo`) as
    /// i32, rounded to nearest even or truncated.
    fn clamp_to_int(
        &mut self,
        dst: usize,
        src: usize,
        (lo, hi): (usize, usize),
        rounds: bool,
    ) -> Result<(), KernelError> {
        match self.width {
            VectorWidth::Zmm => {
                self.a.vmaxps(zmm(dst), zmm(src), zmm(lo))?;
                self.a.vminps(zmm(dst), zmm(dst), zmm(hi))?;
            }
            VectorWidth::Ymm => {
                self.a.vmaxps(ymm(dst), ymm(src), ymm(lo))?;
                self.a.vminps(ymm(dst), ymm(dst), ymm(hi))?;
            }
        }
        self.convert_in_place(dst, rounds)
    }

    /// `dst = v` with NaN lanes replaced by +0 (`zero` holds +0).
    fn ordered_only(&mut self, dst: usize, v: usize, zero: usize) -> Result<(), KernelError> {
        const ORD_Q: i32 = 7;
        self.compare_select(dst, (v, v, ORD_Q), v, zero)
    }

    /// `dst = a <predicate> b ? t : f`, lane by lane (`vcmpps` immediate predicates).
    fn compare_select(
        &mut self,
        dst: usize,
        (a, b, predicate): (usize, usize, i32),
        t: usize,
        f: usize,
    ) -> Result<(), KernelError> {
        match self.width {
            VectorWidth::Zmm => {
                self.a.vcmpps(k3, zmm(a), zmm(b), predicate)?;
                self.a.vblendmps(zmm(dst).k3(), zmm(f), zmm(t))?;
            }
            VectorWidth::Ymm => {
                self.a.vcmpps(ymm(dst), ymm(a), ymm(b), predicate)?;
                self.a.vblendvps(ymm(dst), ymm(f), ymm(t), ymm(dst))?;
            }
        }
        Ok(())
    }

    /// One use of `e` done: its register is free after the last.
    fn release(&mut self, e: &Expr) {
        let key = node(e);
        if let Some((reg, left)) = self.live.get_mut(&key) {
            *left -= 1;
            if *left == 0 {
                let reg = *reg;
                self.live.remove(&key);
                self.free.push(reg);
            }
        }
    }

    /// The register holding `e` for the current vector (evaluated on first use).
    fn value(&mut self, e: &Expr) -> Result<usize, KernelError> {
        if let Some(&(reg, _)) = self.live.get(&node(e)) {
            return Ok(reg);
        }
        if let Some(reg) = self.constant_register(e) {
            return Ok(reg);
        }
        let reg = self.evaluate(e)?;
        self.live.insert(node(e), (reg, self.uses[&node(e)]));
        Ok(reg)
    }

    fn constant_register(&self, e: &Expr) -> Option<usize> {
        let bits = match e.kind() {
            ExprKind::Int(v) if e.dtype() == DType::I32 => *v as i32 as u32,
            ExprKind::Float(v) if e.dtype() == DType::F32 => (*v as f32).to_bits(),
            _ => return None,
        };
        self.constants.get(&bits).copied()
    }

    /// Emits `e` into a fresh register; its operands are released.
    fn evaluate(&mut self, e: &Expr) -> Result<usize, KernelError> {
        let Some(lane) = lane_of(e.dtype()) else {
            return self.unsupported(format!("`{e}` of {}", e.dtype()));
        };
        match e.kind() {
            ExprKind::TensorRead(t, _) => {
                let arg = self.input(t)?;
                if lane_of(t.dtype()).is_none() {
                    return self.unsupported(format!("a read of {} {t} outside a conversion", t.dtype()));
                }
                let dst = self.allocate()?;
                self.load(dst, ARGS[arg] + COLUMN * 4 + self.offset * 4)?;
                Ok(dst)
            }
            ExprKind::Binary(op, x, y) => {
                let vx = self.value(x)?;
                // A read used only here is the instruction's memory operand: one instruction
                // fewer per input and vector (the requantization reads three per vector).
                let vy = match self.folded_read(y, lane)? {
                    Some(mem) => Operand::Memory(mem),
                    None => Operand::Register(self.value(y)?),
                };
                let dst = self.allocate()?;
                self.binary(lane, *op, dst, vx, vy, e)?;
                self.release(x);
                self.release(y);
                Ok(dst)
            }
            ExprKind::Cast(x) => self.convert(lane, x, e),
            ExprKind::Round(x) if lane == Lane::F32 => {
                let vx = self.value(x)?;
                let dst = self.allocate()?;
                match self.width {
                    VectorWidth::Zmm => self.a.vrndscaleps(zmm(dst), zmm(vx), 0)?,
                    VectorWidth::Ymm => self.a.vroundps(ymm(dst), ymm(vx), 0)?,
                }
                self.release(x);
                Ok(dst)
            }
            ExprKind::Select(c, t, f) => self.select(c, t, f),
            _ => self.unsupported(format!("`{e}`")),
        }
    }

    /// The argument position of the declaration input `t`.
    fn input(&self, t: &Tensor) -> Result<usize, KernelError> {
        match self.decl.inputs.iter().position(|i| i.id() == t.id()) {
            Some(arg) => Ok(arg),
            None => self.unsupported(format!("a read of {t}, which is not an input")),
        }
    }

    fn load(&mut self, dst: usize, mem: AsmMemoryOperand) -> Result<(), KernelError> {
        match (self.width, self.masked) {
            (VectorWidth::Zmm, false) => self.a.vmovdqu32(zmm(dst), zmmword_ptr(mem))?,
            (VectorWidth::Zmm, true) => self.a.vmovdqu32(zmm(dst).k2().z(), zmmword_ptr(mem))?,
            (VectorWidth::Ymm, _) => self.a.vmovdqu(ymm(dst), ymmword_ptr(mem))?,
        }
        Ok(())
    }

    /// The memory operand of `y` when it is a full-vector read of an input of `lane`'s type
    /// used nowhere else (a masked vector loads it under k2 instead).
    fn folded_read(&self, y: &Expr, lane: Lane) -> Result<Option<AsmMemoryOperand>, KernelError> {
        let ExprKind::TensorRead(t, _) = y.kind() else { return Ok(None) };
        if self.masked || lane_of(t.dtype()) != Some(lane) || self.uses[&node(y)] != 1 {
            return Ok(None);
        }
        Ok(Some(ARGS[self.input(t)?] + COLUMN * 4 + self.offset * 4))
    }

    fn binary(&mut self, lane: Lane, op: BinOp, d: usize, x: usize, y: Operand, e: &Expr) -> Result<(), KernelError> {
        // One instruction per (width, lane, op); `$zy`/`$yy` are the second operand at zmm/ymm.
        macro_rules! emit {
            ($zy:expr, $yy:expr) => {
                match (self.width, lane, op) {
                    (VectorWidth::Zmm, Lane::I32, BinOp::Add) => self.a.vpaddd(zmm(d), zmm(x), $zy)?,
                    (VectorWidth::Zmm, Lane::I32, BinOp::Sub) => self.a.vpsubd(zmm(d), zmm(x), $zy)?,
                    (VectorWidth::Zmm, Lane::I32, BinOp::Mul) => self.a.vpmulld(zmm(d), zmm(x), $zy)?,
                    (VectorWidth::Zmm, Lane::F32, BinOp::Add) => self.a.vaddps(zmm(d), zmm(x), $zy)?,
                    (VectorWidth::Zmm, Lane::F32, BinOp::Sub) => self.a.vsubps(zmm(d), zmm(x), $zy)?,
                    (VectorWidth::Zmm, Lane::F32, BinOp::Mul) => self.a.vmulps(zmm(d), zmm(x), $zy)?,
                    (VectorWidth::Zmm, Lane::F32, BinOp::Div) => self.a.vdivps(zmm(d), zmm(x), $zy)?,
                    (VectorWidth::Ymm, Lane::I32, BinOp::Add) => self.a.vpaddd(ymm(d), ymm(x), $yy)?,
                    (VectorWidth::Ymm, Lane::I32, BinOp::Sub) => self.a.vpsubd(ymm(d), ymm(x), $yy)?,
                    (VectorWidth::Ymm, Lane::I32, BinOp::Mul) => self.a.vpmulld(ymm(d), ymm(x), $yy)?,
                    (VectorWidth::Ymm, Lane::F32, BinOp::Add) => self.a.vaddps(ymm(d), ymm(x), $yy)?,
                    (VectorWidth::Ymm, Lane::F32, BinOp::Sub) => self.a.vsubps(ymm(d), ymm(x), $yy)?,
                    (VectorWidth::Ymm, Lane::F32, BinOp::Mul) => self.a.vmulps(ymm(d), ymm(x), $yy)?,
                    (VectorWidth::Ymm, Lane::F32, BinOp::Div) => self.a.vdivps(ymm(d), ymm(x), $yy)?,
                    _ => return self.unsupported(format!("`{e}`")),
                }
            };
        }
        match y {
            Operand::Register(y) => emit!(zmm(y), ymm(y)),
            Operand::Memory(m) => emit!(zmmword_ptr(m), ymmword_ptr(m)),
        }
        Ok(())
    }

    /// `Cast` to i32 or f32: of i32 to f32, or of a u8/i8 input widened from memory.
    fn convert(&mut self, lane: Lane, x: &Expr, e: &Expr) -> Result<usize, KernelError> {
        if let ExprKind::TensorRead(t, _) = x.kind()
            && (t.dtype() == DType::U8 || t.dtype() == DType::I8)
        {
            let arg = self.input(t)?;
            let dst = self.allocate()?;
            let mem = ARGS[arg] + COLUMN + self.offset;
            let signed = t.dtype() == DType::I8;
            match (self.width, self.masked, signed) {
                (VectorWidth::Zmm, false, false) => self.a.vpmovzxbd(zmm(dst), xmmword_ptr(mem))?,
                (VectorWidth::Zmm, false, true) => self.a.vpmovsxbd(zmm(dst), xmmword_ptr(mem))?,
                (VectorWidth::Zmm, true, false) => self.a.vpmovzxbd(zmm(dst).k2().z(), xmmword_ptr(mem))?,
                (VectorWidth::Zmm, true, true) => self.a.vpmovsxbd(zmm(dst).k2().z(), xmmword_ptr(mem))?,
                (VectorWidth::Ymm, _, false) => self.a.vpmovzxbd(ymm(dst), qword_ptr(mem))?,
                (VectorWidth::Ymm, _, true) => self.a.vpmovsxbd(ymm(dst), qword_ptr(mem))?,
            }
            if lane == Lane::F32 {
                self.cvtdq2ps(dst, dst)?;
            }
            // The read node itself is not live: it has no vector of its own.
            return Ok(dst);
        }
        match (lane_of(x.dtype()), lane) {
            (Some(Lane::I32), Lane::F32) => {
                let vx = self.value(x)?;
                let dst = self.allocate()?;
                self.cvtdq2ps(dst, vx)?;
                self.release(x);
                Ok(dst)
            }
            (Some(from), to) if from == to => {
                let vx = self.value(x)?;
                let dst = self.allocate()?;
                self.copy(dst, vx)?;
                self.release(x);
                Ok(dst)
            }
            _ => self.unsupported(format!("`{e}`")),
        }
    }

    fn cvtdq2ps(&mut self, dst: usize, x: usize) -> Result<(), KernelError> {
        match self.width {
            VectorWidth::Zmm => self.a.vcvtdq2ps(zmm(dst), zmm(x))?,
            VectorWidth::Ymm => self.a.vcvtdq2ps(ymm(dst), ymm(x))?,
        }
        Ok(())
    }

    fn copy(&mut self, dst: usize, x: usize) -> Result<(), KernelError> {
        match self.width {
            VectorWidth::Zmm => self.a.vmovaps(zmm(dst), zmm(x))?,
            VectorWidth::Ymm => self.a.vmovaps(ymm(dst), ymm(x))?,
        }
        Ok(())
    }

    /// `c ? t : f` for a comparison `c` of two f32 values.
    fn select(&mut self, c: &Expr, t: &Expr, f: &Expr) -> Result<usize, KernelError> {
        let ExprKind::Cmp(op, x, y) = c.kind() else {
            return self.unsupported(format!("a select on `{c}`"));
        };
        if x.dtype() != DType::F32 || lane_of(t.dtype()).is_none() {
            return self.unsupported(format!("a select on `{c}`"));
        }
        // Ordered predicates (false when either side is NaN); `!=` is true on NaN.
        const EQ_OQ: i32 = 0x00;
        const NEQ_UQ: i32 = 0x04;
        const LT_OQ: i32 = 0x11;
        const LE_OQ: i32 = 0x12;
        let (a, b, predicate) = match op {
            CmpOp::Eq => (x, y, EQ_OQ),
            CmpOp::Ne => (x, y, NEQ_UQ),
            CmpOp::Lt => (x, y, LT_OQ),
            CmpOp::Le => (x, y, LE_OQ),
            CmpOp::Gt => (y, x, LT_OQ),
            CmpOp::Ge => (y, x, LE_OQ),
        };
        let (va, vb) = (self.value(a)?, self.value(b)?);
        let (vt, vf) = (self.value(t)?, self.value(f)?);
        let dst = self.allocate()?;
        self.compare_select(dst, (va, vb, predicate), vt, vf)?;
        for e in [a, b, t, f] {
            self.release(e);
        }
        Ok(dst)
    }
}

/// A binary instruction's second operand.
#[derive(Clone, Copy)]
enum Operand {
    Register(usize),
    Memory(AsmMemoryOperand),
}

// Register numbers come from `Gen::allocate` and `Gen::constant`, below the width's register
// count, so these lookups cannot fail.
fn zmm(r: usize) -> AsmRegisterZmm {
    get_zmm(Register::ZMM0 + r as u32).expect("allocated zmm register")
}

fn ymm(r: usize) -> AsmRegisterYmm {
    get_ymm(Register::YMM0 + r as u32).expect("allocated ymm register")
}

fn xmm(r: usize) -> AsmRegisterXmm {
    get_xmm(Register::XMM0 + r as u32).expect("allocated xmm register")
}
