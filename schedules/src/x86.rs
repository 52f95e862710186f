//! x86 schedules that hand the innermost tile to a tensor intrinsic (AVX-512 VNNI kernels).

use ir::schedule::{Schedule, create_schedule};
use ir::{ScheduleError, Tensor};

use crate::intrin::gemm_segmented_microkernel;

/// The decisions of the int8 GEMM schedule. A tuner varies these and nothing else.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GemmInt8Knobs {
    /// Rows of the call's tile (capped at M). The kernel blocks a tile of any size into
    /// registers (one broadcast of A per row and `k` step).
    pub mr: i64,
    /// Columns of the call's tile (capped at N): must equal the `nr` that `nn::pack_b_vnni`
    /// (or `pack_b_i16`) packed `B` with. A multiple of 16 fills zmm registers (16 i32 lanes
    /// each); other widths mask the last vector.
    pub nr: i64,
    /// Run the tile loops (row tiles fused with column tiles) on the thread pool.
    pub parallel: bool,
}

impl Default for GemmInt8Knobs {
    /// `8 × 32`: 16 zmm accumulators, leaving registers for the two B panels and A broadcasts.
    fn default() -> GemmInt8Knobs {
        GemmInt8Knobs { mr: 8, nr: 32, parallel: true }
    }
}

/// The widest tile column count: the fallback loops compute a row of a tile as one vector of
/// `nr` lanes.
pub const MAX_NR: i64 = ir::schedule::MAX_LANES;

impl GemmInt8Knobs {
    /// The knobs for an `m × n` output (`i16_pairs`: B packed by `pack_b_i16`), parallel.
    ///
    /// A tile that sticks out of C runs the call's fallback loops, which are exact but far
    /// slower than a kernel, while a kernel runs a tile of any size at full speed (it blocks
    /// the tile into registers itself, with partial row blocks and masked column vectors). So
    /// the tiles divide C wherever they can: the shapes that `8 × 32` (`8 × 16`) divides keep
    /// them; other M take their largest divisor in 4..=8, else their smallest in 9..=64 (M
    /// itself below 4); other N take 16 where it divides, else all of N up to `MAX_NR` columns
    /// (one panel), else their largest divisor in 16..=`MAX_NR`. Only an M with no such divisor
    /// leaves `M mod 8` rows to the fallback, and only an N with none leaves `N mod 16` columns
    /// (the last panel padded with zeros).
    pub fn for_shape(m: i64, n: i64, i16_pairs: bool) -> GemmInt8Knobs {
        let mr = [8, 7, 6, 5, 4].into_iter().chain(9..=64).find(|d| m % d == 0).unwrap_or(m.clamp(1, 8));
        // A 32-column panel of i16 pairs has the bytes of a 64-column one of u8.
        let preferred = if i16_pairs { [16, 32] } else { [32, 16] };
        let nr = preferred
            .into_iter()
            .find(|d| n % d == 0)
            .or_else(|| (n <= MAX_NR).then_some(n.max(1)))
            .or_else(|| (16..=MAX_NR).rev().find(|d| n % d == 0))
            .unwrap_or(16);
        GemmInt8Knobs { mr, nr, parallel: true }
    }
}

/// A schedule for `c = nn::matmul_packed(A, pack_b_vnni(B, knobs.nr), N, i32)` (or
/// `pack_b_i16` with an i16 `A`); see `schedule_gemm_int8`.
pub fn gemm_int8(c: &Tensor, knobs: GemmInt8Knobs) -> Result<Schedule, ScheduleError> {
    let mut s = create_schedule(&[c]);
    schedule_gemm_int8(&mut s, c, knobs)?;
    Ok(s)
}

