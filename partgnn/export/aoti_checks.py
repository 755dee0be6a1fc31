"""partgnn's input checks compiled into an AOTInductor package (:class:`AotiInputChecks`).

A traced model's shapes and dtypes are fixed at export: AOTInductor's library reads float64
features as float32 (NaN logits) and ``(E, 2)`` edges as pairs, unless its runtime checks its
inputs, which it does only when ``AOTI_RUNTIME_CHECK_INPUTS`` is set where it runs, in lines
of its own. The check here is compiled into the library's C++ and runs on every call.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from typing import Any

from partgnn.export.edge_classifier import ExportedEdgeClassifier

#: The C++ of :class:`AotiInputChecks`: ``partgnn_refusal`` says why a tensor is not what the
#: model takes (empty: it is), ``partgnn_check_inputs`` throws it for the first input refused.
_AOTI_CHECKS_CPP = """
// partgnn: the inputs an exported edge classifier takes, checked on every call, in one line
// (partgnn/export/aoti_checks.py; the same line as the TorchScript file's).
static std::string partgnn_dtype_name(int32_t dtype) {
    if (dtype == aoti_torch_dtype_float32()) return "float32";
    if (dtype == aoti_torch_dtype_float64()) return "float64";
    if (dtype == aoti_torch_dtype_float16()) return "float16";
    if (dtype == aoti_torch_dtype_bfloat16()) return "bfloat16";
    if (dtype == aoti_torch_dtype_int64()) return "int64";
    if (dtype == aoti_torch_dtype_int32()) return "int32";
    if (dtype == aoti_torch_dtype_int16()) return "int16";
    if (dtype == aoti_torch_dtype_int8()) return "int8";
    if (dtype == aoti_torch_dtype_uint8()) return "uint8";
    if (dtype == aoti_torch_dtype_bool()) return "bool";
    return "of another dtype";
}

static std::string partgnn_refusal(
    AtenTensorHandle tensor, const char* name, const char* expected, int64_t fixed_dim,
    int64_t fixed_size, int32_t dtype, int32_t device_type) {
    int64_t dim = 0;
    int32_t got = 0;
    int32_t got_device = 0;
    int64_t* sizes = nullptr;
    int64_t* strides = nullptr;
    AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_get_dim(tensor, &dim));
    AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_get_dtype(tensor, &got));
    AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_get_device_type(tensor, &got_device));
    AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_get_sizes(tensor, &sizes));
    AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_get_strides(tensor, &strides));
    const bool fits = dim == 2 && sizes[fixed_dim] == fixed_size && got == dtype;
    const bool contiguous = !fits || sizes[0] == 0 || sizes[1] == 0 ||
                            ((sizes[1] <= 1 || strides[1] == 1) &&
                             (sizes[0] <= 1 || strides[0] == sizes[1]));
    const bool here = got_device == device_type;
    if (fits && contiguous && here) return "";
    std::stringstream ss;
    ss << "partgnn edge classifier: " << name << " must be " << expected;
    if (fits && !here) ss << " on the device the file was compiled for";
    else if (fits) ss << ", contiguous";
    ss << ", got (";
    for (int64_t i = 0; i < dim; ++i) ss << (i ? ", " : "") << sizes[i];
    ss << (dim == 1 ? ",) " : ") ") << partgnn_dtype_name(got);
    if (fits && !here) ss << " on another device";
    else if (fits) ss << " of strides (" << strides[0] << ", " << strides[1] << ")";
    return ss.str();
}

static void partgnn_check_inputs(AtenTensorHandle* input_handles) {
    std::string refusal = partgnn_refusal(
        input_handles[0], "node_features", NODE_FEATURES_EXPECTED, 1, N_COLUMNS,
        aoti_torch_dtype_float32(), DEVICE_TYPE);
    if (refusal.empty()) {
        refusal = partgnn_refusal(
            input_handles[1], "edge_index", "(2, E) int64 (inner hit first)", 0, 2,
            aoti_torch_dtype_int64(), DEVICE_TYPE);
    }
    if (!refusal.empty()) throw std::runtime_error(refusal);
}

"""


class AotiInputChecks:
    """partgnn's input checks compiled into an AOTInductor package.

    A traced model's shapes and dtypes are fixed at export: AOTInductor's library reads float64
    features as float32 (NaN logits) and ``(E, 2)`` edges as pairs, unless its runtime checks
    its inputs, which it does only when ``AOTI_RUNTIME_CHECK_INPUTS`` is set where it runs, in
    lines of its own. Inside :meth:`compiled_in`, the library's C++ source gets a check that
    runs on every call and throws one line naming the shape, dtype and device expected and
    those given (the TorchScript file's line): ACTS's log shows it. The source is taken where
    inductor hands it to the compiler (``AotCodeCompiler.compile``); where a torch release
    writes it otherwise, :attr:`injected` stays false and the export says so.

    Args:
        module: The model being exported (its node features' columns and device).

    Attributes:
        injected: Whether the checks went into the compiled source.
    """

    #: Where the checks are called: the start of the runtime's (optional) input checks.
    ANCHOR = re.compile(
        r"(AOTI_NOINLINE static void __check_inputs_outputs\(\s*AtenTensorHandle\* "
        r"input_handles,\s*AtenTensorHandle\* output_handles\)\s*\{)"
    )

    def __init__(self, module: ExportedEdgeClassifier) -> None:
        expected = f"(N, {module.n_columns}) float32 ({module.columns_described})"
        device = next(iter(module.buffers())).device
        self.source = (
            _AOTI_CHECKS_CPP.replace("NODE_FEATURES_EXPECTED", json.dumps(expected))
            .replace("N_COLUMNS", str(module.n_columns))
            .replace("DEVICE_TYPE", "aoti_torch_device_type_" + device.type + "()")
        )
        self.injected = False

    def add_to(self, wrapper_code: str) -> str:
        """``wrapper_code`` with the checks defined and called (unchanged: no anchor)."""
        if not self.ANCHOR.search(wrapper_code):
            return wrapper_code
        self.injected = True
        return self.ANCHOR.sub(
            lambda found: (
                self.source + found.group(1) + "\n    partgnn_check_inputs(input_handles);"
            ),
            wrapper_code,
            count=1,
        )

    @contextlib.contextmanager
    def compiled_in(self) -> Iterator[None]:
        """Adds the checks to the source inductor compiles while the context is open."""
        from torch._inductor import codecache

        compiler = getattr(codecache, "AotCodeCompiler", None)
        if compiler is None or "compile" not in vars(compiler):
            yield
            return
        defined, original = vars(compiler)["compile"], compiler.compile
        checks = self

        def compile_with_checks(graph: Any, wrapper_code: str, *args: Any, **kwargs: Any) -> Any:
            return original(graph, checks.add_to(wrapper_code), *args, **kwargs)

        compiler.compile = staticmethod(compile_with_checks)
        try:
            yield
        finally:
            compiler.compile = defined
