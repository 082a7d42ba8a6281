//! Values made from attributes and shapes: Constant, ConstantOfShape, Range, EyeLike.
//! Their operands must be known at compile time, so their results are constants.

use super::{OpDef, def, one, sizes};
use crate::import::{Importer, Node};
use crate::tensor::{dtype_of, to_host};
use rlx_ir::{DType, Error, HostTensor, NodeId, Result};

pub const OPS: &[OpDef] = &[
    def("Constant", 1, constant),
    def("ConstantOfShape", 9, constant_of_shape),
    def("Range", 11, range),
    def("EyeLike", 9, eye_like),
];

fn constant(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let value = if let Some(t) = n.tensor("value")? {
        to_host(t, i.external())?
    } else if n.has("value_float") {
        HostTensor::from_f32(&[], &[n.float("value_float", 0.0)?])?
    } else if let Some(v) = n.floats("value_floats")? {
        HostTensor::from_f32(&[v.len()], &v)?
    } else if let Some(v) = n.int_opt("value_int")? {
        HostTensor::from_i64(&[], &[v])?
    } else if let Some(v) = n.ints("value_ints")? {
        HostTensor::from_i64(&[v.len()], &v)?
    } else {
        return Err(Error::unsupported("a Constant without a value, value_float(s) or value_int(s) attribute"));
    };
    one(i.g.constant_tensor(value)?)
}

fn constant_of_shape(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let shape = i.const_ints(n, 0)?.ok_or_else(|| Error::graph("input 0 (shape) is required"))?;
    let dims = sizes(&shape, "shape")?;
    let value = match n.tensor("value")? {
        Some(t) => to_host(t, i.external())?,
        None => HostTensor::from_f32(&[1], &[0.0])?,
    };
    if value.len() != 1 {
        return Err(Error::shape(format!("value must hold one element, has {}", value.len())));
    }
    let s = HostTensor::from_bytes(value.dtype(), &[], value.bytes().to_vec())?;
    let s = i.g.constant_tensor(s)?;
    one(if dims.is_empty() { s } else { i.g.expand(s, &dims)? })
}

fn range(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let ids = [i.input(n, 0)?, i.input(n, 1)?, i.input(n, 2)?];
    let dtype = i.g.dtype(ids[0]);
    let mut v = Vec::with_capacity(3);
    for (k, &id) in ids.iter().enumerate() {
        let t = i.const_input(n, k, id)?;
        if t.len() != 1 {
            return Err(Error::shape(format!("input {k} must be a scalar, got {:?}", t.dims())));
        }
        v.push(t);
    }
    let too_long = |count: f64| Error::shape(format!("a range of {count} elements"));
    // ONNX defines element k as start + k * delta (not a running sum).
    let value = if dtype.is_float() {
        let [start, limit, delta] = [0, 1, 2].map(|k| v[k].to_f64_vec()[0]);
        if delta == 0.0 {
            return Err(Error::shape("delta is 0"));
        }
        let count = ((limit - start) / delta).ceil().max(0.0);
        if count > MAX_RANGE as f64 || count.is_nan() {
            return Err(too_long(count));
        }
        let values: Vec<f64> = (0..count as usize).map(|k| start + k as f64 * delta).collect();
        HostTensor::from_f64_as(dtype, &[values.len()], &values)?
    } else {
        let [start, limit, delta] = [0, 1, 2].map(|k| v[k].to_i64_vec()[0] as i128);
        if delta == 0 {
            return Err(Error::shape("delta is 0"));
        }
        // ceil((limit - start) / delta), with the signs folded into a positive divisor.
        let (diff, step) = if delta > 0 { (limit - start, delta) } else { (start - limit, -delta) };
        let count = (diff + step - 1).div_euclid(step).max(0);
        if count > MAX_RANGE as i128 {
            return Err(too_long(count as f64));
        }
        let values: Vec<i64> = (0..count).map(|k| (start + k * delta) as i64).collect();
        let t = HostTensor::from_i64(&[values.len()], &values)?;
        let c = i.g.constant_tensor(t)?;
        return one(if dtype == DType::I64 { c } else { i.g.cast(c, dtype)? });
    };
    one(i.g.constant_tensor(value)?)
}

/// Most elements a Range may produce.
const MAX_RANGE: usize = 1 << 28;

fn eye_like(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let x = i.input(n, 0)?;
    let d = i.g.dims(x).to_vec();
    let [rows, cols] = d[..] else { return Err(Error::shape(format!("needs a matrix, got {}", i.g.describe(x)))) };
    let dtype = match n.int_opt("dtype")? {
        Some(t) => dtype_of(t as i32)?,
        None => i.g.dtype(x),
    };
    let k = n.int("k", 0)?;
    let values: Vec<f64> =
        (0..rows * cols).map(|f| ((f % cols) as i64 - (f / cols) as i64 == k) as u8 as f64).collect();
    one(i.g.constant_tensor(HostTensor::from_f64_as(dtype, &[rows, cols], &values)?)?)
}
