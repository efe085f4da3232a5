#!/usr/bin/env bash
# Builds @{op_library} with g++ alone. TensorFlow and TVM tell their compile and
# link flags through their Python packages, as TF's custom-op guide does.
set -euo pipefail
cd "$(dirname "$0")"
PYTHON="${PYTHON:-python3}"
CXX="${CXX:-g++}"

# One Python process tells every flag: each import of TensorFlow takes seconds.
FLAGS=$("$PYTHON" -c '
import os, shlex
import tensorflow as tf
import tvm.libinfo
import tvm_ffi.libinfo as ffi
values = {
    "TF_CFLAGS": " ".join(tf.sysconfig.get_compile_flags()),
    "TF_LFLAGS": " ".join(tf.sysconfig.get_link_flags()),
    "TF_LIB_DIR": tf.sysconfig.get_lib(),
    "TF_INCLUDE": tf.sysconfig.get_include(),
    "FFI_INCLUDE": ffi.find_include_path(),
    "DLPACK_INCLUDE": ffi.find_dlpack_include_path(),
    "FFI_LIB_DIR": os.path.dirname(ffi.find_libtvm_ffi()),
    # libtvm_runtime provides what the compiled kernel calls back into (its thread pool).
    "TVM_LIB_DIR": os.path.dirname(tvm.libinfo.find_libtvm_runtime()),
}
for name, value in values.items():
    print(f"{name}={shlex.quote(value)}")
')
eval "$FLAGS"

# TF 2.21's own headers use types it has deprecated: -Wno-deprecated-declarations.
# shellcheck disable=SC2086  # the flags are lists of words
"$CXX" -shared -fPIC -O2 -Wno-deprecated-declarations @{op_source} -o @{op_library} \
  $TF_CFLAGS -I"$TF_INCLUDE/external/boringssl/src/include" -I"$FFI_INCLUDE" -I"$DLPACK_INCLUDE" \
  $TF_LFLAGS -L"$FFI_LIB_DIR" -ltvm_ffi -Wl,--no-as-needed -L"$TVM_LIB_DIR" -ltvm_runtime \
  -Wl,-rpath,"$TF_LIB_DIR" -Wl,-rpath,"$FFI_LIB_DIR" -Wl,-rpath,"$TVM_LIB_DIR"
echo "built $(pwd)/@{op_library}"
