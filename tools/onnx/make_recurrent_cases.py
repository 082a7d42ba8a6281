#!/usr/bin/env python3
"""Writes RNN / GRU / LSTM cases beyond ONNX's node suite (reverse and bidirectional
directions, initial states over several steps, clip, non-default activations, GRU
linear_before_reset, LSTM input_forget and peepholes, the Y output, batch-first layout),
and Scan / Loop cases (scan axes and directions, bodies reading outer values, a while
loop whose condition comes from the iteration count) in the node suite's layout: DIR/<case>/model.onnx + test_data_set_0/{input,output}_N.pb,
outputs computed by onnxruntime (for layout 1, which its CPU kernels refuse, on the
layout-0 model with transposed operands).

Run: /tmp/ortvenv/bin/python tools/onnx/make_recurrent_cases.py DIR, then
RLX_ONNX_NODE_DIR=DIR cargo test -p rlx-onnx --test node_suite -- --nocapture
"""

import os
import sys
import zlib

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def run_ort(model, feeds):
    import onnxruntime as ort

    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def case(out, name, op, seq, batch, inp, hidden, bias=True, h0=False, c0=False, peep=False, layout=0, opset=14, **attrs):
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    dirs = 2 if attrs.get("direction") == "bidirectional" else 1
    g = GATES[op]
    f = lambda *d: rng.uniform(-1, 1, d).astype(np.float32)
    xs = f(batch, seq, inp) if layout else f(seq, batch, inp)
    feeds = {"X": xs, "W": f(dirs, g * hidden, inp), "R": f(dirs, g * hidden, hidden)}
    names = ["X", "W", "R"]
    if bias or h0 or c0 or peep:
        feeds["B"] = f(dirs, 2 * g * hidden) if bias else None
        names.append("B" if bias else "")
    state = (batch, dirs, hidden) if layout else (dirs, batch, hidden)
    if h0 or c0 or peep:
        names.append("")
        feeds["initial_h"] = f(*state) if h0 else None
        names.append("initial_h" if h0 else "")
    if c0 or peep:
        feeds["initial_c"] = f(*state) if c0 else None
        names.append("initial_c" if c0 else "")
    if peep:
        feeds["P"] = f(dirs, 3 * hidden)
        names.append("P")
    feeds = {k: v for k, v in feeds.items() if v is not None}
    outs = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" else [])
    node = helper.make_node(op, names, outs, hidden_size=hidden, layout=layout, **attrs) if opset >= 14 else helper.make_node(op, names, outs, hidden_size=hidden, **attrs)
    inputs = [helper.make_tensor_value_info(k, TensorProto.FLOAT, v.shape) for k, v in feeds.items()]
    outputs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs]
    model = helper.make_model(helper.make_graph([node], name, inputs, outputs), opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    if layout:
        # onnxruntime's CPU kernels refuse layout 1 and ONNX's reference evaluator
        # mishandles it: the oracle is the layout-0 model on transposed operands.
        t = lambda v, p: np.ascontiguousarray(np.transpose(v, p))
        plain = {k: t(v, (1, 0, 2)) if k in ("X", "initial_h", "initial_c") else v for k, v in feeds.items()}
        node0 = helper.make_node(op, names, outs, hidden_size=hidden, layout=0, **attrs)
        inputs0 = [helper.make_tensor_value_info(k, TensorProto.FLOAT, v.shape) for k, v in plain.items()]
        model0 = helper.make_model(helper.make_graph([node0], name, inputs0, outputs), opset_imports=[helper.make_opsetid("", opset)])
        model0.ir_version = 8
        results = run_ort(model0, plain)
        results = [t(results[0], (2, 0, 1, 3))] + [t(r, (1, 0, 2)) for r in results[1:]]
    else:
        results = run_ort(model, feeds)
    d = os.path.join(out, name)
    os.makedirs(os.path.join(d, "test_data_set_0"), exist_ok=True)
    onnx.save(model, os.path.join(d, "model.onnx"))
    for k, (n, v) in enumerate(feeds.items()):
        onnx.save_tensor(numpy_helper.from_array(v, n), os.path.join(d, "test_data_set_0", f"input_{k}.pb"))
    for k, (n, v) in enumerate(zip(outs, results)):
        onnx.save_tensor(numpy_helper.from_array(np.asarray(v), n), os.path.join(d, "test_data_set_0", f"output_{k}.pb"))


def save(out, name, model, feeds):
    results = run_ort(model, feeds)
    d = os.path.join(out, name)
    os.makedirs(os.path.join(d, "test_data_set_0"), exist_ok=True)
    onnx.save(model, os.path.join(d, "model.onnx"))
    for k, (n, v) in enumerate(feeds.items()):
        onnx.save_tensor(numpy_helper.from_array(v, n), os.path.join(d, "test_data_set_0", f"input_{k}.pb"))
    for k, (o, v) in enumerate(zip(model.graph.output, results)):
        onnx.save_tensor(numpy_helper.from_array(np.asarray(v), o.name), os.path.join(d, "test_data_set_0", f"output_{k}.pb"))


def control(out):
    f32 = TensorProto.FLOAT
    vi = helper.make_tensor_value_info
    rng = np.random.default_rng(7)
    # Scan 16: states s [3], p [3]; scan inputs a [3, 4] along axis 1 reversed, b [4, 3]
    # along axis 0; outputs along axis 1 reversed and axis 0; the body reads outer w.
    body = helper.make_graph(
        [
            helper.make_node("Mul", ["a_t", "w"], ["aw"]),
            helper.make_node("Add", ["s_in", "aw"], ["s_out"]),
            helper.make_node("Mul", ["p_in", "b_t"], ["p_out"]),
            helper.make_node("Sub", ["s_out", "p_out"], ["d"]),
            helper.make_node("Unsqueeze", ["d", "ax"], ["d2"]),
            helper.make_node("Identity", ["s_out"], ["e"]),
        ],
        "body",
        [vi("s_in", f32, [3]), vi("p_in", f32, [3]), vi("a_t", f32, [3]), vi("b_t", f32, [3])],
        [vi("s_out", f32, [3]), vi("p_out", f32, [3]), vi("d2", f32, [1, 3]), vi("e", f32, [3])],
        [numpy_helper.from_array(np.array([0], np.int64), "ax")],
    )
    node = helper.make_node(
        "Scan", ["s", "p", "a", "b"], ["s_f", "p_f", "ys", "es"], body=body, num_scan_inputs=2,
        scan_input_axes=[1, 0], scan_input_directions=[1, 0], scan_output_axes=[1, -1], scan_output_directions=[1, 0],
    )
    feeds = {k: rng.uniform(-1, 1, d).astype(np.float32) for k, d in [("s", [3]), ("p", [3]), ("a", [3, 4]), ("b", [4, 3]), ("w", [3])]}
    graph = helper.make_graph([node], "scan_axes", [vi(k, f32, v.shape) for k, v in feeds.items()], [vi(o, f32, None) for o in node.output])
    save(out, "rlx_scan_axes_directions", helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)], ir_version=8), feeds)

    # Loop 16 without a trip count: while iteration + 1 < 4, y += x * iteration.
    body = helper.make_graph(
        [
            helper.make_node("Constant", [], ["one"], value=numpy_helper.from_array(np.array(1, np.int64))),
            helper.make_node("Constant", [], ["four"], value=numpy_helper.from_array(np.array(4, np.int64))),
            helper.make_node("Add", ["i", "one"], ["next"]),
            helper.make_node("Less", ["next", "four"], ["c_out"]),
            helper.make_node("Cast", ["i"], ["fi"], to=f32),
            helper.make_node("Mul", ["x", "fi"], ["xi"]),
            helper.make_node("Add", ["y_in", "xi"], ["y_out"]),
            helper.make_node("Identity", ["y_out"], ["trace"]),
        ],
        "body",
        [vi("i", TensorProto.INT64, []), vi("c_in", TensorProto.BOOL, []), vi("y_in", f32, [2])],
        [vi("c_out", TensorProto.BOOL, []), vi("y_out", f32, [2]), vi("trace", f32, [2])],
    )
    node = helper.make_node("Loop", ["", "c", "y"], ["y_f", "traces"], body=body)
    feeds = {"c": np.array(True), "y": rng.uniform(-1, 1, [2]).astype(np.float32), "x": rng.uniform(-1, 1, [2]).astype(np.float32)}
    inputs = [vi("c", TensorProto.BOOL, []), vi("y", f32, [2]), vi("x", f32, [2])]
    graph = helper.make_graph([node], "loop_while", inputs, [vi(o, f32, None) for o in node.output])
    save(out, "rlx_loop_while", helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)], ir_version=8), feeds)

    # Loop 16 with a trip count input and no condition.
    node = helper.make_node("Loop", ["m", "", "y"], ["y_f", "traces"], body=body)
    feeds = {"m": np.array(3, np.int64), "y": feeds["y"], "x": feeds["x"]}
    inputs = [vi("m", TensorProto.INT64, []), vi("y", f32, [2]), vi("x", f32, [2])]
    graph = helper.make_graph([node], "loop_trip", inputs, [vi(o, f32, None) for o in node.output])
    save(out, "rlx_loop_trip_count", helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)], ir_version=8), feeds)


