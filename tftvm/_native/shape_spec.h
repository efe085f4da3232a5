// Shape specs shared by the TvmCall shape function and kernel.
//
// The Python side (tftvm/signature.py) writes one spec string per direction:
//   an optional header "n m#" names the variables, then tensors are separated by
//   ';', each is "name|dim,dim,...", and each dim is a
//   space-separated reverse-Polish expression over constants ("c64"), variables
//   ("v0") and the operators + - * / (floordiv) % (floormod) min max.
//   A scalar parameter is "name=|", or "name=v3|" when its value sets variable 3.
// An input dim that is a lone variable binds it; any other input dim is checked
// once every variable is bound. Output dims are evaluated from the bindings.
#pragma once

#include <cstdint>

#include "absl/container/inlined_vector.h"
#include <optional>
#include <string>
#include <vector>

namespace tftvm {

struct Token {
  enum Kind { kConst, kVar, kAdd, kSub, kMul, kFloorDiv, kFloorMod, kMin, kMax } kind;
  int64_t value = 0;  // constant value or variable index
};

using DimExpr = std::vector<Token>;  // reverse Polish

struct TensorSpec {
  std::string name;
  std::vector<DimExpr> dims;
  bool scalar = false;  // a rank-0 tensor passed to TVM by value
  int binds = -1;       // the variable a scalar's value sets, or -1
};

// Variable values; std::nullopt where not known (yet).
using Bindings = absl::InlinedVector<std::optional<int64_t>, 8>;

// Parses a spec string; returns false and sets *error on malformed input.
// *var_names gets one name per variable (from the header, else "v<i>").
bool ParseSpec(const std::string& text, std::vector<TensorSpec>* out,
               std::vector<std::string>* var_names, std::string* error);

// The variable a dim binds, or -1 if the dim is not a lone variable.
inline int LoneVar(const DimExpr& e) {
  return e.size() == 1 && e[0].kind == Token::kVar ? static_cast<int>(e[0].value) : -1;
}

// Evaluates a dim; std::nullopt if it uses an unbound variable or divides by zero.
std::optional<int64_t> Eval(const DimExpr& e, const Bindings& vars);

// Human-readable form of a dim, e.g. "n" or "(n + 1)".
std::string DimToString(const DimExpr& e, const std::vector<std::string>& var_names);

// "[n, 64]" for a tensor spec.
std::string ShapeToString(const TensorSpec& t, const std::vector<std::string>& var_names);

}  // namespace tftvm
