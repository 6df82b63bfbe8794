"""Operator choices of the int8 graph on ONNX Runtime, timed on the same batches in one process
(``int8_operators.toml``).

    python benchmarks/studies/int8_operators.py [--pairs 2000] [--rounds 7] [--threads N]
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness

import numpy as np
from harness import experiment, first_questions, fitted, session_calls, wikiqa_splits
from harness.experiment import Experiment
from harness.measure import interleaved, medians

EXP = Experiment(__file__)
RECORD, VARIANTS = EXP.config["record"], EXP.config["variants"]


def rewrite(model, how: str):
    """A copy of ``model`` (an ``onnx.ModelProto``) with every ``QAttention`` node written as ``how``."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    model = onnx.ModelProto.FromString(model.SerializeToString())
    consts, nodes, masks = [], [], {}

    def const(name, value):
        consts.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    for node in model.graph.node:
        if node.op_type != "QAttention":
            nodes.append(node)
            continue
        x, weight, bias, scale, weight_scale, keep, zero = node.input
        heads = next(a.i for a in node.attribute if a.name == "num_heads")
        p, out = node.name, node.output[0]
        width = next(numpy_helper.to_array(t).shape[0] for t in model.graph.initializer if t.name == bias) // 3
        product = helper.make_node("MatMulIntegerToFloat", [x, weight, scale, weight_scale, zero, ""]
                                   + ([] if how == "multi_head" else [bias]), [f"{p}_qkv"], domain="com.microsoft")
        nodes.append(product)
        if how == "none":
            nodes.append(helper.make_node("Split", [f"{p}_qkv"], [out, f"{p}_k", f"{p}_v"], axis=2, num_outputs=3))
        elif how == "multi_head":
            nodes += [helper.make_node("Split", [f"{p}_qkv"], [f"{p}_q", f"{p}_k", f"{p}_v"], axis=2, num_outputs=3),
                      helper.make_node("MultiHeadAttention", [f"{p}_q", f"{p}_k", f"{p}_v", bias, keep], [out],
                                       num_heads=heads, domain="com.microsoft")]
        elif how == "onnx":
            if keep not in masks:  # (rows, 1, tokens, tokens), True where attended: ONNX Runtime wants each query's row
                m = masks[keep] = f"{keep}_boolean"
                shape = [helper.make_node("Shape", [keep], [f"{m}_rows_tokens"])] + [
                    helper.make_node("Slice", [f"{m}_rows_tokens", const(f"{m}_{a}", np.int64([a])),
                                               const(f"{m}_{a}_end", np.int64([a + 1]))], [f"{m}_dim{a}"])
                    for a in (0, 1)]
                nodes += [*shape,
                          helper.make_node("Concat", [f"{m}_dim0", const(f"{m}_heads", np.int64([1])), f"{m}_dim1",
                                                      f"{m}_dim1"], [f"{m}_shape"], axis=0),
                          helper.make_node("Cast", [keep], [f"{m}_b"], to=TensorProto.BOOL),
                          helper.make_node("Unsqueeze", [f"{m}_b", const(f"{m}_axes", np.int64([1, 2]))], [f"{m}_u"]),
                          helper.make_node("Expand", [f"{m}_u", f"{m}_shape"], [m])]
            nodes += [helper.make_node("Split", [f"{p}_qkv"], [f"{p}_q", f"{p}_k", f"{p}_v"], axis=2, num_outputs=3),
                      helper.make_node("Attention", [f"{p}_q", f"{p}_k", f"{p}_v", masks[keep]], [out],
                                       q_num_heads=heads, kv_num_heads=heads)]
        elif how == "standard":
            if keep not in masks:  # (rows, 1, 1, tokens): 0 where attended, -10000 (ONNX Runtime's fill) elsewhere
                m = masks[keep] = f"{keep}_additive"
                nodes += [helper.make_node("Cast", [keep], [f"{m}_f"], to=TensorProto.FLOAT),
                          helper.make_node("Sub", [f"{m}_f", const(f"{m}_one", np.float32(1))], [f"{m}_d"]),
                          helper.make_node("Mul", [f"{m}_d", const(f"{m}_fill", np.float32(10000))], [f"{m}_a"]),
                          helper.make_node("Unsqueeze", [f"{m}_a", const(f"{m}_axes", np.int64([1, 2]))], [m])]
            d = width // heads
            nodes += [
                helper.make_node("Reshape", [f"{p}_qkv", const(f"{p}_5d", np.int64([0, 0, 3, heads, d]))], [f"{p}_r"]),
                helper.make_node("Transpose", [f"{p}_r"], [f"{p}_t"], perm=[2, 0, 3, 1, 4]),
                helper.make_node("Split", [f"{p}_t"], [f"{p}_q5", f"{p}_k5", f"{p}_v5"], axis=0, num_outputs=3),
                *(helper.make_node("Squeeze", [f"{p}_{s}5", const(f"{p}_{s}_axis", np.int64([0]))], [f"{p}_{s}"])
                  for s in "qkv"),
                helper.make_node("Transpose", [f"{p}_k"], [f"{p}_kt"], perm=[0, 1, 3, 2]),
                helper.make_node("MatMul", [f"{p}_q", f"{p}_kt"], [f"{p}_s"]),
                helper.make_node("Mul", [f"{p}_s", const(f"{p}_scale", np.float32(d**-0.5))], [f"{p}_ss"]),
                helper.make_node("Add", [f"{p}_ss", masks[keep]], [f"{p}_sm"]),
                helper.make_node("Softmax", [f"{p}_sm"], [f"{p}_pr"], axis=-1),
                helper.make_node("MatMul", [f"{p}_pr", f"{p}_v"], [f"{p}_c"]),
                helper.make_node("Transpose", [f"{p}_c"], [f"{p}_ct"], perm=[0, 2, 1, 3]),
                helper.make_node("Reshape", [f"{p}_ct", const(f"{p}_3d", np.int64([0, 0, width]))], [out]),
            ]
        else:
            raise ValueError(how)
    if how == "onnx":
        for opset in model.opset_import:
            if opset.domain in ("", "ai.onnx"):
                opset.version = max(opset.version, 23)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    model.graph.initializer.extend(consts)
    return model


