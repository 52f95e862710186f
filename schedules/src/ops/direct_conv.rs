//! The int8 convolution as the direct convolution x86 schedules tensorize
//! (`conv2d_int8_direct`): a padded channels-last source read in place, packed weights, an
//! accumulator with panel-padded channels, in NCHW or NHWC.

use ir::expr::{max as index_max, min as index_min, select};
use ir::intrin::TensorIntrin;
use ir::te::{Tensor, compute_vec, placeholder_vec, placeholder_vec_in_range, reduce_axis, sum};
use ir::{DType, Expr};

use super::checks::{ceil_div, dtype_error, shape_error};
use super::conv::{Conv2dParams, ConvGeometry, conv_geometry};
use super::gemm_operands::{GemmOperands, shifted_source, source_shift};
use super::layer::{Requantized, check_layer_attrs, requantize_layer, requantize_map};
use super::layout::Layout;
use super::packing::{conv_row_bytes, im2col_k};
use super::space_to_depth::{space_to_depth_applies, space_to_depth_dims};
use crate::quant::{Param, Params, QuantAttrs, QuantError, Requantization};

/// How the accumulator of `conv2d_int8_direct` reads the padded source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceRows {
    /// In place, per output row: one GEMM segment of `R` bytes per kernel row.
    Padded,
    /// Over flat rows where they apply (`DirectConvLayer::flat`), else `Padded`.
    Flat,
    /// Each pixel's receptive field gathered into one row (`DirectConvLayer::im2col`) of
    /// `K = im2col_k(IC, KH, KW, align)` bytes: one GEMM segment of `K` for the whole kernel,
    /// which fills a wide reduction (an AMX tile's 64 bytes) where `R` is short.
    Im2col { align: i64 },
    /// In place, per output row, after space to depth where it applies (`space_to_depth`: a
    /// kernel larger than 1×1 at a stride above 1): the source's `s × s` blocks of pixels as the
    /// `s²·IC` channels of one pixel, so that the GEMM runs a kernel of `⌈KH/s⌉` rows of
    /// `R = conv_row_bytes(s²·IC, ⌈KW/s⌉)` bytes at stride 1. Elsewhere `Padded`.
    SpaceToDepth,
}

