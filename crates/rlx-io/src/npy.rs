//! NumPy `.npy` files, format versions 1.0, 2.0 and 3.0.
//!
//! dtypes: `f4 f8 f2 i1 i4 i8 u1 b1` (little or big endian) map to the RLX dtype of the
//! same width. NumPy has no bf16: a bf16 tensor is written as `<f4` (exact: every bf16
//! value is an f32), and `V2` / `<u2` data is read as raw bf16 bits (how `ml_dtypes`
//! arrays come out of `np.save`).

use rlx_ir::shape::{checked_byte_len, fmt_dims};
use rlx_ir::{DType, Error, HostTensor, Result};
use std::path::Path;

const MAGIC: &[u8] = b"\x93NUMPY";

pub fn load_npy(path: impl AsRef<Path>) -> Result<HostTensor> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|e| Error::io(format!("{}: {e}", path.display())))?;
    parse_npy(&bytes).map_err(|e| e.context(path.display()))
}

pub fn save_npy(path: impl AsRef<Path>, t: &HostTensor) -> Result<()> {
    let path = path.as_ref();
    std::fs::write(path, npy_bytes(t)).map_err(|e| Error::io(format!("{}: {e}", path.display())))
}

/// The `.npy` encoding (version 1.0) of `t`.
pub fn npy_bytes(t: &HostTensor) -> Vec<u8> {
    let (descr, data) = match t.dtype() {
        DType::BF16 => ("<f4", rlx_ir::encode_le(&t.to_f32_vec(), f32::to_le_bytes)),
        d => (descr_of(d), t.bytes().to_vec()),
    };
    let shape = match t.dims() {
        [d] => format!("({d},)"),
        dims => format!("({})", dims.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")),
    };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    // Magic (6) + version (2) + length (2) + header + '\n' is a multiple of 64.
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut out = Vec::with_capacity(10 + header.len() + data.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[1, 0]);
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(&data);
    out
}

fn descr_of(d: DType) -> &'static str {
    match d {
        DType::F32 => "<f4",
        DType::F64 => "<f8",
        DType::F16 => "<f2",
        DType::BF16 => "<f4",
        DType::I8 => "|i1",
        DType::I32 => "<i4",
        DType::I64 => "<i8",
        DType::U8 => "|u1",
        DType::Bool => "|b1",
    }
}

/// Parses a whole `.npy` file.
pub fn parse_npy(bytes: &[u8]) -> Result<HostTensor> {
    if bytes.len() < 10 || &bytes[..6] != MAGIC {
        return Err(Error::parse("npy: byte 0: missing the \\x93NUMPY magic"));
    }
    let (major, minor) = (bytes[6], bytes[7]);
    let (len_bytes, header_start) = match major {
        1 => (2, 10),
        2 | 3 => (4, 12),
        _ => return Err(Error::parse(format!("npy: byte 6: unsupported format version {major}.{minor}"))),
    };
    if bytes.len() < header_start {
        return Err(Error::parse(format!("npy: byte 8: file ends inside the header length ({} bytes)", bytes.len())));
    }
    let header_len = if len_bytes == 2 {
        u16::from_le_bytes([bytes[8], bytes[9]]) as usize
    } else {
        u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize
    };
    let data_start = header_start.checked_add(header_len).filter(|&end| end <= bytes.len()).ok_or_else(|| {
        Error::parse(format!(
            "npy: byte {header_start}: header of {header_len} bytes runs past the end of the file ({} bytes)",
            bytes.len()
        ))
    })?;
    let header = std::str::from_utf8(&bytes[header_start..data_start])
        .map_err(|e| Error::parse(format!("npy: byte {}: header is not text", header_start + e.valid_up_to())))?;
    let fields =
        parse_header(header).map_err(|(at, why)| Error::parse(format!("npy: byte {}: {why}", header_start + at)))?;
    let descr = fields.descr.ok_or_else(|| Error::parse(format!("npy: byte {header_start}: header has no 'descr'")))?;
    let dims = fields.shape.ok_or_else(|| Error::parse(format!("npy: byte {header_start}: header has no 'shape'")))?;
    if fields.fortran_order {
        return Err(Error::parse(format!(
            "npy: byte {header_start}: fortran_order arrays are not supported (save with np.ascontiguousarray)"
        )));
    }
    let (dtype, big_endian) = dtype_of(&descr)
        .ok_or_else(|| Error::parse(format!("npy: byte {header_start}: unsupported descr '{descr}'")))?;
    let want = checked_byte_len("npy", dtype, &dims)?;
    let data = &bytes[data_start..];
    if data.len() != want {
        return Err(Error::parse(format!(
            "npy: byte {data_start}: {descr} {} needs {want} data bytes, the file has {}",
            fmt_dims(&dims),
            data.len()
        )));
    }
    let mut data = data.to_vec();
    if big_endian {
        data.chunks_exact_mut(dtype.size_bytes()).for_each(|c| c.reverse());
    }
    HostTensor::from_bytes(dtype, &dims, data).map_err(|e| e.context(format!("npy: byte {data_start}")))
}

