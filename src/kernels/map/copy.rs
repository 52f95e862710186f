//! The map kernel of a copy, `out[p, c] = x[p, c]` of one dtype (the gathered rows of a
//! convolution, `schedules::intrin::copy_map`): each row's bytes moved in whole vectors, with
//! no arithmetic, so any dtype. The row's last partial vector is masked on bytes (zmm: opmask k2,
//! masked-off bytes never accessed) or is the row's last whole vector, overlapping the one
//! before (ymm; xmm or 8 bytes for rows shorter than a vector; rows under 8 bytes are
//! `Unsupported`: the loops copy them). A zmm row shorter than a zmm vector (a kernel row of
//! the stem, 21 or 24 bytes) and at least 8 bytes long is copied as at ymm, by two overlapping
//! moves: masked stores are slow on some cores, and such a row is all tail.

use iced_x86::code_asm::*;
use ir::expr::ExprKind;
use ir::intrin::TensorIntrin;

use super::MapShape;
use super::registers::{ARGS, COLUMN, ROW_COUNT};
use crate::error::KernelError;
use crate::isa::VectorWidth;
use crate::kernels::imm32;

/// Whether `decl` (a checked `Map` declaration) is a copy: its body one read of its one input,
/// which is `[m, n]` of the output's dtype.
pub(super) fn is_copy(decl: &TensorIntrin) -> bool {
    let Some(body) = decl.output.body() else { return false };
    match (body.kind(), decl.inputs.as_slice()) {
        (ExprKind::TensorRead(t, index), [x]) => {
            t == x && index.len() == 2 && x.dtype() == decl.output.dtype() && x.shape() == decl.output.shape()
        }
        _ => false,
    }
}

/// The copy kernel of `shape` (`m` rows of `n` elements of `bytes` bytes) at `width`, under the
/// map kernels' signature `fn(x, out)`.
pub(super) fn assemble_copy(width: VectorWidth, shape: &MapShape, bytes: i64) -> Result<Vec<u8>, KernelError> {
    let row = shape.n * bytes;
    let vector = width.bytes() as i64;
    if width == VectorWidth::Ymm && row < 8 {
        return Err(KernelError::Unsupported { what: format!("a copy of {row}-byte rows on ymm (at least 8)") });
    }
    let (src, dst) = (ARGS[0], ARGS[1]);
    let mut a = CodeAssembler::new(64)?;
    let (full, tail) = (row / vector * vector, row % vector);
    // The tail moved by overlapping unmasked moves (below) rather than under a mask.
    let overlapping = width == VectorWidth::Ymm || (full == 0 && row >= 8);
    if !overlapping && tail > 0 {
        a.mov(r11, ((1u128 << tail) - 1) as u64)?;
        a.kmovq(k2, r11)?;
    }
    let mut row_top = a.create_label();
    if shape.m > 1 {
        a.mov(ROW_COUNT, shape.m)?;
    }
    a.set_label(&mut row_top)?;
    if full > 0 {
        a.xor(eax, eax)?;
        let mut column_top = a.create_label();
        a.set_label(&mut column_top)?;
        match width {
            VectorWidth::Zmm => {
                a.vmovdqu8(zmm0, zmmword_ptr(src + COLUMN))?;
                a.vmovdqu8(zmmword_ptr(dst + COLUMN), zmm0)?;
            }
            VectorWidth::Ymm => {
                a.vmovdqu(ymm0, ymmword_ptr(src + COLUMN))?;
                a.vmovdqu(ymmword_ptr(dst + COLUMN), ymm0)?;
            }
        }
        a.add(COLUMN, imm32("a vector", vector)?)?;
        a.cmp(COLUMN, imm32("a row", full)?)?;
        a.jb(column_top)?;
    }
    if tail > 0 {
        match width {
            _ if !overlapping => {
                let at = imm32("a row", full)?;
                a.vmovdqu8(zmm0.k2().z(), zmmword_ptr(src + at))?;
                a.vmovdqu8(zmmword_ptr(dst + at).k2(), zmm0)?;
            }
            VectorWidth::Ymm if row >= vector => {
                let at = imm32("a row", row - vector)?;
                a.vmovdqu(ymm0, ymmword_ptr(src + at))?;
                a.vmovdqu(ymmword_ptr(dst + at), ymm0)?;
            }
            _ if row >= 32 => {
                // Two ymm moves, the second ending at the row's end.
                let at = imm32("a row", row - 32)?;
                a.vmovdqu(ymm0, ymmword_ptr(src))?;
                a.vmovdqu(ymm1, ymmword_ptr(src + at))?;
                a.vmovdqu(ymmword_ptr(dst), ymm0)?;
                a.vmovdqu(ymmword_ptr(dst + at), ymm1)?;
            }
            _ if row >= 16 => {
                let at = imm32("a row", row - 16)?;
                a.vmovdqu(xmm0, xmmword_ptr(src))?;
                a.vmovdqu(xmm1, xmmword_ptr(src + at))?;
                a.vmovdqu(xmmword_ptr(dst), xmm0)?;
                a.vmovdqu(xmmword_ptr(dst + at), xmm1)?;
            }
            _ => {
                let at = imm32("a row", row - 8)?;
                a.mov(rax, qword_ptr(src))?;
                a.mov(r11, qword_ptr(src + at))?;
                a.mov(qword_ptr(dst), rax)?;
                a.mov(qword_ptr(dst + at), r11)?;
            }
        }
    }
    if shape.m > 1 {
        let steps = [(src, shape.row_strides[0]), (dst, shape.row_strides[1])];
        for (pointer, stride) in steps {
            if stride != 0 {
                a.add(pointer, imm32("a row", stride * bytes)?)?;
            }
        }
        a.dec(ROW_COUNT)?;
        a.jnz(row_top)?;
    }
    a.vzeroupper()?;
    a.ret()?;
    Ok(crate::kernels::encode::encode(&mut a)?)
}