def captured(est, X):
    """The int8 module of ``est`` and the batches one ``predict`` feeds it, after a first ``predict`` (the export
    and warm-up); also that second call's seconds in all and in the session runs."""
    est.predict(X)
    with session_calls() as calls:
        start = time.perf_counter()
        est.predict(X)
        total = time.perf_counter() - start
    return calls[0][0], [batch for _, batch, _ in calls], total, sum(s for _, _, s in calls)


def variant_module(int8_module, model, disabled):
    """``model`` (an ``onnx.ModelProto``) in an ``OnnxModule`` with the options of ``int8_module``; ``disabled``:
    the fusions to turn off (None: the library's)."""
    from harness.library import onnx_runtime

    library = onnx_runtime.DISABLED_FUSIONS
    onnx_runtime.DISABLED_FUSIONS = library if disabled is None else tuple(disabled)
    try:
        return onnx_runtime.OnnxModule.from_graph(model.SerializeToString(), int8_module.names, int8=True,
                                                  threads=int8_module.threads, digest="")
    finally:
        onnx_runtime.DISABLED_FUSIONS = library


def product_rates(int8_module, batches) -> dict:
    """Kernel seconds and multiply-adds of the ``MatMulIntegerToFloat`` nodes of ``int8_module``'s graph over
    ``batches``, by product shape ``"<inputs>×<outputs>"``, from ONNX Runtime's profiler (a session with the
    module's threads and disabled fusions)."""
    import onnxruntime as ort

    from harness.library import DISABLED_FUSIONS

    with tempfile.TemporaryDirectory(prefix="as2rank-int8-profile-") as tmp:
        options = ort.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = int8_module.threads, 1
        options.enable_profiling, options.profile_file_prefix = True, f"{tmp}/profile"
        session = ort.InferenceSession(int8_module.graph, options, providers=["CPUExecutionProvider"],
                                       disabled_optimizers=list(DISABLED_FUSIONS))
        for batch in batches:
            session.run(None, {k: v.numpy() for k, v in batch.items()})
        events = json.loads(Path(session.end_profiling()).read_text())
    shapes = {}
    for event in events:
        args = event.get("args", {})
        if (event.get("cat") != "Node" or args.get("op_name") != "MatMulIntegerToFloat"
                or not event["name"].endswith("_kernel_time")):
            continue
        a, out = (next(iter(args[key][0].values())) for key in ("input_type_shape", "output_type_shape"))
        rec = shapes.setdefault(f"{a[-1]}×{out[-1]}",
                                {"seconds": 0.0, "multiply_adds": 0, "inputs": a[-1], "outputs": out[-1]})
        rec["seconds"] += event["dur"] / 1e6
        rec["multiply_adds"] += int(np.prod(a)) * out[-1]
    return shapes