/// The stages of `conv2d_int8_direct`, with `R = conv_row_bytes(IC, KW)` (of the kernel the GEMM
/// runs: `gemm_kernel`).
#[derive(Clone, Debug)]
pub struct DirectConvLayer {
    /// Placeholder `i32[OC]`: bind `compensation(weights, ..)` (as for `conv2d_nchw_int8`).
    pub compensation: Tensor,
    /// Placeholder `i8[⌈OC/nr⌉, K/4, nr, 4]` (`i16[⌈OC/nr⌉, K/2, nr, 2]` for an i16
    /// source), `K = KH·R` (`im2col_k` with gathered rows): bind
    /// `pack_conv2d_weights(weights, nr, operands, K)`.
    pub packed_weights: Tensor,
    /// The source as `GemmOperands::source` when it is not already (`<name>.shifted`: shifted
    /// by -128 to i8, or widened to i16).
    pub shifted: Option<Tensor>,
    /// `u8[N, HS, RS]` (`<name>.pad`; of the `GemmOperands::source` dtype): the source channels
    /// last, row by row (pixel `x`'s `IC` channels at `x·IC`), padded by `pad` pixels with the
    /// (shifted) source zero point; each row holds at least `WS·IC + R - KW·IC` elements (the last
    /// pixel's kernel row reads up to `R`), rounded up to a multiple of 16 so that rows vectorize
    /// whole. A 1×1
    /// kernel reads its source here already subsampled by the stride (`HS = OH`, `WS = OW`; the
    /// accumulator then runs at stride 1). With flat rows (`flat`), `u8[N, HS·WS·IC]`: the
    /// same rows unrounded, end to end. Under space to depth (`space_to_depth`), which the GEMM
    /// reads instead, rows of `WS·IC` (rounded up to 16), and as many rows and pixels as it
    /// copies, past the padding's if need be (the pad value there, under zero weights).
    pub padded: Tensor,
    /// `i32[N, OH, OW, ⌈OC/nr⌉·nr]` (`<name>.acc`): reduction axes `ky` (`KH`), `ko` (`R/P`)
    /// and `ki` (`P`, `GemmOperands::pack`). For a fixed `ky`, the `R` elements a pixel reads
    /// are contiguous in `padded`, and consecutive pixels of a row are `stride·IC` apart: a GEMM of `mr` pixels ×
    /// `nr` channels × `R` per `ky` with no copy of the source. With flat rows,
    /// `i32[N, OH·WS - (KW - 1), ⌈OC/nr⌉·nr]`: virtual pixel `v = y·WS + x` reads
    /// `padded[n, (v + ky·WS)·IC + r]`, so a GEMM's rows span output rows (the `KW - 1` junk
    /// pixels at the end of each row are computed, never read).
    pub acc: Tensor,
    /// The requantized output, `[N, OC, OH, OW]` or `[N, OH, OW, OC]` by the layout.
    pub output: Tensor,
    /// The requantization multipliers `src_scale · wei_scale[oc]` in f32 (a parameter when the
    /// weight scale mask is 1).
    pub params: Vec<Param>,
    /// The requantization of one output row of `OW` pixels × `OC` channels (`requantize_map`):
    /// what an NHWC schedule tensorizes the output's pixel loop with.
    pub requantize_row: TensorIntrin,
    /// `Some(WS)` where the accumulator runs over flat rows: asked for, at stride 1 (a 1×1
    /// kernel after its subsampling) and with `R = KW·IC`; else `None`, the per-row layout.
    pub flat: Option<i64>,
    /// With `SourceRows::Im2col`, the gathered rows `[N, OH, OW, C·R]` (`<name>.im2col`, of the
    /// GEMM source's dtype; `C = ⌈K/R⌉`): `im2col[b, y, x, c·R + r] = padded[b, y·s + min(c,
    /// KH - 1), x·s·IC + r]`, so that the first `KH·R` bytes of a row are the pixel's kernel rows
    /// end to end and the rest (weights zero there) repeat the last; the accumulator then reads
    /// `K` bytes per pixel, rows `C·R` apart, in one segment.
    pub im2col: Option<Tensor>,
    /// `[IC, KH, KW]` of the kernel the GEMM runs: the weights', or after space to depth
    /// (`SourceRows::SpaceToDepth`, where it applies) `[s²·IC, ⌈KH/s⌉, ⌈KW/s⌉]`, whose
    /// source is `padded` with pixel `(Y, X)`'s channel `(dy·s + dx)·IC + c` holding the padded
    /// pixel `(Y·s + dy, X·s + dx)`'s channel `c`, and which runs at stride 1.
    pub gemm_kernel: [i64; 3],
    /// After space to depth at stride `s` (`SourceRows::SpaceToDepth`, where it applies), the
    /// rows the GEMM reads, `[N, OH + KH' - 1, X·s²·IC]` (`<name>.space_to_depth`, `KH'` and
    /// `X` whole pixels covering what a row reads), with the `s·IC` bytes each pixel takes from
    /// one padded row: channel `dy·(s·IC) + j` of pixel `X` in row `Y` is `padded[b, Y·s + dy,
    /// X·s·IC + j]` (`padded` is then tall and wide enough); else `None`.
    pub space_to_depth: Option<(Tensor, i64)>,
}

