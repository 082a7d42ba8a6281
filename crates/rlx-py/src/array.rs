//! dtypes and NumPy arrays at the boundary.
//!
//! In: any C-contiguous, native-endian array of an RLX dtype is read straight from its
//! buffer by the run (no copy first; other layouts go through `np.ascontiguousarray`);
//! bf16 arrays come as `ml_dtypes.bfloat16`. Out: each result's bytes become the array's buffer without a
//! copy (the array owns them through a small base object); bf16 results are
//! `ml_dtypes.bfloat16` arrays when ml_dtypes is installed, else exact f32.

use numpy::npyffi::{self, NPY_ARRAY_WRITEABLE, NpyTypes, PY_ARRAY_API, npy_intp};
use numpy::{PyArray1, PyArrayDescr, PyArrayDescrMethods, PyArrayMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyString};
use rlx::ir::TensorRef;
use rlx::prelude::{DType, HostTensor};

/// An RLX element type (`rlx.float32`, `rlx.bfloat16`, ...).
#[pyclass(module = "rlx", name = "DType", frozen, eq, hash)]
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PyDType(pub DType);

/// The Python attribute names of the dtypes, NumPy's spelling.
const PY_NAMES: [(DType, &str); 9] = [
    (DType::F32, "float32"),
    (DType::F64, "float64"),
    (DType::F16, "float16"),
    (DType::BF16, "bfloat16"),
    (DType::I8, "int8"),
    (DType::I32, "int32"),
    (DType::I64, "int64"),
    (DType::U8, "uint8"),
    (DType::Bool, "bool_"),
];

fn py_name(d: DType) -> &'static str {
    PY_NAMES.iter().find(|(x, _)| *x == d).map_or("?", |(_, n)| n)
}

#[pymethods]
impl PyDType {
    /// The short name: "f32", "bf16", "i64", "bool", ...
    #[getter]
    fn name(&self) -> &'static str {
        self.0.name()
    }

    /// Bytes per element.
    #[getter]
    fn itemsize(&self) -> usize {
        self.0.size_bytes()
    }

    fn __repr__(&self) -> String {
        format!("rlx.{}", py_name(self.0))
    }

    fn __str__(&self) -> &'static str {
        self.0.name()
    }
}

/// A dtype argument: an `rlx` dtype, a name ("f32", "bfloat16", "bool", ...) or anything
/// `numpy.dtype` accepts.
pub fn dtype_arg(obj: &Bound<'_, PyAny>) -> PyResult<DType> {
    if obj.is_none() {
        // numpy.dtype(None) is float64; a missing dtype is more likely a mistake.
        return Err(PyTypeError::new_err(
            "dtype: None is not a dtype (an rlx dtype, a name like 'f32', or a NumPy dtype)",
        ));
    }
    if let Ok(d) = obj.cast::<PyDType>() {
        return Ok(d.get().0);
    }
    if let Ok(s) = obj.cast::<PyString>() {
        let s = s.to_cow()?;
        let s = s.as_ref();
        let alias = match s {
            "bool" => Some(DType::Bool),
            _ => PY_NAMES.iter().find(|(_, n)| *n == s).map(|(d, _)| *d),
        };
        return DType::from_name(s).or(alias).ok_or_else(|| {
            PyTypeError::new_err(format!(
                "unknown dtype '{s}' (f32, f64, f16, bf16, i8, i32, i64, u8, bool, or their NumPy names)"
            ))
        });
    }
    let py = obj.py();
    let descr = PyArrayDescr::new(py, obj).map_err(|_| {
        PyTypeError::new_err(format!("not a dtype: {} (an rlx dtype, a name like 'f32', or a NumPy dtype)", repr(obj)))
    })?;
    descr_dtype(&descr).ok_or_else(|| unsupported(&descr))
}

fn repr(obj: &Bound<'_, PyAny>) -> String {
    obj.repr().map(|r| r.to_string()).unwrap_or_else(|_| "?".into())
}

fn unsupported(descr: &Bound<'_, PyArrayDescr>) -> PyErr {
    PyTypeError::new_err(format!(
        "NumPy dtype {} has no RLX equivalent (float32/64/16, bfloat16 from ml_dtypes, int8/32/64, uint8, bool)",
        repr(descr.as_any())
    ))
}