def kernel_rate(inputs: int, outputs: int, threads: int, rows: int = RECORD["kernel_rows"]) -> float:
    """Multiply-adds per second of ONNX Runtime's ``MatMulIntegerToFloat`` alone on a (rows × inputs) uint8 by
    (inputs × outputs) int8 product of random codes: the best of ``kernel_repeats`` runs (of the configuration) of
    about 2G each."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    consts = [numpy_helper.from_array(rng.integers(-127, 128, (inputs, outputs)).astype(np.int8), "w"),
              numpy_helper.from_array(np.ones(outputs, np.float32), "w_scale"),
              numpy_helper.from_array(np.array(0.01, np.float32), "scale"),
              numpy_helper.from_array(np.array(128, np.uint8), "zero")]
    node = helper.make_node("MatMulIntegerToFloat", ["x", "w", "scale", "w_scale", "zero"], ["y"],
                            domain="com.microsoft")
    graph = helper.make_graph([node], "product",
                              [helper.make_tensor_value_info("x", TensorProto.UINT8, [None, inputs])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, outputs])], consts)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                    helper.make_opsetid("com.microsoft", 1)])
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    feed = {"x": rng.integers(0, 256, (rows, inputs)).astype(np.uint8)}
    session.run(None, feed)
    calls, best = max(3, int(2e9 / (rows * inputs * outputs))), float("inf")
    for _ in range(RECORD["kernel_repeats"]):
        start = time.perf_counter()
        for _ in range(calls):
            session.run(None, feed)
        best = min(best, (time.perf_counter() - start) / calls)
    return rows * inputs * outputs / best


def run(exp, args, res):
    import onnx

    from harness.library import TransformerRanker

    splits = wikiqa_splits()
    est = fitted(TransformerRanker(random_state=0), *first_questions(*splits["train"], RECORD["fit_questions"]))
    est.set_params(precision="int8", n_threads=args.threads)
    X = splits["test"][0].head(args.pairs)
    int8_module, batches, predict_seconds, session_seconds = captured(est, X)
    res.update(rounds=args.rounds, pairs=len(X), batches=len(batches), threads=int8_module.threads,
               padded_tokens=int(sum(b["input_ids"].numel() for b in batches)), predict_seconds=predict_seconds,
               session_seconds=session_seconds)
    shipped = onnx.load_from_string(int8_module.graph)
    modules = {name: variant_module(int8_module, shipped if v["rewrite"] is None else rewrite(shipped, v["rewrite"]),
                                    v["disabled"]) for name, v in VARIANTS.items()}
    scores = {name: np.concatenate([m(b).numpy() for b in batches]) for name, m in modules.items()}

    def session_runs(module):
        def call():
            for batch in batches:
                module(batch)
        return call

    runs = interleaved({name: session_runs(m) for name, m in modules.items()}, args.rounds)
    base, median = np.asarray(runs["shipped"]), medians(runs)
    res["variants"] = {
        name: {"seconds": runs[name], "median_seconds": median[name],
               "speed_vs_shipped": float(np.median(base / np.asarray(runs[name]))), "same_model": v["same_model"],
               "largest_change": float(np.abs(scores[name] - scores["shipped"]).max())}
        for name, v in VARIANTS.items()
    }
    res["products"] = product_rates(int8_module, batches)
    for rec in res["products"].values():
        rec["kernel_alone"] = kernel_rate(rec["inputs"], rec["outputs"], int8_module.threads)
    bound = res["variants"]["no attention (a bound)"]["speed_vs_shipped"]
    # predict with its session runs that much faster, the rest of predict unchanged.
    res["predict_bound"] = predict_seconds / (predict_seconds - session_seconds + session_seconds / bound)


if __name__ == "__main__":
    experiment.main(__file__, run)