/// dtype and byte order of a descr string.
fn dtype_of(descr: &str) -> Option<(DType, bool)> {
    let (order, code) = match descr.as_bytes().first()? {
        b'<' | b'=' | b'|' => (false, &descr[1..]),
        b'>' => (true, &descr[1..]),
        _ => (false, descr),
    };
    let dtype = match code {
        "f4" => DType::F32,
        "f8" => DType::F64,
        "f2" => DType::F16,
        "i1" => DType::I8,
        "i4" => DType::I32,
        "i8" => DType::I64,
        "u1" => DType::U8,
        "b1" => DType::Bool,
        "V2" | "u2" => DType::BF16,
        _ => return None,
    };
    Some((dtype, order && dtype.size_bytes() > 1))
}

#[derive(Default)]
struct Header {
    descr: Option<String>,
    fortran_order: bool,
    shape: Option<Vec<usize>>,
}

/// Parses the header's Python dict literal. Errors carry an offset into `text`.
fn parse_header(text: &str) -> std::result::Result<Header, (usize, String)> {
    let mut p = Cursor { s: text.as_bytes(), at: 0 };
    let mut h = Header::default();
    p.expect(b'{')?;
    loop {
        p.skip_ws();
        if p.eat(b'}') {
            break;
        }
        let key = p.string()?;
        p.skip_ws();
        p.expect(b':')?;
        p.skip_ws();
        match key.as_str() {
            "descr" => h.descr = Some(p.string()?),
            "fortran_order" => h.fortran_order = p.boolean()?,
            "shape" => h.shape = Some(p.tuple()?),
            other => return Err((p.at, format!("unknown header key '{other}'"))),
        }
        p.skip_ws();
        if !p.eat(b',') {
            p.skip_ws();
            p.expect(b'}')?;
            break;
        }
    }
    Ok(h)
}

struct Cursor<'a> {
    s: &'a [u8],
    at: usize,
}

type Parsed<T> = std::result::Result<T, (usize, String)>;

impl Cursor<'_> {
    fn skip_ws(&mut self) {
        while self.s.get(self.at).is_some_and(|c| c.is_ascii_whitespace()) {
            self.at += 1;
        }
    }
    fn eat(&mut self, c: u8) -> bool {
        let hit = self.s.get(self.at) == Some(&c);
        self.at += hit as usize;
        hit
    }
    fn expect(&mut self, c: u8) -> Parsed<()> {
        if self.eat(c) { Ok(()) } else { Err((self.at, format!("expected '{}'", c as char))) }
    }
    fn string(&mut self) -> Parsed<String> {
        let quote = match self.s.get(self.at) {
            Some(&q @ (b'\'' | b'"')) => q,
            _ => return Err((self.at, "expected a quoted string".into())),
        };
        let start = self.at + 1;
        let len = self.s[start..].iter().position(|&c| c == quote).ok_or((self.at, "unterminated string".into()))?;
        self.at = start + len + 1;
        Ok(String::from_utf8_lossy(&self.s[start..start + len]).into_owned())
    }
    fn boolean(&mut self) -> Parsed<bool> {
        for (word, v) in [("True", true), ("False", false)] {
            if self.s[self.at..].starts_with(word.as_bytes()) {
                self.at += word.len();
                return Ok(v);
            }
        }
        Err((self.at, "expected True or False".into()))
    }
    fn tuple(&mut self) -> Parsed<Vec<usize>> {
        self.expect(b'(')?;
        let mut dims = Vec::new();
        loop {
            self.skip_ws();
            if self.eat(b')') {
                return Ok(dims);
            }
            let start = self.at;
            while self.s.get(self.at).is_some_and(u8::is_ascii_digit) {
                self.at += 1;
            }
            let digits = std::str::from_utf8(&self.s[start..self.at]).unwrap_or("");
            let d = digits.parse::<usize>().map_err(|_| (start, "expected a dimension".to_string()))?;
            dims.push(d);
            self.skip_ws();
            if !self.eat(b',') {
                self.skip_ws();
                self.expect(b')')?;
                return Ok(dims);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_every_dtype() {
        for dtype in DType::ALL {
            let values = [0.0, 1.0, 0.0, 1.0, 1.0, 0.0];
            for dims in [&[2usize, 3][..], &[6], &[], &[0, 4]] {
                let n: usize = dims.iter().product();
                let t = HostTensor::from_f32_as(dtype, dims, &values[..n]).unwrap();
                let back = parse_npy(&npy_bytes(&t)).unwrap();
                assert_eq!(back.dims(), dims);
                assert_eq!(back.to_f64_vec(), t.to_f64_vec(), "{dtype} {dims:?}");
                if dtype != DType::BF16 {
                    assert_eq!(back, t);
                }
            }
        }
    }

    #[test]
    fn header_is_64_aligned() {
        let t = HostTensor::from_f32(&[3], &[1.0, 2.0, 3.0]).unwrap();
        let b = npy_bytes(&t);
        assert_eq!((b.len() - 12) % 64, 0);
    }
}