/// The RLX dtype of a NumPy dtype, if there is one.
fn descr_dtype(descr: &Bound<'_, PyArrayDescr>) -> Option<DType> {
    let d = match (descr.kind(), descr.itemsize()) {
        (b'f', 4) => DType::F32,
        (b'f', 8) => DType::F64,
        (b'f', 2) => DType::F16,
        (b'i', 1) => DType::I8,
        (b'i', 4) => DType::I32,
        (b'i', 8) => DType::I64,
        (b'u', 1) => DType::U8,
        (b'b', 1) => DType::Bool,
        (_, 2) if bf16_descr(descr.py()).is_some_and(|b| b.bind(descr.py()).is(descr)) => DType::BF16,
        (_, 2) if descr.typeobj().name().is_ok_and(|n| n == "bfloat16") => DType::BF16,
        _ => return None,
    };
    Some(d)
}

/// `numpy.dtype(ml_dtypes.bfloat16)`, when ml_dtypes is installed (looked up once).
fn bf16_descr(py: Python<'_>) -> Option<&Py<PyArrayDescr>> {
    static BF16: PyOnceLock<Option<Py<PyArrayDescr>>> = PyOnceLock::new();
    BF16.get_or_init(py, || {
        let t = py.import("ml_dtypes").and_then(|m| m.getattr("bfloat16")).ok()?;
        PyArrayDescr::new(py, &t).ok().map(Bound::unbind)
    })
    .as_ref()
}

/// NumPy's dtype for `d` (`None`: bf16 without ml_dtypes).
pub fn numpy_descr(py: Python<'_>, d: DType) -> Option<Bound<'_, PyArrayDescr>> {
    Some(match d {
        DType::F32 => numpy::dtype::<f32>(py),
        DType::F64 => numpy::dtype::<f64>(py),
        DType::F16 => PyArrayDescr::new(py, "float16").ok()?,
        DType::BF16 => bf16_descr(py)?.bind(py).clone(),
        DType::I8 => numpy::dtype::<i8>(py),
        DType::I32 => numpy::dtype::<i32>(py),
        DType::I64 => numpy::dtype::<i64>(py),
        DType::U8 => numpy::dtype::<u8>(py),
        DType::Bool => numpy::dtype::<bool>(py),
    })
}

/// An input as RLX reads it.
pub enum Tensor<'py> {
    /// A C-contiguous, native-endian NumPy array of an RLX dtype, read in place.
    Array { array: Bound<'py, PyUntypedArray>, dtype: DType, dims: Vec<usize> },
    /// A Python number or list converted exactly to an integer or bool dtype.
    Owned(HostTensor),
}

impl Tensor<'_> {
    /// The bytes, borrowed; a bool array holding bytes other than 0 / 1 is an error.
    pub fn view(&self) -> PyResult<TensorRef<'_>> {
        let (array, dtype, dims) = match self {
            Tensor::Owned(t) => return Ok(t.view()),
            Tensor::Array { array, dtype, dims } => (array, dtype, dims),
        };
        let len = dims.iter().product::<usize>() * dtype.size_bytes();
        // SAFETY: a C-contiguous array of `len` bytes (shape x itemsize). `array` holds a
        // reference, so NumPy frees nothing and refuses `resize` while the view lives;
        // another thread that writes to the array, or forces a resize with
        // `refcheck=False`, during a run (the GIL is released) races with it, as with
        // any NumPy call that releases the GIL.
        let bytes = unsafe {
            let data = (*array.as_array_ptr()).fields.data as *const u8;
            if len == 0 { &[][..] } else { std::slice::from_raw_parts(data, len) }
        };
        TensorRef::new(*dtype, dims, bytes).map_err(crate::to_py)
    }
}

