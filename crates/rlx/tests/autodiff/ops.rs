//! Every differentiable op against central finite differences in f64: the gradient
//! (`grad_with_loss`), a directional derivative (`jvp`) and a Hessian-vector product
//! (`hvp`, checked against finite differences of the gradient). Table-driven: op, input
//! domain (chosen away from kinks and ties), dtype f64, tolerance.

use super::*;
use rlx::ir::ActivationQuant;
use rlx::ir::quant::{QuantScheme, quantize};

/// Relative step of the central differences: truncation error ~h^2, rounding ~eps/h.
const H: f64 = 1e-5;

pub(super) struct Case {
    pub(super) name: String,
    pub(super) specs: Vec<Spec>,
    pub(super) build: Build,
    /// Tolerance (relative to 1 + |finite difference|) of first and second order.
    tol: (f64, f64),
    /// The finite-difference step, relative to max(1, |x|).
    h: f64,
}

fn case(name: &str, specs: Vec<Spec>, build: impl Fn(&mut Graph, &[NodeId]) -> Result<NodeId> + 'static) -> Case {
    Case { name: name.to_string(), specs, build: Box::new(build), tol: (1e-6, 1e-5), h: H }
}

pub(super) fn seed_of(name: &str) -> u64 {
    name.bytes().fold(1469598103934665603u64, |h, b| (h ^ b as u64).wrapping_mul(1099511628211))
}

fn check(c: &Case) {
    let seed = seed_of(&c.name);
    let mut rng = Rng::new(seed);
    let xs = draw(&mut rng, &c.specs);
    let f = scalar_graph(&c.specs, &c.build, seed);
    let float_ids: Vec<usize> = (0..c.specs.len()).filter(|&i| !matches!(c.specs[i], Spec::Int { .. })).collect();
    let names: Vec<String> = float_ids.iter().map(|i| format!("x{i}")).collect();
    let wrt: Vec<&str> = names.iter().map(String::as_str).collect();
    let what = |s: &str| format!("{} {s}", c.name);

    let mut forward = Runner::new(&f);
    let loss = |forward: &mut Runner, xs: &[HostTensor]| forward.run(&named(xs))[0][0];
    let one = HostTensor::from_f64_as(DType::F64, &[], &[1.0]).unwrap();
    let gr = grad_with_loss(&f, &wrt).unwrap();
    let mut grads = Runner::new(&gr);
    let grad_at = |grads: &mut Runner, xs: &[HostTensor]| {
        let mut feed = named(xs);
        feed.push(("d_output".into(), one.clone()));
        grads.run(&feed)
    };
    let got = grad_at(&mut grads, &xs);
    assert!((got[0][0] - loss(&mut forward, &xs)).abs() <= 1e-12 * (1.0 + got[0][0].abs()), "{}", what("loss"));
    for (k, &i) in float_ids.iter().enumerate() {
        let fd: Vec<f64> = (0..xs[i].len())
            .map(|j| {
                let h = c.h * xs[i].to_f64_vec()[j].abs().max(1.0);
                let mut plus = xs.to_vec();
                plus[i] = nudged(&xs[i], j, h);
                let mut minus = xs.to_vec();
                minus[i] = nudged(&xs[i], j, -h);
                (loss(&mut forward, &plus) - loss(&mut forward, &minus)) / (2.0 * h)
            })
            .collect();
        assert_close(&got[1 + k], &fd, c.tol.0, &what(&format!("d/dx{i}")));
    }

    // A random direction v over every float input.
    let directions: Vec<Spec> = c
        .specs
        .iter()
        .map(|s| match s {
            Spec::Exact { dims, .. } => float(dims, -1.0, 1.0),
            other => other.clone(),
        })
        .collect();
    let v: Vec<HostTensor> = draw(&mut rng, &directions);
    let along = |s: f64| -> Vec<HostTensor> {
        xs.iter().enumerate().map(|(i, x)| if float_ids.contains(&i) { axpy(x, s, &v[i]) } else { x.clone() }).collect()
    };
    let tangent_feed = |xs: &[HostTensor]| {
        let mut feed = named(xs);
        for &i in &float_ids {
            feed.push((format!("tangent_x{i}"), v[i].clone()));
        }
        feed
    };
    let fd_dir = (loss(&mut forward, &along(c.h)) - loss(&mut forward, &along(-c.h))) / (2.0 * c.h);
    let mut jv = Runner::new(&jvp(&f, &wrt).unwrap());
    let out = jv.run(&tangent_feed(&xs));
    assert_close(&out[1], &[fd_dir], c.tol.0, &what("jvp"));

    // H v against finite differences of the gradient along v.
    let mut hv = Runner::new(&hvp(&f, &wrt).unwrap());
    let out = hv.run(&tangent_feed(&xs));
    let (up, down) = (grad_at(&mut grads, &along(c.h)), grad_at(&mut grads, &along(-c.h)));
    for k in 0..float_ids.len() {
        let fd: Vec<f64> = up[1 + k].iter().zip(&down[1 + k]).map(|(a, b)| (a - b) / (2.0 * c.h)).collect();
        assert_close(&out[1 + float_ids.len() + k], &fd, c.tol.1, &what(&format!("hvp x{}", float_ids[k])));
        assert_close(&out[1 + k], &got[1 + k], 1e-12, &what("hvp's gradient"));
    }
}

