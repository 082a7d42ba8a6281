//! The safetensors reader against a file written by the `safetensors` Python package, the
//! writer against a committed file that package loads (tests/fixtures/make_safetensors.py
//! makes the one and checks the other), malformed headers, and a bounded fuzz run.

mod common;

use rlx_io::{parse_safetensors, safetensors_bytes};
use rlx_ir::{DType, HostTensor};
use std::path::PathBuf;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

/// The generator's formula: element i is (i * 7 % 11) - 3.
fn formula(n: usize) -> Vec<f64> {
    (0..n).map(|i| ((i * 7 % 11) as f64) - 3.0).collect()
}

#[test]
fn reads_what_the_python_package_wrote() {
    let file = rlx_io::load_safetensors(fixture("python_written.safetensors")).unwrap();
    let cases: &[(&str, DType, &[usize])] = &[
        ("f32_2x3", DType::F32, &[2, 3]),
        ("f64_5", DType::F64, &[5]),
        ("f16_3x1", DType::F16, &[3, 1]),
        ("i8_4", DType::I8, &[4]),
        ("i32_2x2x2", DType::I32, &[2, 2, 2]),
        ("i64_scalar", DType::I64, &[]),
        ("u8_0x3", DType::U8, &[0, 3]),
    ];
    assert_eq!(file.tensors.len(), cases.len() + 1);
    for &(name, dtype, dims) in cases {
        let t = file.get(name).unwrap_or_else(|| panic!("{name} missing"));
        assert_eq!((t.dtype(), t.dims()), (dtype, dims), "{name}");
        assert_eq!(t.to_f64_vec(), formula(t.len()), "{name}");
    }
    let b = file.get("bool_5").unwrap();
    assert_eq!(b.dtype(), DType::Bool);
    assert_eq!(b.to_f64_vec(), formula(5).iter().map(|&v| (v > 0.0) as u8 as f64).collect::<Vec<_>>());
    let mut meta = file.metadata.clone();
    meta.sort();
    assert_eq!(meta, [("format".to_string(), "np".to_string()), ("step".to_string(), "7".to_string())]);
}

fn rlx_written() -> Vec<u8> {
    let w = HostTensor::from_f64_as(DType::F32, &[3, 17], &formula(51)).unwrap();
    let b = HostTensor::from_i64(&[1], &[-3]).unwrap();
    safetensors_bytes(&[("w", &w), ("b", &b)], &[("written_by", "rlx")]).unwrap()
}

/// The committed file is what the writer makes today, and make_safetensors.py checks the
/// Python package loads it (set RLX_WRITE_FIXTURES=1 to rewrite it after a format change).
#[test]
fn the_writer_makes_the_file_python_reads() {
    let path = fixture("rlx_written.safetensors");
    if std::env::var_os("RLX_WRITE_FIXTURES").is_some() {
        std::fs::write(&path, rlx_written()).unwrap();
    }
    assert_eq!(std::fs::read(&path).unwrap(), rlx_written());
    let back = parse_safetensors(&rlx_written()).unwrap();
    assert_eq!(back.tensors.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), ["w", "b"]);
    assert_eq!(back.metadata, [("written_by".to_string(), "rlx".to_string())]);
    // The header is padded to 8 bytes, so the data (and every f32 / i64 in it) is aligned.
    let header = u64::from_le_bytes(rlx_written()[..8].try_into().unwrap());
    assert_eq!(header % 8, 0);
}

#[test]
fn every_dtype_and_odd_size_round_trips() {
    let dtypes = [DType::F32, DType::F64, DType::F16, DType::BF16, DType::I8, DType::I32, DType::I64, DType::U8];
    for (i, &dtype) in dtypes.iter().enumerate() {
        for dims in [&[][..], &[1], &[3], &[17, 1], &[1000], &[2, 0]] {
            let n: usize = dims.iter().product();
            let t =
                HostTensor::from_f64_as(dtype, dims, &formula(n).iter().map(|v| v.abs()).collect::<Vec<_>>()).unwrap();
            let flag = HostTensor::from_bytes(DType::Bool, &[i + 1], vec![1; i + 1]).unwrap();
            let back = parse_safetensors(&safetensors_bytes(&[("t", &t), ("flag", &flag)], &[]).unwrap()).unwrap();
            assert_eq!(back.get("t"), Some(&t), "{dtype:?} {dims:?}");
            assert_eq!(back.get("flag"), Some(&flag));
            assert!(back.metadata.is_empty());
        }
    }
}

