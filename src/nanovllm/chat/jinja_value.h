// Values of the Jinja-subset interpreter, with Python semantics (templates are written against jinja2
// running on Python objects: truthiness, ==, str(), repr() all follow Python).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace nanovllm::chat::jinja {

// A render-time error inside the interpreter; the renderer adds the template position and rethrows it as
// nanovllm::Error. `raised` marks errors from the template's own raise_exception().
class TemplateError : public std::runtime_error {
 public:
  explicit TemplateError(const std::string& msg, bool raised = false) : std::runtime_error(msg), raised(raised) {}
  bool raised;
};

struct Value;
using List = std::vector<Value>;
// Insertion-ordered like a Python dict (tojson output must keep the caller's key order).
using Dict = std::vector<std::pair<std::string, Value>>;

struct CallArgs;
struct Callable {
  std::string name;
  std::function<Value(CallArgs&)> fn;
};

// jinja2 namespace(): the one mutable object (ns.attr assignment inside loops).
struct Namespace {
  Dict attrs;
};

struct Undefined {
  std::string hint;  // what was missing, for error messages ("'dict object' has no attribute 'x'")
};
struct None {};

struct Value {
  using Storage = std::variant<Undefined, None, bool, int64_t, double, std::string, std::shared_ptr<const List>,
                               std::shared_ptr<const Dict>, std::shared_ptr<Namespace>,
                               std::shared_ptr<const Callable>>;
  Storage v;

  Value() : v(Undefined{}) {}
  Value(None) : v(None{}) {}
  Value(Undefined u) : v(std::move(u)) {}
  Value(bool b) : v(b) {}
  Value(int i) : v(int64_t{i}) {}
  Value(int64_t i) : v(i) {}
  Value(double d) : v(d) {}
  Value(std::string s) : v(std::move(s)) {}
  Value(const char* s) : v(std::string(s)) {}
  Value(List l) : v(std::make_shared<const List>(std::move(l))) {}
  Value(Dict d) : v(std::make_shared<const Dict>(std::move(d))) {}
  Value(std::shared_ptr<Namespace> ns) : v(std::move(ns)) {}
  Value(Callable c) : v(std::make_shared<const Callable>(std::move(c))) {}

  bool is_undefined() const { return std::holds_alternative<Undefined>(v); }
  bool is_none() const { return std::holds_alternative<None>(v); }
  bool is_bool() const { return std::holds_alternative<bool>(v); }
  bool is_int() const { return std::holds_alternative<int64_t>(v); }
  bool is_float() const { return std::holds_alternative<double>(v); }
  bool is_number() const { return is_int() || is_float() || is_bool(); }  // Python: bool is an int
  bool is_string() const { return std::holds_alternative<std::string>(v); }
  bool is_list() const { return std::holds_alternative<std::shared_ptr<const List>>(v); }
  bool is_dict() const { return std::holds_alternative<std::shared_ptr<const Dict>>(v); }
  bool is_namespace() const { return std::holds_alternative<std::shared_ptr<Namespace>>(v); }
  bool is_callable() const { return std::holds_alternative<std::shared_ptr<const Callable>>(v); }

  bool as_bool() const { return std::get<bool>(v); }
  int64_t as_int() const { return std::get<int64_t>(v); }
  double as_float() const { return std::get<double>(v); }
  const std::string& str() const { return std::get<std::string>(v); }
  const List& list() const { return *std::get<std::shared_ptr<const List>>(v); }
  const Dict& dict() const { return *std::get<std::shared_ptr<const Dict>>(v); }
  Namespace& ns() const { return *std::get<std::shared_ptr<Namespace>>(v); }
  const Callable& callable() const { return *std::get<std::shared_ptr<const Callable>>(v); }
  const std::string& undefined_hint() const { return std::get<Undefined>(v).hint; }
};

struct CallArgs {
  std::vector<Value> args;
  std::vector<std::pair<std::string, Value>> kwargs;
};

// Python type name, as in jinja2 error messages ("dict object", "str").
std::string type_name(const Value& v);
// Python truthiness (Undefined is false).
bool truthy(const Value& v);
// Python ==, deep for lists/dicts; 1 == 1.0 == True.
bool equals(const Value& a, const Value& b);
// Python str() / repr().
std::string to_str(const Value& v);
std::string repr(const Value& v);
// Python float repr (shortest round-trip, 1e-05 / 1e+16 / 100.0 forms).
std::string float_repr(double d);
// json.dumps(v, ensure_ascii, indent, separators, sort_keys) as transformers' tojson filter calls it.
// indent < 0 means None.
std::string to_json(const Value& v, int indent, bool ensure_ascii, bool sort_keys,
                    const std::string* item_sep = nullptr, const std::string* key_sep = nullptr);

// Dict lookup; nullptr when absent.
const Value* dict_find(const Dict& d, const std::string& key);

Value from_json(const nlohmann::ordered_json& j);

}  // namespace nanovllm::chat::jinja
