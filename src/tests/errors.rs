//! Argument checking and the tensor API: every `RuntimeError` variant and its message.

use ir::{DType, Expr, ForKind, Func, Stmt, Var};

use super::*;
use crate::error::RuntimeError;
use crate::runtime::{Arg, CheckedTensor};

/// `C[i] = A[i] + B[i]` with A: i32[64, 32], B: i32[48, 32], C: i32[48, 32].
fn add_func() -> Func {
    let a = Buffer::new("A", DType::I32, vec![64, 32]);
    let b = Buffer::new("B", DType::I32, vec![48, 32]);
    let c = Buffer::new("C", DType::I32, vec![48, 32]);
    let i = Var::index("i");
    let idx = lane_index(&i, 4);
    let value = Expr::load(&a, vec![idx.clone()]) + Expr::load(&b, vec![idx.clone()]);
    let body = Stmt::for_loop(i, 48 * 32 / 4, ForKind::Serial, Stmt::store(&c, vec![idx], value));
    Func { name: "add".into(), params: vec![a, b, c], body }
}

fn assert_error(result: Result<(), RuntimeError>, expected: RuntimeError, message: &str) {
    let err = result.expect_err("the call must be rejected");
    assert!(err.to_string().contains(message), "message {err:?} lacks {message:?}");
    assert_eq!(err, expected);
}

#[test]
fn call_checks_count_dtype_and_shape_before_running() {
    let f = compile(&add_func(), &CompileOptions::default()).unwrap();
    assert_eq!(f.threads(), None);
    let mut a = Tensor::zeros(DType::I32, &[64, 32]).unwrap();
    let mut b = Tensor::zeros(DType::I32, &[48, 32]).unwrap();
    let mut c = Tensor::zeros(DType::I32, &[48, 32]).unwrap();
    assert_error(
        f.call(&mut [&mut a, &mut b]),
        RuntimeError::ArgumentCount { expected: 3, found: 2 },
        "argument count: expected 3, found 2",
    );
    let mut wrong_dtype = Tensor::zeros(DType::F32, &[48, 32]).unwrap();
    assert_error(
        f.call(&mut [&mut a, &mut b, &mut wrong_dtype]),
        RuntimeError::ArgumentDType { index: 2, name: "C".into(), expected: DType::I32, found: DType::F32 },
        "argument 2 (C): expected dtype i32, found f32",
    );
    let mut transposed = Tensor::zeros(DType::I32, &[32, 48]).unwrap();
    assert_error(
        f.call(&mut [&mut a, &mut transposed, &mut c]),
        RuntimeError::ArgumentShape { index: 1, name: "B".into(), expected: vec![48, 32], found: vec![32, 48] },
        "argument 1 (B): expected shape [48, 32], found [32, 48]",
    );
    // Nothing ran: the output is still zero.
    assert!(c.to_vec::<i32>().unwrap().iter().all(|&x| x == 0));
}

#[test]
fn call_args_checks_slice_length_and_writability() {
    let f = compile(&add_func(), &CompileOptions::default()).unwrap();
    let a: Vec<i32> = (0..2048).collect();
    let b: Vec<i32> = (0..1536).map(|x| 3 * x).collect();
    let mut c = vec![0i32; 1600];
    let short = vec![0i32; 100];
    assert_error(
        f.call_args(&mut [Arg::from_slice(&short), Arg::from_slice(&b), Arg::from_mut_slice(&mut c)]),
        RuntimeError::BufferTooSmall { index: 0, name: "A".into(), expected: 2048, found: 100 },
        "argument 0 (A): buffer holds 100 elements, function needs 2048",
    );
    let c_read_only = vec![0i32; 1536];
    assert_error(
        f.call_args(&mut [Arg::from_slice(&a), Arg::from_slice(&b), Arg::from_slice(&c_read_only)]),
        RuntimeError::ReadOnlyArgument { index: 2, name: "C".into() },
        "argument 2 (C): the function writes this buffer",
    );
    let floats = vec![0f32; 2048];
    assert_error(
        f.call_args(&mut [Arg::from_slice(&floats), Arg::from_slice(&b), Arg::from_mut_slice(&mut c)]),
        RuntimeError::ArgumentDType { index: 0, name: "A".into(), expected: DType::I32, found: DType::F32 },
        "argument 0 (A): expected dtype i32, found f32",
    );
    // Longer slices are fine; elements past the buffer are untouched.
    f.call_args(&mut [Arg::from_slice(&a), Arg::from_slice(&b), Arg::from_mut_slice(&mut c)]).unwrap();
    assert!((0..1536).all(|i| c[i] == 4 * i as i32));
    assert!(c[1536..].iter().all(|&x| x == 0));
    // A read-only tensor works for an input.
    let b_tensor = Tensor::from_slice(&[48, 32], &b).unwrap();
    let mut out = Tensor::zeros(DType::I32, &[48, 32]).unwrap();
    f.call_args(&mut [Arg::from_slice(&a), Arg::tensor_ref(&b_tensor), Arg::tensor(&mut out)]).unwrap();
    assert_eq!(out.to_vec::<i32>().unwrap(), c[..1536].to_vec());
}