/// `bytes` with its header replaced by `header` (padded to 8), data kept.
fn with_header(bytes: &[u8], header: &str) -> Vec<u8> {
    let old = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let mut h = header.to_string();
    while !h.len().is_multiple_of(8) {
        h.push(' ');
    }
    [&(h.len() as u64).to_le_bytes()[..], h.as_bytes(), &bytes[8 + old..]].concat()
}

#[test]
fn malformed_files_are_errors_naming_the_fault() {
    let good = rlx_written();
    let cases = [
        (r#"{"w":{"dtype":"F32","shape":[3,17],"data_offsets":[0,204]}}"#, "8 data bytes after the last tensor"),
        (
            r#"{"w":{"dtype":"F32","shape":[3,17],"data_offsets":[0,200]},"b":{"dtype":"I64","shape":[1],"data_offsets":[200,212]}}"#,
            "needs",
        ),
        (
            r#"{"w":{"dtype":"F32","shape":[3,17],"data_offsets":[0,204]},"b":{"dtype":"I64","shape":[1],"data_offsets":[200,208]}}"#,
            "expected to start at 204",
        ),
        (
            r#"{"w":{"dtype":"F32","shape":[3,17],"data_offsets":[0,204]},"b":{"dtype":"C64","shape":[1],"data_offsets":[204,212]}}"#,
            "unsupported dtype 'C64'",
        ),
        (r#"{"w":{"dtype":"F32","shape":[3,-17],"data_offsets":[0,204]}}"#, "'shape'"),
        (r#"{"w":{"dtype":"F32","shape":[3,17]}}"#, "data_offsets"),
        (r#"{"__metadata__":{"a":1}}"#, "value of 'a' is not a string"),
        (r#"[1,2]"#, "not a JSON object"),
        (r#"{"w":"#, "not JSON"),
    ];
    for (header, want) in cases {
        let e = parse_safetensors(&with_header(&good, header)).unwrap_err();
        assert!(e.message().contains(want), "{header}: {e}");
    }
    let e = parse_safetensors(&good[..5]).unwrap_err();
    assert!(e.message().contains("too short"), "{e}");
    let mut huge = good.clone();
    huge[..8].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(parse_safetensors(&huge).unwrap_err().message().contains("runs past the end"));
    let t = HostTensor::from_f32(&[1], &[0.0]).unwrap();
    assert!(safetensors_bytes(&[("a", &t), ("a", &t)], &[]).is_err());
    // A bool byte other than 0 / 1 is refused by the tensor, named with its offset.
    let flag = HostTensor::from_bytes(DType::Bool, &[1], vec![1]).unwrap();
    let mut bad = safetensors_bytes(&[("flag", &flag)], &[]).unwrap();
    *bad.last_mut().unwrap() = 2;
    let e = parse_safetensors(&bad).unwrap_err();
    assert!(e.message().contains("'flag' at byte"), "{e}");
}

/// Every truncation of valid files, then random byte edits: Ok or Err, never a panic.
#[test]
fn fuzzed_files_never_panic() {
    let seeds = [rlx_written(), std::fs::read(fixture("python_written.safetensors")).unwrap()];
    // Mostly the header, where the structure is.
    common::mutations(&seeds, b"0123456789[],:\" ", 300, |file| {
        if let Ok(f) = parse_safetensors(file) {
            for (_, t) in &f.tensors {
                assert_eq!(t.bytes().len(), t.len() * t.dtype().size_bytes());
            }
        }
    });
}
