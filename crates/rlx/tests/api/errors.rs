use crate::compile;
use rlx::prelude::*;

fn small_graph() -> Graph {
    let mut g = Graph::new("small");
    let x = g.input("x", DType::F32, &[2, 3]).unwrap();
    let w = g.param("w", DType::F32, &[3, 2]).unwrap();
    let y = g.matmul(x, w).unwrap();
    g.set_outputs(&[y]).unwrap();
    g
}

fn msg<T: std::fmt::Debug>(r: Result<T>) -> String {
    r.unwrap_err().to_string()
}

#[test]
fn run_errors_name_the_tensor_and_its_type() {
    let mut c = compile(&small_graph());
    c.set_param("w", &[0.0; 6]).unwrap();
    let m = msg(c.run(&[("x", &[0.0; 5])]));
    assert!(m.contains("'x'") && m.contains("f32[2,3]") && m.contains("6 values") && m.contains("got 5"), "{m}");
    let m = msg(c.run(&[("x", &[0.0; 6]), ("y", &[0.0])]));
    assert!(m.contains("unknown input 'y'") && m.contains("'x' f32[2,3]"), "{m}");
    let m = msg(c.run(&[]));
    assert!(m.contains("missing input 'x'") && m.contains("f32[2,3]"), "{m}");
    let m = msg(c.run(&[("x", &[0.0; 6]), ("x", &[0.0; 6])]));
    assert!(m.contains("'x' is given twice"), "{m}");
    let wrong_dtype = HostTensor::from_i64(&[2, 3], &[0; 6]).unwrap();
    let m = msg(c.run_typed(&[("x", &wrong_dtype)]));
    assert!(m.contains("'x'") && m.contains("f32[2,3]") && m.contains("i64[2,3]"), "{m}");
    let wrong_dims = HostTensor::from_f32(&[3, 2], &[0.0; 6]).unwrap();
    let m = msg(c.run_typed(&[("x", &wrong_dims)]));
    assert!(m.contains("input 'x' expects f32[2,3], got f32[3,2]"), "{m}");
}

#[test]
fn param_errors_name_the_param() {
    let mut c = compile(&small_graph());
    let m = msg(c.run(&[("x", &[0.0; 6])]));
    assert!(m.contains("param 'w'") && m.contains("never set") && m.contains("f32[3,2]"), "{m}");
    let m = msg(c.set_param("w", &[0.0; 7]));
    assert!(m.contains("'w'") && m.contains("f32[3,2]") && m.contains("got 7"), "{m}");
    let m = msg(c.set_param("v", &[0.0; 6]));
    assert!(m.contains("unknown param 'v'") && m.contains("'w' f32[3,2]"), "{m}");
}

#[test]
fn builder_errors_name_op_and_operands() {
    let mut g = Graph::new("b");
    let a = g.input("a", DType::F32, &[2, 3]).unwrap();
    let b = g.input("b", DType::F32, &[4]).unwrap();
    let m = msg(g.add(a, b));
    assert!(m.contains("add") && m.contains("f32[2,3]") && m.contains("f32[4]") && m.contains("'a'"), "{m}");
    let c = g.input("c", DType::F64, &[2, 3]).unwrap();
    let m = msg(g.mul(a, c));
    assert!(m.contains("mul") && m.contains("f64[2,3]"), "{m}");
    let m = msg(g.input("a", DType::F32, &[1]));
    assert!(m.contains("'a'") && m.contains("already used"), "{m}");
    // An id from another graph.
    let mut other = Graph::new("other");
    let foreign = {
        let mut h = Graph::new("h");
        for i in 0..9 {
            h.input(&format!("i{i}"), DType::F32, &[1]).unwrap();
        }
        h.input("last", DType::F32, &[1]).unwrap()
    };
    let m = msg(other.unary(Unary::Exp, foreign));
    assert!(m.contains("%9") && m.contains("'other'"), "{m}");
    let m = msg(g.set_outputs(&[foreign]));
    assert!(m.contains("%9"), "{m}");
    let m = msg(g.constant(DType::F32, &[2, 2], &[1.0; 3]));
    assert!(m.contains("[2,2]") && m.contains("got 3"), "{m}");
    let m = msg(g.input("huge", DType::F64, &[usize::MAX / 2, 4]));
    assert!(m.contains("overflows"), "{m}");
}

#[test]
fn malformed_documents_and_files_are_errors() {
    let m = msg(Graph::from_json("{ not json"));
    assert!(m.contains("graph JSON") && m.contains("line 1"), "{m}");
    let good = small_graph().to_json().unwrap();
    let m = msg(Graph::from_json(&good.replace("\"version\": 1", "\"version\": 7")));
    assert!(m.contains("version 7"), "{m}");
    let m = msg(Graph::from_json(&good.replacen("2,\n        3", "2,\n        4", 1)));
    assert!(m.contains("node"), "{m}");
    let m = msg(Graph::from_json(&good[..good.len() / 2]));
    assert!(m.contains("EOF") || m.contains("end"), "{m}");
    // .npy: truncated data, bad magic.
    let npy = rlx::io::npy_bytes(&HostTensor::from_f32(&[4], &[1.0, 2.0, 3.0, 4.0]).unwrap());
    let data_at = npy.len() - 16;
    let m = msg(rlx::io::parse_npy(&npy[..npy.len() - 3]));
    assert!(m.contains(&format!("byte {data_at}")) && m.contains("needs 16") && m.contains("has 13"), "{m}");
    let m = msg(rlx::io::parse_npy(b"PK\x03\x04 zip file"));
    assert!(m.contains("byte 0") && m.contains("magic"), "{m}");
}