fn unary_domain(u: Unary) -> (f64, f64) {
    match u {
        Unary::Log | Unary::Sqrt | Unary::Rsqrt => (0.3, 3.0),
        Unary::Recip => (0.5, 2.0),
        Unary::Ln1p => (-0.5, 2.0),
        Unary::Tan => (-1.0, 1.0),
        // Away from the kink at 0.
        Unary::Abs | Unary::Relu => (0.2, 2.0),
        _ => (-2.0, 2.0),
    }
}

pub(super) fn elementwise_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for u in Unary::ALL {
        let (lo, hi) = unary_domain(u);
        cases.push(case(u.name(), vec![float(&[2, 3], lo, hi)], move |g, x| g.unary(u, x[0])));
    }
    // Abs and relu on the negative side too.
    cases.push(case("abs_negative", vec![float(&[4], -2.0, -0.2)], |g, x| g.unary(Unary::Abs, x[0])));
    cases.push(case("relu_negative", vec![float(&[4], -2.0, -0.2)], |g, x| g.unary(Unary::Relu, x[0])));
    for op in BinaryOp::ALL {
        let (lo, hi) = match op {
            BinaryOp::Pow => (0.5, 2.0),
            BinaryOp::Div => (0.5, 2.0),
            _ => (-2.0, 2.0),
        };
        // Broadcasting both ways: [2, 3] with [3], and [2, 1] with [1, 3].
        cases.push(case(
            &format!("{}_bcast_row", op.name()),
            vec![float(&[2, 3], lo, hi), float(&[3], lo, hi)],
            move |g, x| g.binary(op, x[0], x[1]),
        ));
        cases.push(case(
            &format!("{}_outer", op.name()),
            vec![float(&[2, 1], lo, hi), float(&[1, 3], lo, hi)],
            move |g, x| g.binary(op, x[0], x[1]),
        ));
    }
    cases.push(case(
        "where",
        vec![float(&[2, 3], -1.0, 1.0), float(&[2, 3], -1.0, 1.0), float(&[3], -1.0, 1.0)],
        |g, x| {
            let c = g.gt(x[0], x[1])?;
            g.where_(c, x[1], x[2])
        },
    ));
    // f32 inside: a step of 1e-2 keeps f32 rounding (6e-8 / h) below the tolerance, and
    // the truncation error (h^2 |f'''| / 6) too.
    cases.push(Case {
        tol: (1e-3, 1e-3),
        h: 1e-2,
        ..case("cast_through_f32", vec![float(&[5], -2.0, 2.0)], |g, x| {
            let y = g.cast(x[0], DType::F32)?;
            let y = g.unary(Unary::Tanh, y)?;
            g.cast(y, DType::F64)
        })
    });
    cases
}