/// Schedules the packed matmul stage `c: [M, N]` of `s` as
/// `i.outer, j.outer { call int8_gemm_{mr}x{nr}x{K}(..) }` (with `parallel`, the two loops
/// fused into one parallel loop over the tiles): rows split by `mr`, columns by `nr` (each
/// capped at C's extent, so that a C smaller than a tile is one tile), loops ordered
/// `i.outer, j.outer, ko, ki, i.inner, j.inner` so that the region under `ko` is exactly (all of
/// `K`, `mr` rows, `nr` columns), which is tensorized with the exact
/// `int8_gemm_microkernel(mr, nr, K)` (`int16_gemm_…` for operands packed in i16 pairs).
/// `j.inner` is vectorized (it serves the fallback). A tile that sticks out of C (the last
/// `M mod mr` rows, `N mod nr` columns) runs the fallback loops; `GemmInt8Knobs::for_shape`
/// picks tiles that leave none where it can. Typed errors from the primitives otherwise, e.g.
/// a `TensorizeMismatch` if `c` is not such a matmul or `nr` differs from the packing.
pub fn schedule_gemm_int8(s: &mut Schedule, c: &Tensor, knobs: GemmInt8Knobs) -> Result<(), ScheduleError> {
    let extent = |d: usize| c.shape().get(d).copied().unwrap_or(1).max(1);
    let (mr, nr) = (knobs.mr.min(extent(0)), knobs.nr.min(extent(1)));
    let (io, jo, ii, ji) = s.tile(c, &c.axis(0), &c.axis(1), mr, nr)?;
    let reduce = c.reduce_axes();
    let mut order = vec![&io, &jo];
    order.extend(reduce.iter());
    order.extend([&ii, &ji]);
    s.reorder(c, &order)?;
    s.vectorize(c, &ji)?;
    if knobs.parallel {
        // Row tiles × column tiles, so that a GEMM with few row tiles (49 pixels in 7-row tiles)
        // still has a task per thread.
        let tiles = s.fuse(c, &io, &jo)?;
        s.parallel(c, &tiles)?;
    }
    let pack = reduce.get(1).map_or(4, |ki| ki.extent());
    let k = reduce.first().map_or(pack, |ko| ko.extent() * pack);
    // The A operand's dtype follows from the packing: i16 pairs pair with an i16 A.
    let a_dtype = if pack == 2 { ir::DType::I16 } else { ir::DType::U8 };
    let intrin = gemm_segmented_microkernel(mr, nr, 1, k, a_dtype)
        .expect("tile sizes passed split and k is a multiple of the packing");
    s.tensorize(c, reduce.first().unwrap_or(&ii), &intrin)
}