#[test]
fn tensor_construction_errors_and_round_trips() {
    let err = Tensor::from_slice(&[2, 3], &[1i32, 2, 3]).unwrap_err();
    assert_eq!(err, RuntimeError::DataLength { shape: vec![2, 3], expected: 6, found: 3 });
    assert!(err.to_string().contains("shape [2, 3] has 6 elements, found 3"), "{err}");
    let err = Tensor::from_le_bytes(DType::I32, &[-1, 2], &[]).unwrap_err();
    assert_eq!(err, RuntimeError::BadShape { shape: vec![-1, 2] });
    assert!(err.to_string().contains("tensor shape [-1, 2]: dimensions must be non-negative"), "{err}");
    let err = Tensor::from_le_bytes(DType::I32.with_lanes(4), &[1], &[0; 16]).unwrap_err();
    assert_eq!(err, RuntimeError::VectorDType { found: DType::I32.with_lanes(4) });
    assert!(err.to_string().contains("expected a scalar dtype, found i32x4"), "{err}");
    // Zeros are checked the same way, never a panic.
    assert_eq!(Tensor::zeros(DType::I32, &[-1, 2]).unwrap_err(), RuntimeError::BadShape { shape: vec![-1, 2] });
    let vector = DType::I32.with_lanes(4);
    assert_eq!(Tensor::zeros(vector, &[1]).unwrap_err(), RuntimeError::VectorDType { found: vector });
    assert!(matches!(Tensor::zeros(DType::I64, &[i64::MAX, 4]), Err(RuntimeError::BadShape { .. })));

    let t = Tensor::from_slice(&[3], &[half::f16::from_f32(1.5), half::f16::NAN, half::f16::from_f32(-0.0)]).unwrap();
    let err = t.to_vec::<f32>().unwrap_err();
    assert_eq!(err, RuntimeError::ElementType { expected: DType::F16, found: DType::F32 });
    assert!(err.to_string().contains("tensor holds f16, requested f32"), "{err}");
    assert_eq!(t.to_vec::<half::f16>().unwrap()[0], half::f16::from_f32(1.5));
    assert!(Tensor::from_array(&t.to_array()).as_bytes() == t.as_bytes());

    let flags = Tensor::from_slice(&[4], &[true, false, false, true]).unwrap();
    assert_eq!(flags.as_bytes(), &[1, 0, 0, 1]);
    assert_eq!(flags.to_array().to_i64_vec(), vec![1, 0, 0, 1]);
    let raw = Tensor::from_le_bytes(DType::BOOL, &[2], &[0, 7]).unwrap();
    assert_eq!(raw.to_vec::<bool>().unwrap(), vec![false, true]);
    assert_eq!(raw.as_bytes(), &[0, 1]);

    let empty = Tensor::zeros(DType::F64, &[0, 5]).unwrap();
    assert!(empty.is_empty() && empty.as_bytes().is_empty());
    assert_eq!(empty.len(), 0);
    assert_eq!(empty.shape(), &[0, 5]);
    // Data is 64-byte aligned.
    assert_eq!(Tensor::zeros(DType::U8, &[3]).unwrap().as_bytes().as_ptr() as usize % 64, 0);
}

#[test]
fn compiled_functions_are_shared_across_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<crate::CompiledFunc>();
    let f = compile(&add_func(), &CompileOptions::default()).unwrap();
    std::thread::scope(|s| {
        for t in 0..4 {
            let f = &f;
            s.spawn(move || {
                let a: Vec<i32> = (0..2048).map(|x| x * t).collect();
                let b: Vec<i32> = (0..1536).collect();
                let mut c = vec![0i32; 1536];
                for _ in 0..50 {
                    f.call_args(&mut [Arg::from_slice(&a), Arg::from_slice(&b), Arg::from_mut_slice(&mut c)]).unwrap();
                }
                assert!((0..1536).all(|i| c[i] == i as i32 * (t + 1)));
            });
        }
    });
}

/// `out[i] = x[i]` for a parameter `x` of `dtype` declared to hold only `lo..=hi`.
fn ranged_copy(dtype: DType, lo: i64, hi: i64) -> Func {
    let x = Buffer::new_in_range("x", dtype, vec![16], Some((lo, hi)));
    let out = Buffer::new("out", dtype, vec![16]);
    let i = Var::index("i");
    let body = Stmt::for_loop(
        i.clone(),
        16,
        ForKind::Serial,
        Stmt::store(&out, vec![Expr::var(&i)], Expr::load(&x, vec![Expr::var(&i)])),
    );
    Func { name: "copy".into(), params: vec![x, out], body }
}