pub(super) fn structural_cases() -> Vec<Case> {
    let mut cases = vec![
        case("matmul", vec![float(&[2, 3], -1.0, 1.0), float(&[3, 4], -1.0, 1.0)], |g, x| g.matmul(x[0], x[1])),
        case("matmul_batched_bcast", vec![float(&[2, 2, 3], -1.0, 1.0), float(&[3, 2], -1.0, 1.0)], |g, x| {
            g.matmul(x[0], x[1])
        }),
        // A weight with unit batch axes, and one shared by two batch axes of `a`: its
        // gradient is one product over every row of `a`.
        case("matmul_bcast_unit_batch", vec![float(&[2, 2, 3], -1.0, 1.0), float(&[1, 3, 2], -1.0, 1.0)], |g, x| {
            g.matmul(x[0], x[1])
        }),
        case(
            "matmul_bcast_two_batch_axes",
            vec![float(&[2, 3, 2, 3], -1.0, 1.0), float(&[3, 4], -1.0, 1.0)],
            |g, x| g.matmul(x[0], x[1]),
        ),
        // `a` batched along an axis the weight keeps: summed per weight batch entry.
        case("matmul_bcast_partial", vec![float(&[2, 3, 2, 3], -1.0, 1.0), float(&[1, 3, 3, 2], -1.0, 1.0)], |g, x| {
            g.matmul(x[0], x[1])
        }),
        case("matmul_square", vec![float(&[3, 3], -1.0, 1.0)], |g, x| g.matmul(x[0], x[0])),
        case("softmax", vec![float(&[2, 4], -2.0, 2.0)], |g, x| g.softmax(x[0], 1)),
        case("softmax_axis0", vec![float(&[3, 2], -2.0, 2.0)], |g, x| g.softmax(x[0], 0)),
        case("log_softmax", vec![float(&[2, 4], -2.0, 2.0)], |g, x| g.log_softmax(x[0], 1)),
        case("layer_norm", vec![float(&[3, 5], -2.0, 2.0), float(&[5], 0.5, 1.5), float(&[5], -1.0, 1.0)], |g, x| {
            g.layer_norm(x[0], Some(x[1]), Some(x[2]), 1e-5)
        }),
        case("layer_norm_plain", vec![float(&[2, 4], -2.0, 2.0)], |g, x| g.layer_norm(x[0], None, None, 1e-3)),
        case("layer_norm_beta_only", vec![float(&[3, 4], -2.0, 2.0), float(&[4], -1.0, 1.0)], |g, x| {
            g.layer_norm(x[0], None, Some(x[1]), 1e-5)
        }),
        case("layer_norm_gamma_only", vec![float(&[3, 4], -2.0, 2.0), float(&[4], 0.5, 1.5)], |g, x| {
            g.layer_norm(x[0], Some(x[1]), None, 1e-5)
        }),
        case("rms_norm", vec![float(&[3, 5], -2.0, 2.0), float(&[5], 0.5, 1.5)], |g, x| {
            g.rms_norm(x[0], Some(x[1]), 1e-5)
        }),
        case("rms_norm_plain", vec![float(&[2, 4], -2.0, 2.0)], |g, x| g.rms_norm(x[0], None, 1e-6)),
        case("reshape", vec![float(&[2, 3], -1.0, 1.0)], |g, x| {
            let y = g.reshape(x[0], &[3, 2])?;
            g.unary(Unary::Sin, y)
        }),
        case("transpose", vec![float(&[2, 3, 4], -1.0, 1.0)], |g, x| g.transpose(x[0], &[2, 0, 1])),
        case("narrow", vec![float(&[3, 5], -1.0, 1.0)], |g, x| g.narrow(x[0], 1, 1, 3)),
        case("narrow_edge", vec![float(&[4, 2], -1.0, 1.0)], |g, x| g.narrow(x[0], 0, 0, 2)),
        case("concat", vec![float(&[2, 2], -1.0, 1.0), float(&[2, 3], -1.0, 1.0)], |g, x| {
            g.concat(&[x[0], x[1], x[0]], 1)
        }),
        case("expand", vec![float(&[1, 3], -1.0, 1.0)], |g, x| g.expand(x[0], &[2, 4, 3])),
        case("gather", vec![float(&[4, 3], -1.0, 1.0), int(&[2, 2], &[3, 0, 3, 1])], |g, x| g.gather(x[0], x[1])),
        case("scatter_add", vec![int(&[3], &[2, 0, 2]), float(&[3, 2], -1.0, 1.0)], |g, x| {
            g.scatter_add(x[0], x[1], 4)
        }),
        case("cross_entropy", vec![float(&[3, 4], -2.0, 2.0), int(&[3], &[1, 3, 0])], |g, x| {
            g.cross_entropy(x[0], x[1])
        }),
    ];
    for op in ReduceOp::ALL {
        for (axes, keep) in [(vec![1], false), (vec![0, 2], true)] {
            let name = format!("{}_{:?}_{keep}", op.name(), axes);
            let lo = if op == ReduceOp::Prod { 0.5 } else { -2.0 };
            cases.push(case(&name, vec![float(&[2, 3, 2], lo, 2.0)], move |g, x| g.reduce(op, x[0], &axes, keep)));
        }
    }
    // prod over inputs holding exact zeros (one, and two): the zero-safe derivative
    // ("product of the others"); prod is multilinear, so central differences are exact.
    cases.push(case("prod_with_1_zero", vec![exact(&[2, 3], &[0.0, 1.5, -0.7, 2.0, 0.9, 1.1])], |g, x| {
        g.reduce(ReduceOp::Prod, x[0], &[0, 1], false)
    }));
    cases.push(case("prod_with_2_zeros", vec![exact(&[2, 3], &[0.0, 1.5, 0.0, 2.0, 0.9, 1.1])], |g, x| {
        g.reduce(ReduceOp::Prod, x[0], &[1], false)
    }));
    cases
}