/// Schedules `source`, a copy of A that `nn::gemm_source` made (widened, or padded along K), as a
/// row loop (parallel with `parallel`) over rows vectorized 16 lanes at a time.
pub fn schedule_gemm_source(s: &mut Schedule, source: &Tensor, parallel: bool) -> Result<(), ScheduleError> {
    let (_, lanes) = s.split(source, &source.axis(1), 16)?;
    s.vectorize(source, &lanes)?;
    if parallel {
        s.parallel(source, &source.axis(0))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nn::{gemm_source, matmul, matmul_packed, pack_b_vnni};
    use ir::DType;
    use ir::interp::{Array, eval_te, run_func};
    use ir::te::placeholder;

    /// `C = A · B` for `A: u8[m, k]`, `B: i8[k, n]` through `gemm_source`, `pack_b_vnni` and
    /// `gemm_int8`, checked against `matmul(A, B)` by both interpreters; returns the lowered IR.
    fn gemm(m: i64, n: i64, k: i64, knobs: GemmInt8Knobs) -> String {
        let a = placeholder([m, k], DType::U8, "A").unwrap();
        let b = placeholder([k, n], DType::I8, "B").unwrap();
        let bp = pack_b_vnni(&b, knobs.nr, "Bp").unwrap();
        let source = gemm_source(&a, 4, DType::U8, "A4").unwrap();
        let c = matmul_packed(source.as_ref().unwrap_or(&a), &bp, n, DType::I32, "C").unwrap();
        let mut s = gemm_int8(&c, knobs).unwrap();
        if let Some(source) = &source {
            schedule_gemm_source(&mut s, source, knobs.parallel).unwrap();
        }
        let f = ir::lower::lower(&s, &[&a, &b, &c], "gemm").unwrap();
        let a_vals: Vec<i64> = (0..m * k).map(|x| (x * 97 + 13) % 256).collect();
        let b_vals: Vec<i64> = (0..k * n).map(|x| (x * 59 + 7) % 256 - 128).collect();
        let (a_arr, b_arr) =
            (Array::from_i64(DType::U8, &[m, k], &a_vals), Array::from_i64(DType::I8, &[k, n], &b_vals));
        let reference = matmul(&a, &b, DType::I32, "R").unwrap();
        let want = eval_te(&[&reference], &[(&a, &a_arr), (&b, &b_arr)]).unwrap().remove(0);
        let mut args = vec![a_arr, b_arr, Array::zeros(DType::I32, &[m, n])];
        run_func(&f, &mut args).unwrap();
        assert!(args[2].bits_eq(&want), "{:?}\n{f}", args[2].first_difference(&want));
        f.to_string()
    }

    const PACK: &str = "  allocate Bp: i8[2, 2, 16, 4]
  for i in 0..2 {
    for j in 0..2 {
      for k in 0..16 {
        for l in 0..4 {
          Bp[i*128 + j*64 + k*4 + l] = B[j*128 + l*32 + i*16 + k]
        }
      }
    }
  }
";

    #[test]
    fn a_tensorized_gemm_lowers_to_one_resetting_call_per_tile() {
        let knobs = GemmInt8Knobs { mr: 4, nr: 16, parallel: true };
        let expected = format!(
            "func gemm(A: u8[8, 8], B: i8[8, 32], C: i32[8, 32]) {{
{PACK}  parallel i.outer.j.outer.fused in 0..4 {{
    call reset int8_gemm_4x16x8(A[i.outer.j.outer.fused/2*32] strides [8, 1], Bp[i.outer.j.outer.fused%2*128] strides [64, 4, 1], C[i.outer.j.outer.fused/2*128 + i.outer.j.outer.fused%2*16] strides [32, 1])
  }}
}}
"
        );
        assert_eq!(gemm(8, 32, 8, knobs), expected);
    }

    #[test]
    fn rows_that_do_not_fill_a_tile_call_the_kernel_of_their_rows() {
        let knobs = GemmInt8Knobs { mr: 4, nr: 16, parallel: false };
        let tile = "(A[i.outer*32] strides [8, 1], Bp[j.outer*128] strides [64, 4, 1], C[i.outer*128 + j.outer*16] strides [32, 1])";
        let expected = format!(
            "func gemm(A: u8[6, 8], B: i8[8, 32], C: i32[6, 32]) {{
{PACK}  for i.outer in 0..2 {{
    for j.outer in 0..2 {{
      if i.outer < 1 {{
        call reset int8_gemm_4x16x8{tile}
      }} else {{
        call reset int8_gemm_4x16x8_i2{tile}
      }}
    }}
  }}
}}
"
        );
        assert_eq!(gemm(6, 32, 8, knobs), expected);
    }

    #[test]
    fn default_knobs_and_uneven_sizes_match_the_definition() {
        assert_eq!(GemmInt8Knobs::default(), GemmInt8Knobs { mr: 8, nr: 32, parallel: true });
        gemm(19, 64, 20, GemmInt8Knobs::default());
        gemm(5, 48, 4, GemmInt8Knobs { mr: 3, nr: 48, parallel: true });
    }

    /// Calls of the kernel in `ir`, and whether any tile is a partial one (its call, or the
    /// fallback loops, under a condition on the tile).
    fn calls(ir: &str) -> (usize, bool) {
        (ir.matches("call reset int8_gemm_").count(), ir.contains("} else {"))
    }

    #[test]
    fn odd_shapes_are_padded_and_tiles_capped_at_the_output() {
        // K = 7: A is copied with a zero column; B's packing holds a zero row.
        let ir = gemm(3, 16, 7, GemmInt8Knobs { mr: 8, nr: 16, parallel: false });
        assert!(ir.contains("call reset int8_gemm_3x16x8("), "{ir}");
        assert!(ir.contains("A4[") && !ir.contains("} else {"), "{ir}");
        // N = 20 in one 32-column panel (12 zero columns): the tile is 20 columns wide.
        let ir = gemm(5, 20, 8, GemmInt8Knobs::default());
        assert_eq!(calls(&ir), (1, false), "{ir}");
        assert!(ir.contains("call reset int8_gemm_5x20x8("), "{ir}");
        // N = 45 in 16-column panels: the last tile's 13 columns call the kernel of 13 columns.
        let ir = gemm(8, 45, 12, GemmInt8Knobs { mr: 8, nr: 16, parallel: true });
        assert_eq!(calls(&ir), (2, true), "{ir}");
        assert!(ir.contains("call reset int8_gemm_8x16x12_j13("), "{ir}");
        for (m, n, k) in [(1, 1, 1), (1, 16, 4), (7, 48, 12), (37, 45, 70), (17, 3, 1), (9, 1, 13)] {
            gemm(m, n, k, GemmInt8Knobs::default());
            let knobs = GemmInt8Knobs::for_shape(m, n, false);
            let ir = gemm(m, n, k, knobs);
            // `for_shape` leaves no tile to the fallback on these shapes.
            assert_eq!(calls(&ir), (1, false), "{m}x{n}x{k} {knobs:?}\n{ir}");
        }
    }

    #[test]
    fn knobs_for_a_shape_divide_it_where_they_can() {
        let tile = |m, n, pairs| {
            let k = GemmInt8Knobs::for_shape(m, n, pairs);
            assert!(k.parallel);
            (k.mr, k.nr)
        };
        assert_eq!(tile(512, 512, false), (8, 32));
        assert_eq!(tile(512, 512, true), (8, 16));
        assert_eq!(tile(20, 48, false), (5, 16));
        assert_eq!(tile(1, 1, false), (1, 1));
        assert_eq!(tile(3, 7, true), (3, 7));
        assert_eq!(tile(37, 45, false), (37, 45));
        assert_eq!(tile(49, 200, false), (7, 200));
        assert_eq!(tile(1000, 1000, false), (8, 250));
        // Primes past the limits leave tails: 67 rows (8 tiles and 3 rows), 257 columns.
        assert_eq!(tile(67, 257, false), (8, 16));
    }

    #[test]
    fn a_packing_width_other_than_the_tile_is_a_tensorize_mismatch() {
        let a = placeholder([8, 8], DType::U8, "A").unwrap();
        let b = placeholder([8, 64], DType::I8, "B").unwrap();
        let c = matmul_packed(&a, &pack_b_vnni(&b, 16, "Bp").unwrap(), 64, DType::I32, "C").unwrap();
        let err = gemm_int8(&c, GemmInt8Knobs { mr: 4, nr: 32, parallel: true }).unwrap_err();
        assert!(matches!(&err, ScheduleError::TensorizeMismatch(m) if m.part == ir::MismatchPart::NonAffine), "{err}");
        let plain = matmul(&a, &b, DType::I32, "C").unwrap();
        let err = gemm_int8(&plain, GemmInt8Knobs { mr: 4, nr: 16, parallel: true }).unwrap_err();
        assert!(matches!(&err, ScheduleError::TensorizeMismatch(m) if m.part == ir::MismatchPart::LoopCount), "{err}");
        let err = gemm_int8(&c, GemmInt8Knobs { mr: 0, nr: 16, parallel: true }).unwrap_err();
        assert!(matches!(err, ScheduleError::BadSplitFactor { found: 0, .. }));
    }
}