def main(out):
    control(out)
    for op in ["RNN", "GRU", "LSTM"]:
        o = op.lower()
        case(out, f"rlx_{o}_forward_y", op, 5, 2, 3, 4, h0=True, c0=op == "LSTM")
        case(out, f"rlx_{o}_reverse", op, 4, 3, 2, 3, h0=True, direction="reverse")
        case(out, f"rlx_{o}_bidirectional", op, 6, 2, 3, 5, h0=True, c0=op == "LSTM", direction="bidirectional")
        case(out, f"rlx_{o}_nobias_seq1", op, 1, 2, 3, 4, bias=False)
        case(out, f"rlx_{o}_clip", op, 5, 2, 3, 4, clip=0.3)
        case(out, f"rlx_{o}_opset7", op, 3, 2, 3, 4, opset=7)
        case(out, f"rlx_{o}_batchwise", op, 4, 2, 3, 3, h0=True, c0=op == "LSTM", layout=1)
    acts = {"RNN": ["Relu"], "GRU": ["HardSigmoid", "Softsign"], "LSTM": ["HardSigmoid", "LeakyRelu", "ScaledTanh"]}
    for op, a in acts.items():
        case(out, f"rlx_{op.lower()}_activations", op, 4, 2, 3, 4, activations=a + a, activation_alpha=[0.3, 0.2, 0.7, 1.5], activation_beta=[0.4, 0.9], direction="bidirectional")
    case(out, "rlx_rnn_affine_thresholded", "RNN", 4, 2, 3, 4, activations=["Affine", "ThresholdedRelu"], activation_alpha=[0.8, 0.1], activation_beta=[0.3], direction="bidirectional")
    case(out, "rlx_rnn_defaults_affine", "RNN", 3, 2, 3, 4, activations=["Affine"])
    case(out, "rlx_gru_elu_softplus", "GRU", 4, 2, 3, 4, activations=["Elu", "Softplus", "Sigmoid", "Relu"], activation_alpha=[0.5], direction="bidirectional")
    case(out, "rlx_gru_linear_before_reset", "GRU", 5, 2, 3, 4, h0=True, linear_before_reset=1, direction="bidirectional")
    case(out, "rlx_lstm_input_forget", "LSTM", 5, 2, 3, 4, input_forget=1)
    case(out, "rlx_lstm_peepholes_bidir", "LSTM", 5, 2, 3, 4, h0=True, c0=True, peep=True, direction="bidirectional")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/rlx_rnn_cases")