pub(super) fn conv_cases() -> Vec<Case> {
    let params = Conv2dParams { stride: [2, 1], padding: [1, 0, 1, 2], dilation: [1, 2], groups: 2 };
    let pool = PoolParams { kernel: [2, 3], stride: [1, 2], padding: [1, 1, 0, 1] };
    vec![
        case(
            "conv2d",
            vec![float(&[2, 4, 5, 6], -1.0, 1.0), float(&[6, 2, 3, 2], -1.0, 1.0), float(&[6], -1.0, 1.0)],
            move |g, x| g.conv2d(x[0], x[1], Some(x[2]), params),
        ),
        case("conv2d_plain", vec![float(&[1, 2, 4, 4], -1.0, 1.0), float(&[3, 2, 3, 3], -1.0, 1.0)], |g, x| {
            g.conv2d(x[0], x[1], None, Conv2dParams::default().with_padding(1))
        }),
        case("max_pool2d", vec![float(&[2, 2, 4, 5], -2.0, 2.0)], move |g, x| g.max_pool2d(x[0], pool)),
        case("avg_pool2d", vec![float(&[2, 2, 4, 5], -2.0, 2.0)], move |g, x| g.avg_pool2d(x[0], pool, false)),
        case("avg_pool2d_pad", vec![float(&[1, 2, 4, 5], -2.0, 2.0)], move |g, x| g.avg_pool2d(x[0], pool, true)),
        // The gradient ops as functions in their own right (second-order graphs use them).
        case(
            "conv2d_grad_input",
            vec![float(&[2, 6, 3, 6], -1.0, 1.0), float(&[6, 2, 3, 2], -1.0, 1.0)],
            move |g, x| g.conv2d_grad_input(x[0], x[1], params, [2, 4, 5, 6]),
        ),
        case(
            "conv2d_grad_weight",
            vec![float(&[2, 4, 5, 6], -1.0, 1.0), float(&[2, 6, 3, 6], -1.0, 1.0)],
            move |g, x| g.conv2d_grad_weight(x[0], x[1], params, [6, 2, 3, 2]),
        ),
        case("max_pool2d_grad", vec![float(&[1, 2, 4, 5], -2.0, 2.0), float(&[1, 2, 4, 3], -1.0, 1.0)], move |g, x| {
            g.max_pool2d_grad(x[0], x[1], pool)
        }),
        case(
            "max_pool2d_select",
            vec![float(&[1, 2, 4, 5], -2.0, 2.0), float(&[1, 2, 4, 5], -1.0, 1.0)],
            move |g, x| g.max_pool2d_select(x[0], x[1], pool),
        ),
        case("avg_pool2d_grad", vec![float(&[1, 2, 4, 3], -1.0, 1.0)], move |g, x| {
            g.avg_pool2d_grad(x[0], pool, false, [1, 2, 4, 5])
        }),
    ]
}