#[test]
fn declared_value_ranges_are_checked_for_every_integer_width_before_running() {
    for (dtype, lo, hi, bad) in [
        (DType::U8, 0, 127, 128i64),
        (DType::I8, -64, 63, -65),
        (DType::I8, -64, 63, 64),
        // Sign transfer's precondition: no -128.
        (DType::I8, -127, 127, -128),
        (DType::I16, -5, 300, 301),
        (DType::U32, 10, 4_000_000_000, 9),
        (DType::I64, i64::MIN + 1, 0, i64::MIN),
    ] {
        let f = compile(&ranged_copy(dtype, lo, hi), &CompileOptions::default()).unwrap();
        let mut values = vec![lo; 16];
        values[15] = hi;
        let mut x = Tensor::from_array(&Array::from_i64(dtype, &[16], &values));
        let mut out = Tensor::zeros(dtype, &[16]).unwrap();
        f.call(&mut [&mut x, &mut out]).unwrap();
        assert_eq!(out.to_array().to_i64_vec(), values, "{dtype}");
        values[9] = bad;
        let mut x = Tensor::from_array(&Array::from_i64(dtype, &[16], &values));
        let mut out = Tensor::zeros(dtype, &[16]).unwrap();
        assert_error(
            f.call(&mut [&mut x, &mut out]),
            RuntimeError::ValueOutOfRange { index: 0, name: "x".into(), position: 9, value: bad.into(), lo, hi },
            &format!("argument 0 (x): element 9 is {bad}, expected a value in the declared range {lo}..={hi}"),
        );
        assert_eq!(out.to_array().to_i64_vec(), vec![0; 16], "{dtype}: nothing ran");
    }
}

#[test]
fn checked_tensors_are_scanned_once_and_only_inside_the_declared_range() {
    let f = compile(&ranged_copy(DType::I8, -64, 63), &CompileOptions::default()).unwrap();
    let values: Vec<i64> = (0..16).map(|i| i * 8 - 64).map(|v| v.min(63)).collect();
    let x = Tensor::from_array(&Array::from_i64(DType::I8, &[16], &values));
    // Checked when made: a value outside is the typed error, so is a float tensor.
    assert_error(
        CheckedTensor::new(x.clone(), (-64, 50)).map(|_| ()),
        RuntimeError::CheckedValue { position: 15, value: 56, lo: -64, hi: 50 },
        "checked tensor: element 15 is 56, expected a value in -64..=50",
    );
    assert_error(
        CheckedTensor::new(Tensor::zeros(DType::F32, &[4]).unwrap(), (0, 1)).map(|_| ()),
        RuntimeError::CheckedDType { found: DType::F32 },
        "checked tensor: expected an integer dtype, found f32",
    );
    // Inside the declared range: the call runs on it without a scan.
    let checked = CheckedTensor::new(x, (-64, 63)).unwrap();
    let mut out = Tensor::zeros(DType::I8, &[16]).unwrap();
    f.call_args(&mut [Arg::checked(&checked), Arg::tensor(&mut out)]).unwrap();
    assert_eq!(out.to_array().to_i64_vec(), values);
    // A wider checked range proves nothing about the declared one: scanned as any argument.
    let wide =
        CheckedTensor::new(Tensor::from_array(&Array::from_i64(DType::I8, &[16], &[100; 16])), (-128, 127)).unwrap();
    assert_error(
        f.call_args(&mut [Arg::checked(&wide), Arg::tensor(&mut out)]),
        RuntimeError::ValueOutOfRange { index: 0, name: "x".into(), position: 0, value: 100, lo: -64, hi: 63 },
        "argument 0 (x): element 0 is 100, expected a value in the declared range -64..=63",
    );
    // `bind` checks the ranged inputs once and keeps the output writable.
    assert_eq!((f.scanned_range(0), f.scanned_range(1)), (Some((-64, 63)), None));
    let mut bound = f.bind(vec![checked.into_tensor(), Tensor::zeros(DType::I8, &[16]).unwrap()]).unwrap();
    bound.call(&f).unwrap();
    assert_eq!(bound.last().unwrap().to_array().to_i64_vec(), values);
    let bad = Tensor::from_array(&Array::from_i64(DType::I8, &[16], &[-65; 16]));
    assert!(matches!(
        f.bind(vec![bad, Tensor::zeros(DType::I8, &[16]).unwrap()]),
        Err(RuntimeError::CheckedValue { position: 0, value: -65, .. })
    ));
}
