#include "shape_spec.h"

#include <sstream>

namespace tftvm {
namespace {

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep)) parts.push_back(cur);
  if (!s.empty() && s.back() == sep) parts.push_back("");
  return parts;
}

bool ParseToken(const std::string& t, Token* tok) {
  static const struct { const char* text; Token::Kind kind; } kOps[] = {
      {"+", Token::kAdd}, {"-", Token::kSub},      {"*", Token::kMul},   {"/", Token::kFloorDiv},
      {"%", Token::kFloorMod}, {"min", Token::kMin}, {"max", Token::kMax}};
  for (const auto& op : kOps) {
    if (t == op.text) {
      tok->kind = op.kind;
      return true;
    }
  }
  if (t.size() < 2 || (t[0] != 'c' && t[0] != 'v')) return false;
  try {
    size_t used = 0;
    tok->value = std::stoll(t.substr(1), &used);
    if (used != t.size() - 1) return false;
  } catch (...) {
    return false;
  }
  tok->kind = t[0] == 'c' ? Token::kConst : Token::kVar;
  return tok->kind == Token::kConst || tok->value >= 0;
}

int64_t FloorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

}  // namespace

bool ParseSpec(const std::string& text, std::vector<TensorSpec>* out,
               std::vector<std::string>* var_names, std::string* error) {
  out->clear();
  var_names->clear();
  std::string body = text;
  size_t hash = text.find('#');
  if (hash != std::string::npos) {
    for (const std::string& name : Split(text.substr(0, hash), ' ')) {
      if (!name.empty()) var_names->push_back(name);
    }
    body = text.substr(hash + 1);
  }
  int num_vars = 0;
  if (body.empty()) return true;
  for (const std::string& tensor : Split(body, ';')) {
    size_t bar = tensor.find('|');
    if (bar == std::string::npos) {
      *error = "tensor spec without '|': '" + tensor + "'";
      return false;
    }
    TensorSpec spec;
    spec.name = tensor.substr(0, bar);
    std::string dims = tensor.substr(bar + 1);
    size_t eq = spec.name.find('=');
    if (eq != std::string::npos) {
      std::string var = spec.name.substr(eq + 1);
      spec.name.resize(eq);
      spec.scalar = true;
      Token tok;
      if (!dims.empty() || (!var.empty() && (!ParseToken(var, &tok) || tok.kind != Token::kVar))) {
        *error = "bad scalar spec '" + tensor + "'";
        return false;
      }
      if (!var.empty()) {
        spec.binds = static_cast<int>(tok.value);
        if (spec.binds + 1 > num_vars) num_vars = spec.binds + 1;
      }
    }
    if (!dims.empty()) {
      for (const std::string& dim : Split(dims, ',')) {
        DimExpr expr;
        int depth = 0;
        for (const std::string& t : Split(dim, ' ')) {
          Token tok;
          if (!ParseToken(t, &tok)) {
            *error = "bad token '" + t + "' in dim '" + dim + "'";
            return false;
          }
          if (tok.kind == Token::kVar && tok.value + 1 > num_vars) num_vars = tok.value + 1;
          depth += (tok.kind == Token::kConst || tok.kind == Token::kVar) ? 1 : -1;
          if (depth < 1) {
            *error = "operator without operands in dim '" + dim + "'";
            return false;
          }
          expr.push_back(tok);
        }
        if (depth != 1) {
          *error = "unbalanced dim '" + dim + "'";
          return false;
        }
        spec.dims.push_back(std::move(expr));
      }
    }
    out->push_back(std::move(spec));
  }
  for (int v = static_cast<int>(var_names->size()); v < num_vars; ++v) {
    var_names->push_back("v" + std::to_string(v));
  }
  return true;
}

std::optional<int64_t> Eval(const DimExpr& e, const Bindings& vars) {
  absl::InlinedVector<int64_t, 8> stack;  // no heap allocation per call
  for (const Token& t : e) {
    if (t.kind == Token::kConst) {
      stack.push_back(t.value);
      continue;
    }
    if (t.kind == Token::kVar) {
      if (t.value >= static_cast<int64_t>(vars.size()) || !vars[t.value]) return std::nullopt;
      stack.push_back(*vars[t.value]);
      continue;
    }
    int64_t b = stack.back();
    stack.pop_back();
    int64_t a = stack.back();
    stack.pop_back();
    switch (t.kind) {
      case Token::kAdd: stack.push_back(a + b); break;
      case Token::kSub: stack.push_back(a - b); break;
      case Token::kMul: stack.push_back(a * b); break;
      case Token::kFloorDiv:
        if (b == 0) return std::nullopt;
        stack.push_back(FloorDiv(a, b));
        break;
      case Token::kFloorMod:
        if (b == 0) return std::nullopt;
        stack.push_back(a - FloorDiv(a, b) * b);
        break;
      case Token::kMin: stack.push_back(a < b ? a : b); break;
      case Token::kMax: stack.push_back(a > b ? a : b); break;
      default: return std::nullopt;
    }
  }
  return stack.back();
}

std::string DimToString(const DimExpr& e, const std::vector<std::string>& var_names) {
  static const char* kNames[] = {"", "", "+", "-", "*", "//", "%", "min", "max"};
  std::vector<std::string> stack;
  for (const Token& t : e) {
    if (t.kind == Token::kConst) {
      stack.push_back(std::to_string(t.value));
    } else if (t.kind == Token::kVar) {
      stack.push_back(t.value < static_cast<int64_t>(var_names.size()) ? var_names[t.value]
                                                                       : "?");
    } else {
      std::string b = stack.back();
      stack.pop_back();
      std::string a = stack.back();
      stack.pop_back();
      if (t.kind == Token::kMin || t.kind == Token::kMax) {
        stack.push_back(std::string(kNames[t.kind]) + "(" + a + ", " + b + ")");
      } else {
        stack.push_back("(" + a + " " + kNames[t.kind] + " " + b + ")");
      }
    }
  }
  return stack.empty() ? "?" : stack.back();
}

std::string ShapeToString(const TensorSpec& t, const std::vector<std::string>& var_names) {
  std::string s = "[";
  for (size_t d = 0; d < t.dims.size(); ++d) {
    if (d) s += ", ";
    s += DimToString(t.dims[d], var_names);
  }
  return s + "]";
}

}  // namespace tftvm