pub(super) fn sequence_cases() -> Vec<Case> {
    let qkv = |hq: usize, hkv: usize, sq: usize, skv: usize| {
        vec![
            float(&[1, hq, sq, 4], -1.0, 1.0),
            float(&[1, hkv, skv, 4], -1.0, 1.0),
            float(&[1, hkv, skv, 3], -1.0, 1.0),
        ]
    };
    let mut bias = qkv(2, 2, 3, 4);
    bias.push(float(&[1, 1, 3, 4], -1.0, 1.0));
    let mut len = qkv(4, 2, 2, 5);
    len.push(int(&[1], &[4]));
    let mut kv = vec![float(&[1, 2, 5, 3], -1.0, 1.0), float(&[1, 2, 2, 3], -1.0, 1.0)];
    kv.push(int(&[], &[2]));
    let w: Vec<f32> = (0..3 * 64).map(|i| ((i * 37 % 101) as f32 / 50.0) - 1.0).collect();
    let packed = quantize(QuantScheme::Q8_0, &w).unwrap();
    vec![
        case("attention", qkv(2, 2, 3, 3), |g, x| g.attention(x[0], x[1], x[2], AttentionMask::None, None)),
        case("attention_causal_gqa", qkv(4, 2, 3, 5), |g, x| {
            g.attention(x[0], x[1], x[2], AttentionMask::Causal, Some(0.7))
        }),
        case("attention_bias", bias, |g, x| g.attention(x[0], x[1], x[2], AttentionMask::Bias(x[3]), None)),
        case("attention_causal_len", len.clone(), |g, x| {
            g.attention(x[0], x[1], x[2], AttentionMask::CausalLen(x[3]), None)
        }),
        case("attention_sliding_len", len, |g, x| {
            g.attention(x[0], x[1], x[2], AttentionMask::SlidingLen(x[3], 2), None)
        }),
        case("rope_neox", vec![float(&[2, 3, 6], -1.0, 1.0), int(&[3], &[0, 5, 17])], |g, x| {
            g.rope(x[0], x[1], RopeStyle::NeoX, 100.0, Some(4))
        }),
        case("rope_gptj", vec![float(&[3, 4], -1.0, 1.0), int(&[3], &[2, 3, 9])], |g, x| {
            g.rope(x[0], x[1], RopeStyle::GptJ, 10000.0, None)
        }),
        case("kv_append", kv, |g, x| g.kv_append(x[0], x[1], x[2], 2)),
        // Narrow index dtypes: derivative rules widen them before arithmetic.
        case("kv_append_u8_pos", vec![float(&[1, 2, 5, 3], -1.0, 1.0), float(&[1, 2, 2, 3], -1.0, 1.0)], |g, x| {
            let pos = g.constant_tensor(HostTensor::from_f64_as(DType::U8, &[], &[3.0])?)?;
            g.kv_append(x[0], x[1], pos, 2)
        }),
        case("rope_u8_positions", vec![float(&[3, 4], -1.0, 1.0)], |g, x| {
            let pos = g.constant_tensor(HostTensor::from_f64_as(DType::U8, &[3], &[1.0, 4.0, 200.0])?)?;
            g.rope(x[0], pos, RopeStyle::NeoX, 10000.0, None)
        }),
        case("dequant_matmul_vector", vec![float(&[64], -1.0, 1.0)], {
            let packed = packed.clone();
            move |g, x| {
                let bytes = HostTensor::from_bytes(DType::U8, &[3, 68], packed.clone())?;
                let w = g.constant_tensor(bytes)?;
                let x32 = g.cast(x[0], DType::F32)?;
                let y = g.dequant_matmul(x32, w, QuantScheme::Q8_0, ActivationQuant::F32)?;
                g.cast(y, DType::F64)
            }
        }),
        case("dequant_matmul", vec![float(&[2, 64], -1.0, 1.0)], move |g, x| {
            let bytes = HostTensor::from_bytes(DType::U8, &[3, 68], packed.clone())?;
            let w = g.constant_tensor(bytes)?;
            let x32 = g.cast(x[0], DType::F32)?;
            let y = g.dequant_matmul(x32, w, QuantScheme::Q8_0, ActivationQuant::F32)?;
            g.cast(y, DType::F64)
        }),
    ]
    .into_iter()
    // f32 inside (linear in x: the step only has to beat f32 rounding).
    .map(|c| if c.name.starts_with("dequant_matmul") { Case { tol: (1e-3, 1e-3), h: 1e-2, ..c } } else { c })
    .collect()
}