/// The int8 convolution of `conv2d_nchw_int8` (same meaning, bit for bit) with source and output
/// (and sum input) in `layout`, defined as the direct convolution an x86 schedule tensorizes
/// (`DirectConvLayer`): the weights come packed by `pack_conv2d_weights(weights, nr, operands)`
/// (`weights` is only the shape and dtype here), the accumulator has `nr`-padded channels, the
/// GEMM reads its operands as `operands` says, the source as `rows` says. Errors also for a
/// weight range without 0, a source dtype other than u8 or i8, or an `Im2col` alignment not a
/// positive multiple of 4.
#[allow(clippy::too_many_arguments)]
pub fn conv2d_int8_direct(
    src: &Tensor,
    weights: &Tensor,
    bias: Option<&Tensor>,
    sum_input: Option<&Tensor>,
    conv: Conv2dParams,
    attrs: &QuantAttrs,
    layout: Layout,
    nr: i64,
    operands: GemmOperands,
    rows: SourceRows,
    name: &str,
) -> Result<DirectConvLayer, QuantError> {
    let op = format!("conv2d_int8_direct {name}");
    let ConvGeometry { n, ic, h, w, oc, kh, kw, oh, ow } = conv_geometry(&op, src, layout, weights, conv)?;
    if nr < 1 {
        return Err(shape_error(&op, "the panel width nr", "positive", nr.to_string()));
    }
    let (w_lo, w_hi) = operands.weights;
    if !(w_lo <= 0 && 0 <= w_hi) {
        return Err(shape_error(&op, "the weight range", "lo ≤ 0 ≤ hi", format!("{w_lo}..={w_hi}")));
    }
    if let SourceRows::Im2col { align } = rows
        && (align < 4 || align % 4 != 0)
    {
        return Err(shape_error(&op, "the im2col alignment", "a positive multiple of 4", align.to_string()));
    }
    let gemm = operands.source;
    if !GemmOperands::SOURCES.contains(&gemm) {
        return Err(dtype_error(&op, "the GEMM source", "u8, i8 or i16", gemm));
    }
    let out_dims = layout.shape([n, oc, oh, ow]);
    let ((src_scale, src_zp), dst_q) = check_layer_attrs(&op, src, weights, bias, &out_dims, sum_input, attrs)?;
    let (source, shifted) = shifted_source(src, gemm, name)?;
    // In onnxruntime's order (imported networks), the padding value is an argument, so that
    // layers of one geometry share their function whatever their source zero points; except a
    // padding value of 0, a literal, so that lowering sees padding rows that contribute nothing
    // to the GEMM (`passes::skip_zero_segments`) and layers padding with 0 share among themselves.
    let pad = i64::from(src_zp + source_shift(src.dtype(), gemm));
    let mut pad_params = Params::default();
    let pad_value = if attrs.requantization == Requantization::OnnxRuntime && pad != 0 {
        pad_params.scalar(gemm, pad, &format!("{name}.pad_value"))
    } else {
        Expr::int(gemm, pad)
    };
    // The kernel the GEMM runs, its stride, and the space-to-depth block (1: none).
    let block =
        if rows == SourceRows::SpaceToDepth && space_to_depth_applies(conv.stride, kh, kw) { conv.stride } else { 1 };
    let [_, gic, gkh, gkw] = space_to_depth_dims([oc, ic, kh, kw], block);
    let (p, row) = (conv.pad, conv_row_bytes(gic, gkw));
    // A 1×1 kernel subsamples while padding and then runs at stride 1; so does space to depth.
    let (step, s) = if kh == 1 && kw == 1 { (conv.stride, 1) } else { (1, conv.stride / block) };
    // After space to depth: the rows and whole pixels a row of pixels of the GEMM reads.
    let (s2d_rows, s2d_pixels) = (oh + gkh - 1, ceil_div((ow + gkw - 1) * gic + row - gkw * gic, gic));
    let (hs, ws) = match (step > 1, block > 1) {
        (true, _) => (oh, ow),
        // Tall and wide enough for every pixel space to depth reads.
        (false, true) => ((h + 2 * p).max(s2d_rows * block), (w + 2 * p).max(s2d_pixels * block)),
        (false, false) => (h + 2 * p, w + 2 * p),
    };
    let row_width = ceil_div(ws * ic + if block > 1 { 0 } else { row - kw * ic }, 16) * 16;
    // Flat rows: a stride-1 accumulator over the padded width, whose rows then are contiguous.
    let flat = (rows == SourceRows::Flat && s == 1 && row == kw * ic).then_some(ws);
    // The value of padded row `y` at offset `t` of the row.
    let pad_at = |b: &Expr, y: &Expr, t: &Expr| {
        let y = y * step - p;
        // Reads are clamped into the source, so that they need no guard when vectorized
        // (the select discards them outside).
        let clamp = |v: Expr, size: i64| index_min(index_max(v, Expr::index(0)), size - 1);
        let (inside_row, x, c) = if step == 1 {
            // The pixels of a row in the source are contiguous too: one offset `t`, whose
            // clamp `partition_loops` removes in the interior of the row.
            let t = t - p * ic;
            let ct = clamp(t.clone(), w * ic);
            (t.clone().ge(0) & t.lt(w * ic), &ct / ic, &ct % ic)
        } else {
            let x = t / ic * step - p;
            let inside = x.clone().ge(0) & x.clone().lt(w) & t.clone().lt(ws * ic);
            (inside, clamp(x, w), t % ic)
        };
        let inside = y.clone().ge(0) & y.clone().lt(h) & inside_row;
        select(inside, source.at_vec(layout.index(b, &c, &clamp(y, h), &x).to_vec()), pad_value.clone())
    };
    let pad_name = format!("{name}.pad");
    let padded = match flat {
        Some(ws) => compute_vec(
            vec![n, hs * ws * ic],
            |i| pad_at(&i[0], &(&i[1] / (ws * ic)), &(&i[1] % (ws * ic))),
            &pad_name,
        )?,
        None => compute_vec(vec![n, hs, row_width], |i| pad_at(&i[0], &i[1], &i[2]), &pad_name)?,
    };
    // Space to depth: pixel `X`'s channel `dy·(s·IC) + j` of row `Y` is byte `X·s·IC + j` of
    // padded row `Y·s + dy` (`j = dx·IC + c`): per row and `dy`, runs of `s·IC` bytes.
    let run = block * ic;
    let s2d = match block {
        1 => None,
        _ => Some(compute_vec(
            vec![n, s2d_rows, s2d_pixels * gic],
            |i| {
                let q = &i[2] % gic;
                padded.at([&i[0], &(&i[1] * block + &q / run), &(&i[2] / gic * run + &q % run)])
            },
            &format!("{name}.space_to_depth"),
        )?),
    };
    // What the GEMM reads: the padded rows, or their space to depth.
    let source_rows = s2d.clone().unwrap_or_else(|| padded.clone());
    let (ic, kh, kw) = (gic, gkh, gkw);
    // Gathered rows: each pixel's `KH` kernel rows end to end, chunks past them repeating the
    // last (clamped), so that every read stays inside `padded`.
    let im2col = match rows {
        SourceRows::Im2col { align } => {
            let chunks = ceil_div(im2col_k(ic, kh, kw, align), row);
            let col = compute_vec(
                vec![n, oh, ow, chunks * row],
                |i| {
                    let ky = index_min(&i[3] / row, kh - 1);
                    padded.at([&i[0], &(&i[1] * s + ky), &(&i[2] * (s * ic) + &i[3] % row)])
                },
                &format!("{name}.im2col"),
            )?;
            Some((col, im2col_k(ic, kh, kw, align)))
        }
        _ => None,
    };
    // The GEMM's segments and their length: `KH` of `R`, or one of `K` over gathered rows.
    let (segments, seg_k) = match &im2col {
        Some((_, k)) => (1, *k),
        None => (kh, row),
    };
    let panels = ceil_div(oc, nr);
    let pack = operands.pack();
    let (packed_shape, packed_name) =
        (vec![panels, segments * seg_k / pack, nr, pack], format!("{name}.packed_weights"));
    // The i16 kernels are exact on every i16: no range to declare (and none to check per call).
    let packed_weights = if gemm == DType::I16 {
        placeholder_vec(packed_shape, DType::I16, &packed_name)?
    } else {
        placeholder_vec_in_range(packed_shape, DType::I8, i64::from(w_lo)..=i64::from(w_hi), &packed_name)?
    };
    let (ky, ko, ki) = (reduce_axis(segments, "ky")?, reduce_axis(seg_k / pack, "ko")?, reduce_axis(pack, "ki")?);
    let group = &ky * (seg_k / pack) + &ko;
    let weight = |o: &Expr| packed_weights.at([&(o / nr), &group, &(o % nr), &ki.to_expr()]).cast(DType::I32);
    let acc_name = format!("{name}.acc");
    let acc = match (flat, &im2col) {
        (_, Some((col, _))) => compute_vec(
            vec![n, oh, ow, panels * nr],
            |i| {
                let a = col.at([&i[0], &i[1], &i[2], &(&ky * seg_k + &ko * pack + &ki)]).cast(DType::I32);
                sum(DType::I32, &[&ky, &ko, &ki], a * weight(&i[3]))
            },
            &acc_name,
        )?,
        // Virtual pixel `v = y·WS + x`; the last `KW - 1` of each row are never read.
        (Some(ws), None) => compute_vec(
            vec![n, oh * ws - (kw - 1), panels * nr],
            |i| {
                let a = padded.at([&i[0], &((&i[1] + &ky * ws) * ic + &ko * pack + &ki)]).cast(DType::I32);
                sum(DType::I32, &[&ky, &ko, &ki], a * weight(&i[2]))
            },
            &acc_name,
        )?,
        (None, None) => compute_vec(
            vec![n, oh, ow, panels * nr],
            |i| {
                let a = source_rows
                    .at([&i[0], &(&i[1] * s + &ky), &(&i[2] * (s * ic) + &ko * pack + &ki)])
                    .cast(DType::I32);
                sum(DType::I32, &[&ky, &ko, &ki], a * weight(&i[3]))
            },
            &acc_name,
        )?,
    };
    let channel_axis = if layout == Layout::Nchw { 1 } else { 3 };
    let Requantized { compensation, output, mut params } = requantize_layer(
        out_dims.to_vec(),
        |i| {
            let [b, o, y, x] = layout.nchw_of(i);
            match flat {
                Some(ws) => acc.at([b, &(y * ws + x), o]),
                None => acc.at([b, y, x, o]),
            }
        },
        channel_axis,
        weights.shape(),
        bias,
        sum_input,
        (src_scale, dst_q),
        attrs,
        name,
    )?;
    params.extend(pad_params.0);
    let requantize_row = requantize_map((ow, oc), weights.shape(), bias, sum_input, (src_scale, dst_q), attrs)?;
    let im2col = im2col.map(|(col, _)| col);
    Ok(DirectConvLayer {
        compensation,
        packed_weights,
        shifted,
        padded,
        acc,
        output,
        params,
        requantize_row,
        flat,
        im2col,
        gemm_kernel: [ic, kh, kw],
        space_to_depth: s2d.map(|t| (t, run)),
    })
}
