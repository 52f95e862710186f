//! Workload keys: names and ids never change the key; shapes, dtypes, ranges, constants and
//! structure always do; the key of a fixed definition is pinned by a golden file.

use std::collections::HashSet;
use std::path::PathBuf;

use tensorlift_ir::expr::select;
use tensorlift_ir::intrin::{IntrinKind, decl_tensor_intrin};
use tensorlift_ir::te::{Tensor, compute, max, placeholder, placeholder_in_range, reduce_axis, sum};
use tensorlift_ir::workload::{canonical_definition, intrin_key, workload_key};
use tensorlift_ir::{DType, Expr};

/// What a variant of the test convolution changes.
#[derive(Clone, Copy, Default)]
struct Variant {
    /// Names prefixed by this.
    prefix: &'static str,
    width: i64,
    weight_dtype: Option<DType>,
    range_hi: Option<i64>,
    pad_value: i64,
    bias: i64,
    use_max: bool,
    swap_kernel_axes: bool,
}

/// A 3×3 convolution of `X: u8[1, 4, W, W]` (values in `0..=range_hi`) padded by one with
/// `Wt: i8[8, 4, 3, 3]`, plus `bias`, as `i32`.
fn conv(v: Variant) -> Tensor {
    let p = v.prefix;
    let w_ = if v.width == 0 { 6 } else { v.width };
    let x = placeholder_in_range([1, 4, w_, w_], DType::U8, 0..=v.range_hi.unwrap_or(127), &format!("{p}X")).unwrap();
    let wdt = v.weight_dtype.unwrap_or(DType::I8);
    let w = placeholder([8, 4, 3, 3], wdt, &format!("{p}Wt")).unwrap();
    let pad = compute(
        [1, 4, w_ + 2, w_ + 2],
        |i| {
            let (y, x_) = (&i[2] - 1, &i[3] - 1);
            let inside = y.ge(0) & y.lt(w_) & x_.ge(0) & x_.lt(w_);
            select(inside, x.at([&i[0], &i[1], &y, &x_]), Expr::int(DType::U8, v.pad_value))
        },
        &format!("{p}Pad"),
    )
    .unwrap();
    let (rc, ry, rx) = (
        reduce_axis(4, &format!("{p}rc")).unwrap(),
        reduce_axis(3, &format!("{p}ry")).unwrap(),
        reduce_axis(3, &format!("{p}rx")).unwrap(),
    );
    let acc = compute(
        [1, 8, w_, w_],
        |i| {
            let (ky, kx) = if v.swap_kernel_axes { (&rx, &ry) } else { (&ry, &rx) };
            let src = pad.at([&i[0], &rc, &(&i[2] + &**ky), &(&i[3] + &**kx)]).cast(DType::I32);
            let prod = src * w.at([&i[1], &rc, &ry, &rx]).cast(DType::I32);
            if v.use_max { max(DType::I32, &[&rc, &ry, &rx], prod) } else { sum(DType::I32, &[&rc, &ry, &rx], prod) }
        },
        &format!("{p}Acc"),
    )
    .unwrap();
    compute(
        [1, 8, w_, w_],
        |i| acc.at([&i[0], &i[1], &i[2], &i[3]]) + Expr::int(DType::I32, v.bias),
        &format!("{p}Out"),
    )
    .unwrap()
}

#[test]
fn names_and_ids_do_not_change_the_key() {
    let a = conv(Variant::default());
    let b = conv(Variant { prefix: "layer7_", ..Variant::default() });
    assert_eq!(canonical_definition(&[&a]), canonical_definition(&[&b]));
    assert_eq!(workload_key(&[&a]), workload_key(&[&b]));
    assert_eq!(workload_key(&[&a]).key.len(), 64);
}

#[test]
fn shapes_dtypes_ranges_constants_and_structure_change_the_key() {
    let base = Variant::default();
    let variants = [
        base,
        Variant { width: 7, ..base },
        Variant { weight_dtype: Some(DType::U8), ..base },
        Variant { range_hi: Some(255), ..base },
        Variant { pad_value: 3, ..base },
        Variant { bias: 2, ..base },
        Variant { use_max: true, ..base },
        Variant { swap_kernel_axes: true, ..base },
    ];
    let keys: Vec<String> = variants.iter().map(|v| workload_key(&[&conv(*v)]).key).collect();
    assert_eq!(keys.iter().collect::<HashSet<_>>().len(), keys.len(), "{keys:?}");
    // Two outputs, or one of its stages as the output, are other workloads too.
    let out = conv(base);
    let acc = out.inputs()[0].clone();
    let more = [workload_key(&[&acc]).key, workload_key(&[&out, &acc]).key, workload_key(&[&acc, &out]).key];
    for key in &more {
        assert!(!keys.contains(key));
    }
    assert_eq!(more.iter().collect::<HashSet<_>>().len(), 3);
}

#[test]
fn the_summary_shows_inputs_outputs_and_reductions() {
    let key = workload_key(&[&conv(Variant::default())]);
    assert_eq!(key.summary, "u8[1,4,6,6](0..=127) x i8[8,4,3,3] -> i32[1,8,6,6] (3 computes; sum[4x3x3])");
}

/// The canonical text and key of the test convolution, pinned across processes and versions:
/// `tests/golden/workload_key.txt`, rewritten with `TENSORLIFT_BLESS=1` when the canonical form
/// changes on purpose (which changes every stored key: review the diff).
#[test]
fn the_key_of_a_fixed_definition_is_stable() {
    let out = conv(Variant::default());
    let actual = format!("{}\n{}", workload_key(&[&out]).key, canonical_definition(&[&out]));
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden/workload_key.txt");
    if std::env::var_os("TENSORLIFT_BLESS").is_some_and(|v| v == "1") {
        std::fs::write(&path, &actual).expect("write golden file");
        skip("TENSORLIFT_BLESS=1: the golden file was rewritten, not compared");
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_default();
    assert_eq!(expected, actual, "{} differs; rerun with TENSORLIFT_BLESS=1 to accept", path.display());
}

/// Reports that the running test skipped its check because of `reason`, as the root crate's
/// `src/tests/skip.rs` does: a `skipped: <test>: <reason>` line on stderr and appended to the
/// file `TENSORLIFT_SKIP_LOG` names, if set.
fn skip(reason: &str) {
    use std::io::Write;
    let line = format!("skipped: {}: {reason}\n", std::thread::current().name().unwrap_or("(unnamed thread)"));
    let _ = std::io::stderr().write_all(line.as_bytes());
    if let Some(path) = std::env::var_os("TENSORLIFT_SKIP_LOG") {
        let mut log =
            std::fs::OpenOptions::new().create(true).append(true).open(path).expect("open TENSORLIFT_SKIP_LOG");
        log.write_all(line.as_bytes()).expect("append to TENSORLIFT_SKIP_LOG");
    }
}

#[test]
fn an_intrinsic_key_includes_the_call_order() {
    let decl = |first_y: bool| {
        let x = placeholder([8], DType::I16, "X").unwrap();
        let y = placeholder([8], DType::I16, "Y").unwrap();
        let z = compute([8], |i| x.at([&i[0]]) - y.at([&i[0]]), "Z").unwrap();
        let inputs = if first_y { [&y, &x] } else { [&x, &y] };
        decl_tensor_intrin("sub8", IntrinKind::Generic, &z, &inputs).unwrap()
    };
    assert_eq!(intrin_key(&decl(false)), intrin_key(&decl(false)));
    assert_ne!(intrin_key(&decl(false)), intrin_key(&decl(true)));
}