#[test]
fn elementwise_ops_match_finite_differences() {
    elementwise_cases().iter().for_each(check);
}

#[test]
fn structural_ops_match_finite_differences() {
    structural_cases().iter().for_each(check);
}

#[test]
fn conv_and_pool_ops_match_finite_differences() {
    conv_cases().iter().for_each(check);
}

#[test]
fn sequence_ops_match_finite_differences() {
    sequence_cases().iter().for_each(check);
}

#[test]
fn every_differentiable_op_has_a_case() {
    // The ops each case's graph actually contains (not its name).
    let mut seen = std::collections::BTreeSet::new();
    for c in [elementwise_cases(), structural_cases(), conv_cases(), sequence_cases()].into_iter().flatten() {
        let g = scalar_graph(&c.specs, &c.build, 0);
        for (_, n) in g.nodes() {
            seen.insert(n.op().name().to_string());
        }
    }
    let mut want: Vec<&str> = vec![
        "matmul",
        "reduce_sum",
        "reduce_mean",
        "reduce_max",
        "reduce_min",
        "reduce_prod",
        "softmax",
        "log_softmax",
        "layer_norm",
        "rms_norm",
        "reshape",
        "transpose",
        "narrow",
        "concat",
        "expand",
        "gather",
        "scatter_add",
        "cross_entropy",
        "conv2d",
        "max_pool2d",
        "avg_pool2d",
        "conv2d_grad_input",
        "conv2d_grad_weight",
        "max_pool2d_grad",
        "max_pool2d_select",
        "avg_pool2d_grad",
        "attention",
        "rope",
        "kv_append",
        "dequant_matmul",
        "where",
        "cast",
    ];
    want.extend(Unary::ALL.iter().map(|u| u.name()));
    want.extend(BinaryOp::ALL.iter().map(|b| b.name()));
    for op in want {
        assert!(seen.contains(op), "no finite-difference case builds a {op} node");
    }
}

/// The conventions finite differences cannot see (kinks and ties), by exact value.
#[test]
fn tie_and_kink_conventions() {
    let grad_of = |dims: &[usize], x: &[f64], build: &dyn Fn(&mut Graph, NodeId) -> Result<NodeId>| -> Vec<f64> {
        let mut g = Graph::new("convention");
        let xi = g.input("x", DType::F64, dims).unwrap();
        let y = build(&mut g, xi).unwrap();
        let axes: Vec<usize> = (0..g.dims(y).len()).collect();
        let l = if axes.is_empty() { y } else { g.reduce(ReduceOp::Sum, y, &axes, false).unwrap() };
        g.set_outputs(&[l]).unwrap();
        let gr = grad(&g, &["x"]).unwrap();
        let feed = vec![
            ("x".to_string(), HostTensor::from_f64_as(DType::F64, dims, x).unwrap()),
            ("d_output".to_string(), HostTensor::from_f64_as(DType::F64, &[], &[1.0]).unwrap()),
        ];
        Runner::new(&gr).run(&feed).remove(0)
    };
    // Ties split evenly (JAX): reduce_max over [1, 1, 0] and maximum(x, x).
    assert_eq!(grad_of(&[3], &[1.0, 1.0, 0.0], &|g, x| g.reduce(ReduceOp::Max, x, &[0], false)), [0.5, 0.5, 0.0]);
    assert_eq!(grad_of(&[3], &[2.0, -1.0, 2.0], &|g, x| g.reduce(ReduceOp::Min, x, &[0], false)), [0.0, 1.0, 0.0]);
    assert_eq!(grad_of(&[2], &[0.5, -3.0], &|g, x| g.maximum(x, x)), [1.0, 1.0]);
    // abs and relu have derivative 0 at 0.
    assert_eq!(grad_of(&[3], &[0.0, 2.0, -2.0], &|g, x| g.unary(Unary::Abs, x)), [0.0, 1.0, -1.0]);
    assert_eq!(grad_of(&[3], &[0.0, 2.0, -2.0], &|g, x| g.unary(Unary::Relu, x)), [0.0, 1.0, 0.0]);
    // pow at 0: d/da 0^2 = 0; d/db 0^b = 0 (ln 0 replaced by ln 1); d/da a^0 = 0.
    let two = |g: &mut Graph| g.scalar_f64(DType::F64, 2.0);
    assert_eq!(
        grad_of(&[1], &[0.0], &|g, x| {
            let b = two(g)?;
            g.pow(x, b)
        }),
        [0.0]
    );
    assert_eq!(
        grad_of(&[1], &[1.5], &|g, x| {
            let a = g.scalar_f64(DType::F64, 0.0)?;
            g.pow(a, x)
        }),
        [0.0]
    );
    assert_eq!(
        grad_of(&[1], &[0.0], &|g, x| {
            let b = g.scalar_f64(DType::F64, 0.0)?;
            g.pow(x, b)
        }),
        [0.0]
    );
    // Max pooling routes a tie to the window's first maximum.
    let pool = PoolParams::square(2);
    assert_eq!(grad_of(&[1, 1, 2, 2], &[1.0, 3.0, 3.0, 0.0], &|g, x| g.max_pool2d(x, pool)), [0.0, 1.0, 0.0, 0.0]);
}