/// `array` as a [`Tensor`] read in place, made C-contiguous and native-endian first
/// when it is not.
fn borrow_array(array: Bound<'_, PyUntypedArray>) -> PyResult<Tensor<'_>> {
    let descr = array.dtype();
    let dtype = descr_dtype(&descr).ok_or_else(|| unsupported(&descr))?;
    let array = if array.is_c_contiguous() && descr.is_native_byteorder() != Some(false) {
        array
    } else {
        let native = descr.call_method1("newbyteorder", ("=",))?;
        let np = array.py().import("numpy")?;
        np.call_method1("ascontiguousarray", (&array, native))?.cast_into::<PyUntypedArray>()?
    };
    let dims = array.shape().to_vec();
    Ok(Tensor::Array { array, dtype, dims })
}

/// A tensor from a NumPy array (read in place when its layout allows) or anything
/// `numpy.asarray` takes (numbers, nested lists). `like`, when given, is the dtype a
/// non-array is made as: floats as NumPy rounds them, integers and bools exactly (1.5 or
/// 300 for a u8 input is an error, not a truncation). An array keeps its own dtype: the
/// runtime converts float formats by value and refuses other mismatches.
pub fn array_from_py<'py>(obj: &Bound<'py, PyAny>, like: Option<DType>) -> PyResult<Tensor<'py>> {
    if let Ok(a) = obj.cast::<PyUntypedArray>() {
        return borrow_array(a.clone());
    }
    let py = obj.py();
    let float = like.filter(|d| d.is_float()).and_then(|d| numpy_descr(py, d));
    let array = py
        .import("numpy")?
        .call_method1("asarray", (obj, float))
        .map_err(|e| PyTypeError::new_err(format!("expected a NumPy array, got {}: {e}", repr(obj))))?
        .cast_into::<PyUntypedArray>()?;
    let t = borrow_array(array)?;
    match (&t, like.filter(|d| !d.is_float())) {
        (Tensor::Array { dtype, .. }, Some(want)) if *dtype != want => {
            let host = t.view()?.to_host();
            crate::guarded(|| convert(&host, want)).map(Tensor::Owned)
        }
        _ => Ok(t),
    }
}

/// `e` with `context` before its message, same exception type (rlx.Error or TypeError).
fn in_context(py: Python<'_>, e: PyErr, context: &str) -> PyErr {
    let message = format!("{context}: {}", e.value(py));
    if e.is_instance_of::<PyTypeError>(py) {
        PyTypeError::new_err(message)
    } else if e.is_instance_of::<crate::Error>(py) {
        crate::Error::new_err(message)
    } else {
        e
    }
}

/// The (name, array) pairs of a call like `run(inputs, **kwargs)`, in the order given:
/// the dict `inputs` (None: nothing), then the keywords (errors name the entry:
/// "`role` 'name': ..."). `like(name)` is the dtype a non-array for that name is made as.
pub fn named_arrays<'py>(
    role: &str,
    inputs: Option<&Bound<'py, PyAny>>,
    kwargs: Option<&Bound<'py, PyDict>>,
    like: impl Fn(&str) -> Option<DType>,
) -> PyResult<Vec<(String, Tensor<'py>)>> {
    let mut named = Vec::new();
    let dict = match inputs.filter(|i| !i.is_none()) {
        Some(i) => {
            Some(i.cast::<PyDict>().map_err(|_| PyTypeError::new_err(format!("{role}s: a dict of name -> array")))?)
        }
        None => None,
    };
    for d in dict.into_iter().chain(kwargs) {
        for (k, v) in d.iter() {
            let name = k
                .cast::<PyString>()
                .map_err(|_| PyTypeError::new_err(format!("{role} names must be strings")))?
                .to_cow()?
                .into_owned();
            let t = array_from_py(&v, like(&name)).map_err(|e| in_context(d.py(), e, &format!("{role} '{name}'")))?;
            named.push((name, t));
        }
    }
    Ok(named)
}

/// The views of [`named_arrays`]' tensors, checked once (a bool array's bytes must be
/// 0 or 1; an error names the entry).
pub fn views<'a>(
    py: Python<'_>,
    role: &str,
    named: &'a [(String, Tensor<'_>)],
) -> PyResult<Vec<(&'a str, TensorRef<'a>)>> {
    named
        .iter()
        .map(|(n, t)| Ok((n.as_str(), t.view().map_err(|e| in_context(py, e, &format!("{role} '{n}'")))?)))
        .collect()
}

