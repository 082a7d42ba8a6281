//! The .npy reader against files written by NumPy (tests/fixtures/make_npy.py), and a
//! bounded fuzz run: no input makes it panic.

mod common;

use rlx_io::{npy_bytes, parse_npy};
use rlx_ir::{DType, HostTensor};
use std::path::PathBuf;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(format!("{name}.npy"))
}

/// The generator's formula: element i is (i * 7 % 11) - 3.
fn formula(n: usize) -> Vec<f64> {
    (0..n).map(|i| ((i * 7 % 11) as f64) - 3.0).collect()
}

#[test]
fn reads_numpy_written_files() {
    let cases: &[(&str, DType, &[usize])] = &[
        ("f4_2x3", DType::F32, &[2, 3]),
        ("f8_5", DType::F64, &[5]),
        ("f2_3x1", DType::F16, &[3, 1]),
        ("i1_4", DType::I8, &[4]),
        ("i4_2x2x2", DType::I32, &[2, 2, 2]),
        ("i8_scalar", DType::I64, &[]),
        ("u1_0x3", DType::U8, &[0, 3]),
        ("f4_be_3", DType::F32, &[3]),
        ("i8_be_2", DType::I64, &[2]),
        ("f4_v2_4", DType::F32, &[4]),
    ];
    for &(name, dtype, dims) in cases {
        let t = rlx_io::load_npy(fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!((t.dtype(), t.dims()), (dtype, dims), "{name}");
        assert_eq!(t.to_f64_vec(), formula(t.len()), "{name}");
    }
    let b = rlx_io::load_npy(fixture("b1_5")).unwrap();
    assert_eq!(b.dtype(), DType::Bool);
    assert_eq!(b.to_f64_vec(), formula(5).iter().map(|&v| (v > 0.0) as u8 as f64).collect::<Vec<_>>());
}

/// `bytes` with the first `from` replaced by `to` (same length keeps the header valid).
fn replaced(bytes: Vec<u8>, from: &[u8], to: &[u8]) -> Vec<u8> {
    let at = bytes.windows(from.len()).position(|w| w == from).expect("pattern present");
    [&bytes[..at], to, &bytes[at + from.len()..]].concat()
}

#[test]
fn rejects_what_it_cannot_represent() {
    let f = npy_bytes(&HostTensor::from_f32(&[2, 2], &[0.0; 4]).unwrap());
    let e = parse_npy(&replaced(f, b"'fortran_order': False", b"'fortran_order': True ")).unwrap_err();
    assert!(e.message().contains("fortran_order"), "{e}");
    let f = npy_bytes(&HostTensor::from_f64(&[1], &[0.0]).unwrap());
    let e = parse_npy(&replaced(f, b"<f8", b"<c8")).unwrap_err();
    assert!(e.message().contains("<c8"), "{e}");
}

/// Every truncation of valid files, then random byte edits: Ok or Err, never a panic.
#[test]
fn fuzzed_files_never_panic() {
    let seeds: Vec<Vec<u8>> = [DType::F32, DType::I64, DType::Bool, DType::BF16]
        .iter()
        .map(|&d| npy_bytes(&HostTensor::from_f32_as(d, &[2, 3], &[0.0, 1.0, 1.0, 0.0, 1.0, 0.0]).unwrap()))
        .chain(std::iter::once(std::fs::read(fixture("f4_v2_4")).unwrap()))
        .collect();
    common::mutations(&seeds, b"0123456789(),' ", usize::MAX, |file| {
        if let Ok(t) = parse_npy(file) {
            assert_eq!(t.bytes().len(), t.len() * t.dtype().size_bytes());
        }
    });
}