/// Half precision: the rules compute in the half type (f32 arithmetic rounded on every
/// store), so a gradient in bf16 / f16 is the f64 gradient within a few roundings of the
/// format per op on the path; checked on a small network against its f64 twin.
#[test]
fn half_precision_gradients_track_f64() {
    let build = |dt: DType| {
        let mut g = Graph::new("half");
        let x = g.input("x", dt, &[4, 8]).unwrap();
        let w1 = g.input("w1", dt, &[8, 6]).unwrap();
        let w2 = g.input("w2", dt, &[6, 3]).unwrap();
        let h = g.matmul(x, w1).unwrap();
        let h = g.unary(Unary::Gelu, h).unwrap();
        let o = g.matmul(h, w2).unwrap();
        let o = g.softmax(o, 1).unwrap();
        // Mean of the squares: a softmax row sums to 1, so a plain mean would be constant.
        let o = g.mul(o, o).unwrap();
        let l = g.reduce(ReduceOp::Mean, o, &[0, 1], false).unwrap();
        g.set_outputs(&[l]).unwrap();
        g
    };
    let mut rng = Rng::new(31);
    let vals: Vec<(String, Vec<usize>, Vec<f64>)> = [("x", vec![4, 8]), ("w1", vec![8, 6]), ("w2", vec![6, 3])]
        .into_iter()
        .map(|(n, d)| {
            let v = (0..d.iter().product()).map(|_| rng.uniform(-1.0, 1.0)).collect();
            (n.to_string(), d, v)
        })
        .collect();
    let run = |dt: DType| {
        let gr = grad(&build(dt), &["x", "w1", "w2"]).unwrap();
        let mut feed: Vec<(String, HostTensor)> =
            vals.iter().map(|(n, d, v)| (n.clone(), HostTensor::from_f64_as(dt, d, v).unwrap())).collect();
        feed.push(("d_output".into(), HostTensor::from_f64_as(dt, &[], &[1.0]).unwrap()));
        Runner::new(&gr).run(&feed)
    };
    // The f64 reference on the same (half-rounded) inputs.
    for (dt, eps) in [(DType::BF16, 2f64.powi(-8)), (DType::F16, 2f64.powi(-11))] {
        let rounded: Vec<(String, Vec<usize>, Vec<f64>)> = vals
            .iter()
            .map(|(n, d, v)| (n.clone(), d.clone(), HostTensor::from_f64_as(dt, d, v).unwrap().to_f64_vec()))
            .collect();
        let mut feed: Vec<(String, HostTensor)> =
            rounded.iter().map(|(n, d, v)| (n.clone(), HostTensor::from_f64_as(DType::F64, d, v).unwrap())).collect();
        feed.push(("d_output".into(), HostTensor::from_f64_as(DType::F64, &[], &[1.0]).unwrap()));
        let want = Runner::new(&grad(&build(DType::F64), &["x", "w1", "w2"]).unwrap()).run(&feed);
        let got = run(dt);
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            let scale = w.iter().fold(0f64, |m, v| m.max(v.abs()));
            let err = g.iter().zip(w).fold(0f64, |m, (a, b)| m.max((a - b).abs())) / scale;
            // The deepest path here has ~16 roundings of the format.
            assert!(err <= 16.0 * eps, "{dt} grad {k}: relative error {err:.2e} > {:.2e}", 16.0 * eps);
        }
    }
}