/// [`array_from_py`] as an owned tensor.
pub fn tensor_from_py(obj: &Bound<'_, PyAny>, like: Option<DType>) -> PyResult<HostTensor> {
    Ok(array_from_py(obj, like)?.view()?.to_host())
}

/// Whether integer `v` is a value of `dtype` (floats take any; i64 -> f64 rounds).
pub fn int_fits(v: i64, dtype: DType) -> bool {
    match dtype {
        DType::I8 => i8::try_from(v).is_ok(),
        DType::U8 => u8::try_from(v).is_ok(),
        DType::I32 => i32::try_from(v).is_ok(),
        DType::Bool => v == 0 || v == 1,
        _ => true,
    }
}

/// `t`'s values as dtype `to`: to a float by value with one rounding; to an integer or
/// bool exactly (a fraction or a value out of range is an error naming the element).
pub fn convert(t: &HostTensor, to: DType) -> rlx::Result<HostTensor> {
    if to.is_float() || t.dtype().is_float() {
        // To an integer, from_f64_as refuses values `to` does not hold exactly.
        return HostTensor::from_f64_as(to, t.dims(), &t.to_f64_vec());
    }
    let values = t.to_i64_vec();
    if let Some(i) = values.iter().position(|&v| !int_fits(v, to)) {
        return Err(rlx::Error::input(format!("element {i} ({}) does not fit {to}", values[i])));
    }
    if to == DType::I64 {
        return HostTensor::from_i64(t.dims(), &values);
    }
    HostTensor::from_f64_as(to, t.dims(), &values.iter().map(|&v| v as f64).collect::<Vec<_>>())
}

/// Owns the bytes of an array made by [`tensor_to_py`] (its NumPy base object).
#[pyclass(module = "rlx", frozen)]
struct Buffer(#[allow(dead_code)] Vec<u8>);

/// A NumPy array holding `t`'s values, its bytes moved, not copied.
pub fn tensor_to_py(py: Python<'_>, t: HostTensor) -> PyResult<Bound<'_, PyAny>> {
    let Some(descr) = numpy_descr(py, t.dtype()) else {
        // bf16 without ml_dtypes: exact f32.
        let dims: Vec<usize> = t.dims().to_vec();
        return Ok(PyArray1::from_vec(py, t.to_f32_vec()).reshape(dims)?.into_any());
    };
    let mut dims: Vec<npy_intp> = t.dims().iter().map(|&d| d as npy_intp).collect();
    let mut bytes = t.into_bytes();
    // An empty array gets a NumPy allocation (a Vec's dangling pointer is unaligned).
    let data = if bytes.is_empty() { std::ptr::null_mut() } else { bytes.as_mut_ptr().cast::<std::ffi::c_void>() };
    let owner = Py::new(py, Buffer(bytes))?;
    // SAFETY: `data` points at `dims` elements of `descr` (the tensor's bytes, now owned
    // by `owner`, whose heap buffer does not move); NewFromDescr steals the descr
    // reference and SetBaseObject the owner's, so the array keeps its bytes alive.
    unsafe {
        let array = PY_ARRAY_API.PyArray_NewFromDescr(
            py,
            npyffi::get_type_object(py, NpyTypes::PyArray_Type),
            descr.into_dtype_ptr(),
            dims.len() as std::ffi::c_int,
            dims.as_mut_ptr(),
            std::ptr::null_mut(),
            data,
            NPY_ARRAY_WRITEABLE,
            std::ptr::null_mut(),
        );
        if array.is_null() {
            return Err(PyErr::fetch(py));
        }
        let array = Bound::from_owned_ptr(py, array);
        if PY_ARRAY_API.PyArray_SetBaseObject(py, array.as_ptr() as *mut npyffi::PyArrayObject, owner.into_ptr()) != 0 {
            return Err(PyErr::fetch(py));
        }
        Ok(array)
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyDType>()?;
    for (d, name) in PY_NAMES {
        m.add(name, PyDType(d))?;
    }
    Ok(())
}
