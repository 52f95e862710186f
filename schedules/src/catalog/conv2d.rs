//! NHWC int8 convolution with groups (depthwise when `groups = ic = oc`).

use ir::expr::select;
use ir::te::{Tensor, compute_vec, reduce_axis, sum};
use ir::{DType, Expr, TeError};

/// `out[0, y, x, o] = Σ_{ry, rx, c} i32(pad[0, y·s + ry, x·s + rx, g·icg + c]) · i32(w[o, ry, rx, c])`
/// with `g = o / ocg`, `icg = ic / groups`, `ocg = oc / groups`, for `src: u8[1, h, w, ic]` and
/// `weights: i8[oc, kh, kw, icg]` (OHWI). `pad` is a separate `<name>.pad` stage holding zeros
/// outside the source (only when `pad > 0`). Exact in i32 (no saturation: at most
/// `kh·kw·icg·255·128` per sum, checked to fit). Output `(h + 2·pad − kh) / stride + 1` rows
/// (floor), the same for columns.
pub fn conv2d_nhwc_int8(
    src: &Tensor,
    weights: &Tensor,
    stride: i64,
    pad: i64,
    groups: i64,
    name: &str,
) -> Result<Tensor, TeError> {
    let op = format!("conv2d_nhwc_int8 {name}");
    let bad = |what: &str, expected: String, found: String| TeError::ShapeMismatch {
        op: op.clone(),
        what: what.to_string(),
        expected,
        found,
    };
    let ([1, h, w, ic], [oc, kh, kw, icg]) = (shape4(src), shape4(weights)) else {
        let found = format!("{:?} and {:?}", src.shape(), weights.shape());
        return Err(bad("shapes of src and weights", "[1, H, W, IC] and [OC, KH, KW, IC/groups]".into(), found));
    };
    if src.dtype() != DType::U8 || weights.dtype() != DType::I8 {
        return Err(bad(
            "dtypes of src and weights",
            "u8 and i8".into(),
            format!("{} and {}", src.dtype(), weights.dtype()),
        ));
    }
    if groups < 1 || ic % groups != 0 || oc % groups != 0 || icg != ic / groups {
        let found = format!("groups {groups}, ic {ic}, oc {oc}, weights' last dim {icg}");
        return Err(bad("groups", "groups ≥ 1 dividing ic and oc, weights' last dim ic/groups".into(), found));
    }
    if stride < 1 || pad < 0 || h + 2 * pad < kh || w + 2 * pad < kw {
        let found = format!("stride {stride}, pad {pad}, window {kh}x{kw} over {h}x{w}");
        return Err(bad("window", "stride ≥ 1, pad ≥ 0, window within the padded source".into(), found));
    }
    if (kh * kw * icg) as i128 * 255 * 128 > i32::MAX as i128 {
        return Err(bad("reduction size", "kh·kw·ic/groups·255·128 within i32".into(), (kh * kw * icg).to_string()));
    }
    let padded = if pad == 0 {
        src.clone()
    } else {
        compute_vec(
            vec![1, h + 2 * pad, w + 2 * pad, ic],
            |i| {
                let (y, x) = (&i[1] - pad, &i[2] - pad);
                let inside = y.ge(0) & y.lt(h) & x.ge(0) & x.lt(w);
                select(inside, src.at([&i[0], &y, &x, &i[3]]), Expr::int(DType::U8, 0))
            },
            &format!("{name}.pad"),
        )?
    };
    let (oh, ow) = ((h + 2 * pad - kh) / stride + 1, (w + 2 * pad - kw) / stride + 1);
    let ocg = oc / groups;
    let (ry, rx, rc) = (reduce_axis(kh, "ry")?, reduce_axis(kw, "rx")?, reduce_axis(icg, "rc")?);
    compute_vec(
        vec![1, oh, ow, oc],
        |i| {
            let channel = if groups == 1 { rc.to_expr() } else { &i[3] / ocg * icg + &rc };
            let s = padded.at([&i[0], &(&i[1] * stride + &ry), &(&i[2] * stride + &rx), &channel]);
            sum(DType::I32, &[&ry, &rx, &rc], s.cast(DType::I32) * weights.at([&i[3], &ry, &rx, &rc]).cast(DType::I32))
        },
        name,
    )
}

fn shape4(t: &Tensor) -> [i64; 4] {
    match *t.shape() {
        [a, b, c, d] => [a, b, c, d],
        _ => [0; 4],
    }
}
