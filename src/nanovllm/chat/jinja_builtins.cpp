#include "nanovllm/chat/jinja_builtins.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "nanovllm/chat/jinja_ast.h"
#include "nanovllm/chat/py_string.h"
#include "nanovllm/chat/utf8.h"

namespace nanovllm::chat::jinja {
namespace {

[[noreturn]] void fail(const std::string& msg) { throw TemplateError(msg); }

std::string quoted_type(const Value& v) { return "'" + type_name(v) + "'"; }

// Reads positional-or-keyword arguments by name, like a Python signature; rejects unknown keywords.
class Args {
 public:
  Args(const std::string& what, const CallArgs& a, std::vector<std::string> names)
      : what_(what), a_(a), names_(std::move(names)) {
    if (a.args.size() > names_.size())
      fail(what + " takes at most " + std::to_string(names_.size()) + " arguments (" +
           std::to_string(a.args.size()) + " given)");
    for (const auto& [k, v] : a.kwargs)
      if (std::find(names_.begin(), names_.end(), k) == names_.end())
        fail(what + " got an unexpected keyword argument '" + k + "'");
  }
  const Value* get(size_t i) const {
    if (i < a_.args.size()) return &a_.args[i];
    for (const auto& [k, v] : a_.kwargs)
      if (k == names_[i]) return &v;
    return nullptr;
  }
  Value get_or(size_t i, Value dflt) const {
    const Value* v = get(i);
    return v ? *v : dflt;
  }
  std::optional<std::string> opt_str(size_t i) const {
    const Value* v = get(i);
    if (!v || v->is_none()) return std::nullopt;
    if (!v->is_string()) fail(what_ + ": argument '" + names_[i] + "' must be a string, not " + quoted_type(*v));
    return v->str();
  }
  std::string str(size_t i) const {
    const Value* v = get(i);
    if (!v) fail(what_ + " missing required argument '" + names_[i] + "'");
    if (!v->is_string()) fail(what_ + ": argument '" + names_[i] + "' must be a string, not " + quoted_type(*v));
    return v->str();
  }
  int64_t integer(size_t i, int64_t dflt) const {
    const Value* v = get(i);
    if (!v || v->is_none()) return dflt;
    if (v->is_int()) return v->as_int();
    if (v->is_bool()) return v->as_bool();
    fail(what_ + ": argument '" + names_[i] + "' must be an integer, not " + quoted_type(*v));
  }

 private:
  std::string what_;
  const CallArgs& a_;
  std::vector<std::string> names_;
};

Value bound(const std::string& name, std::function<Value(CallArgs&)> fn) { return Value(Callable{name, std::move(fn)}); }

List str_list(const std::vector<std::string>& v) {
  List l;
  l.reserve(v.size());
  for (const auto& s : v) l.emplace_back(s);
  return l;
}

bool prefix_match(const std::string& what, const std::string& s, const Value& p, bool suffix) {
  auto one = [&](const Value& x) {
    if (!x.is_string()) fail(what + " first arg must be str or a tuple of str, not " + type_name(x));
    return suffix ? py::ends_with(s, x.str()) : py::starts_with(s, x.str());
  };
  if (p.is_list()) {
    for (const auto& x : p.list())
      if (one(x)) return true;
    return false;
  }
  return one(p);
}

Value string_method(const std::string& s, const std::string& name) {
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    return bound(name, [s, name](CallArgs& a) {
      Args args("str." + name + "()", a, {"chars"});
      return Value(py::strip(s, args.opt_str(0), name != "rstrip", name != "lstrip"));
    });
  }
  if (name == "split" || name == "rsplit") {
    return bound(name, [s, name](CallArgs& a) {
      Args args("str." + name + "()", a, {"sep", "maxsplit"});
      const auto sep = args.opt_str(0);
      const int64_t maxsplit = args.integer(1, -1);
      return Value(str_list(name == "split" ? py::split(s, sep, maxsplit) : py::rsplit(s, sep, maxsplit)));
    });
  }
  if (name == "startswith" || name == "endswith") {
    return bound(name, [s, name](CallArgs& a) {
      Args args("str." + name + "()", a, {"prefix"});
      const Value* p = args.get(0);
      if (!p) fail("str." + name + "() takes at least 1 argument (0 given)");
      return Value(prefix_match("str." + name + "()", s, *p, name == "endswith"));
    });
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize" || name == "splitlines" ||
      name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" || name == "islower" ||
      name == "isupper") {
    return bound(name, [s, name](CallArgs& a) -> Value {
      Args args("str." + name + "()", a, {});
      if (name == "upper") return Value(py::upper(s));
      if (name == "lower") return Value(py::lower(s));
      if (name == "title") return Value(py::title(s));
      if (name == "capitalize") return Value(py::capitalize(s));
      if (name == "splitlines") return Value(str_list(py::splitlines(s)));
      if (name == "isspace") {
        const auto cps = utf8::decode(s);
        return Value(!cps.empty() && std::all_of(cps.begin(), cps.end(), utf8::is_space));
      }
      if (s.empty()) return Value(false);
      auto all = [&](auto pred) { return Value(std::all_of(s.begin(), s.end(), pred)); };
      if (name == "isdigit") return all([](char c) { return c >= '0' && c <= '9'; });
      if (name == "isalpha") return all([](char c) { return std::isalpha(static_cast<unsigned char>(c)) != 0; });
      if (name == "isalnum") return all([](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; });
      const bool has_cased = std::any_of(s.begin(), s.end(), [](char c) { return std::isalpha(static_cast<unsigned char>(c)); });
      if (name == "islower") return Value(has_cased && py::lower(s) == s);
      return Value(has_cased && py::upper(s) == s);
    });
  }
  if (name == "replace") {
    return bound(name, [s](CallArgs& a) {
      Args args("str.replace()", a, {"old", "new", "count"});
      return Value(py::replace(s, args.str(0), args.str(1), args.integer(2, -1)));
    });
  }
  if (name == "find" || name == "rfind" || name == "count") {
    return bound(name, [s, name](CallArgs& a) {
      Args args("str." + name + "()", a, {"sub"});
      const std::string sub = args.str(0);
      return Value(name == "count" ? py::count(s, sub) : py::find(s, sub, name == "rfind"));
    });
  }
  if (name == "join") {
    return bound(name, [s](CallArgs& a) {
      Args args("str.join()", a, {"iterable"});
      const Value* it = args.get(0);
      if (!it) fail("str.join() takes exactly one argument (0 given)");
      std::string out;
      bool first = true;
      for (const auto& x : iterate(*it)) {
        if (!x.is_string()) fail("sequence item: expected str instance, " + type_name(x) + " found");
        if (!first) out += s;
        first = false;
        out += x.str();
      }
      return Value(std::move(out));
    });
  }
  return Value(Undefined{"'str object' has no attribute '" + name + "'"});
}

Value dict_method(const Value& obj, const std::string& name) {
  if (name == "items" || name == "keys" || name == "values") {
    return bound(name, [obj, name](CallArgs& a) {
      Args args("dict." + name + "()", a, {});
      List out;
      for (const auto& [k, v] : obj.dict()) {
        if (name == "items")
          out.emplace_back(List{Value(k), v});
        else
          out.push_back(name == "keys" ? Value(k) : v);
      }
      return Value(std::move(out));
    });
  }
  if (name == "get") {
    return bound(name, [obj](CallArgs& a) {
      Args args("dict.get()", a, {"key", "default"});
      const Value* key = args.get(0);
      if (!key) fail("dict.get() takes at least 1 argument (0 given)");
      if (key->is_string())
        if (const Value* v = dict_find(obj.dict(), key->str())) return *v;
      return args.get_or(1, Value(None{}));
    });
  }
  return Value();
}

Value list_method(const Value& obj, const std::string& name) {
  if (name == "index" || name == "count") {
    return bound(name, [obj, name](CallArgs& a) {
      Args args("list." + name + "()", a, {"value"});
      const Value* x = args.get(0);
      if (!x) fail("list." + name + "() takes exactly one argument (0 given)");
      int64_t n = 0;
      const auto& l = obj.list();
      for (size_t i = 0; i < l.size(); ++i) {
        if (equals(l[i], *x)) {
          if (name == "index") return Value(static_cast<int64_t>(i));
          ++n;
        }
      }
      if (name == "index") fail(repr(*x) + " is not in list");
      return Value(n);
    });
  }
  return Value(Undefined{"'list object' has no attribute '" + name + "'"});
}

// Python slice semantics over n items.
std::vector<int64_t> slice_indices(int64_t n, const Value& start, const Value& stop, const Value& step) {
  auto as_opt = [](const Value& v, const char* what) -> std::optional<int64_t> {
    if (v.is_undefined() || v.is_none()) return std::nullopt;
    if (v.is_int()) return v.as_int();
    if (v.is_bool()) return v.as_bool() ? 1 : 0;
    fail(std::string("slice ") + what + " must be an integer or None, not " + quoted_type(v));
  };
  const int64_t st = as_opt(step, "step").value_or(1);
  if (st == 0) fail("slice step cannot be zero");
  const int64_t lower = st > 0 ? 0 : -1;
  const int64_t upper = st > 0 ? n : n - 1;
  auto clamp = [&](std::optional<int64_t> v, int64_t dflt) {
    if (!v) return dflt;
    int64_t x = *v;
    if (x < 0) {
      x += n;
      if (x < lower) x = lower;
    } else if (x > upper) {
      x = upper;
    }
    return x;
  };
  const int64_t b = clamp(as_opt(start, "start"), st > 0 ? lower : upper);
  const int64_t e = clamp(as_opt(stop, "stop"), st > 0 ? upper : lower);
  std::vector<int64_t> idx;
  for (int64_t i = b; st > 0 ? i < e : i > e; i += st) idx.push_back(i);
  return idx;
}

double num(const Value& v) {
  if (v.is_bool()) return v.as_bool();
  if (v.is_int()) return static_cast<double>(v.as_int());
  return v.as_float();
}
int64_t inum(const Value& v) { return v.is_bool() ? v.as_bool() : v.as_int(); }

// a < b with Python's rules (numbers, strings, lists); TypeError otherwise.
bool less(const Value& a, const Value& b, const std::string& op) {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  if (a.is_number() && b.is_number()) {
    if (!a.is_float() && !b.is_float()) return inum(a) < inum(b);
    return num(a) < num(b);
  }
  if (a.is_string() && b.is_string()) return a.str() < b.str();  // UTF-8 byte order == code point order
  if (a.is_list() && b.is_list()) {
    const auto& x = a.list();
    const auto& y = b.list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!equals(x[i], y[i])) return less(x[i], y[i], op);
    }
    return x.size() < y.size();
  }
  fail("'" + op + "' not supported between instances of " + quoted_type(a) + " and " + quoted_type(b));
}

std::vector<std::string> split_attr(const std::string& attr) { return py::split(attr, ".", -1); }

// jinja2 make_attrgetter: dotted path, integer parts index.
Value attr_path(const Value& v, const std::string& attr) {
  Value cur = v;
  for (const auto& part : split_attr(attr)) {
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    cur = digits ? get_item(cur, Value(static_cast<int64_t>(std::stoll(part)))) : get_item(cur, Value(part));
  }
  return cur;
}

CallArgs rest_args(const CallArgs& a, size_t from) {
  CallArgs out;
  for (size_t i = from; i < a.args.size(); ++i) out.args.push_back(a.args[i]);
  out.kwargs = a.kwargs;
  return out;
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

Value select_like(const std::string& name, const Value& v, const CallArgs& a) {
  const bool by_attr = name == "selectattr" || name == "rejectattr";
  const bool keep_if = name == "select" || name == "selectattr";
  size_t next = 0;
  std::string attr;
  if (by_attr) {
    if (a.args.empty() || !a.args[0].is_string()) fail(name + " needs an attribute name");
    attr = a.args[0].str();
    next = 1;
  }
  std::string test;
  if (a.args.size() > next) {
    if (!a.args[next].is_string()) fail(name + ": test name must be a string");
    test = a.args[next].str();
    if (!is_known_test(test)) fail("no test named '" + test + "'");
  }
  const CallArgs targs = rest_args(a, next + 1);
  List out;
  for (const auto& item : iterate(v)) {
    const Value x = by_attr ? attr_path(item, attr) : item;
    const bool ok = test.empty() ? truthy(x) : apply_test(test, x, targs);
    if (ok == keep_if) out.push_back(item);
  }
  return Value(std::move(out));
}

Value to_int(const Value& v, const Value& dflt) {
  if (v.is_bool()) return Value(static_cast<int64_t>(v.as_bool()));
  if (v.is_int()) return v;
  if (v.is_float()) return std::isfinite(v.as_float()) ? Value(static_cast<int64_t>(v.as_float())) : dflt;
  if (v.is_string()) {
    const std::string s = py::strip(v.str(), std::nullopt, true, true);
    try {
      size_t used = 0;
      const long long x = std::stoll(s, &used, 10);
      if (used == s.size()) return Value(static_cast<int64_t>(x));
      const double d = std::stod(s, &used);
      if (used == s.size() && std::isfinite(d)) return Value(static_cast<int64_t>(d));
    } catch (const std::exception&) {
    }
  }
  return dflt;
}

}  // namespace

void fail_undefined(const Value& v) {
  const std::string& hint = v.is_undefined() ? v.undefined_hint() : std::string();
  fail(hint.empty() ? "value is undefined" : hint);
}

int64_t length_of(const Value& v) {
  if (v.is_undefined()) return 0;
  if (v.is_string()) return py::length(v.str());
  if (v.is_list()) return static_cast<int64_t>(v.list().size());
  if (v.is_dict()) return static_cast<int64_t>(v.dict().size());
  fail("object of type " + quoted_type(v) + " has no len()");
}

Value get_attr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (obj.is_dict()) {
    Value m = dict_method(obj, name);
    if (m.is_callable()) return m;
    if (const Value* v = dict_find(obj.dict(), name)) return *v;
    return Value(Undefined{"'dict object' has no attribute '" + name + "'"});
  }
  if (obj.is_namespace()) {
    if (const Value* v = dict_find(obj.ns().attrs, name)) return *v;
    return Value(Undefined{"'Namespace object' has no attribute '" + name + "'"});
  }
  if (obj.is_string()) return string_method(obj.str(), name);
  if (obj.is_list()) return list_method(obj, name);
  return Value(Undefined{"'" + to_str(obj) + "' has no attribute '" + name + "'"});
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (obj.is_dict() && key.is_string()) {
    if (const Value* v = dict_find(obj.dict(), key.str())) return *v;
    Value m = dict_method(obj, key.str());
    if (m.is_callable()) return m;
    return Value(Undefined{"'dict object' has no attribute '" + key.str() + "'"});
  }
  if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t i = inum(key);
    if (obj.is_list()) {
      const auto& l = obj.list();
      const int64_t n = static_cast<int64_t>(l.size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value(Undefined{"list object has no element " + std::to_string(inum(key))});
      return l[static_cast<size_t>(i)];
    }
    const auto cps = utf8::decode(obj.str());
    const int64_t n = static_cast<int64_t>(cps.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Value(Undefined{"str object has no element " + std::to_string(inum(key))});
    std::string out;
    utf8::append(out, cps[static_cast<size_t>(i)]);
    return Value(std::move(out));
  }
  if (key.is_string()) return get_attr(obj, key.str());
  return Value(Undefined{quoted_type(obj) + " object has no element " + repr(key)});
}

Value slice_value(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (obj.is_list()) {
    const auto& l = obj.list();
    List out;
    for (int64_t i : slice_indices(static_cast<int64_t>(l.size()), start, stop, step)) out.push_back(l[i]);
    return Value(std::move(out));
  }
  if (obj.is_string()) {
    const auto cps = utf8::decode(obj.str());
    std::string out;
    for (int64_t i : slice_indices(static_cast<int64_t>(cps.size()), start, stop, step)) utf8::append(out, cps[i]);
    return Value(std::move(out));
  }
  fail(quoted_type(obj) + " object is not subscriptable with a slice");
}

List iterate(const Value& v) {
  if (v.is_undefined()) return {};
  if (v.is_list()) return v.list();
  if (v.is_dict()) {
    List keys;
    for (const auto& [k, x] : v.dict()) keys.emplace_back(k);
    return keys;
  }
  if (v.is_string()) {
    List chars;
    for (char32_t cp : utf8::decode(v.str())) {
      std::string c;
      utf8::append(c, cp);
      chars.emplace_back(std::move(c));
    }
    return chars;
  }
  fail(quoted_type(v) + " object is not iterable");
}

bool contains(const Value& container, const Value& item) {
  if (container.is_string()) {
    if (!item.is_string())
      fail("'in <string>' requires string as left operand, not " + type_name(item));
    return container.str().find(item.str()) != std::string::npos;
  }
  if (container.is_dict()) {
    if (!item.is_string()) return false;
    return dict_find(container.dict(), item.str()) != nullptr;
  }
  if (container.is_list() || container.is_undefined()) {
    for (const auto& x : iterate(container))
      if (equals(x, item)) return true;
    return false;
  }
  fail("argument of type " + quoted_type(container) + " is not iterable");
}

Value binary_op(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") return Value(to_str(a) + to_str(b));
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  auto type_error = [&]() -> Value {
    fail("unsupported operand type(s) for " + op + ": " + quoted_type(a) + " and " + quoted_type(b));
  };
  if (a.is_number() && b.is_number()) {
    const bool ints = !a.is_float() && !b.is_float();
    if (op == "+") return ints ? Value(inum(a) + inum(b)) : Value(num(a) + num(b));
    if (op == "-") return ints ? Value(inum(a) - inum(b)) : Value(num(a) - num(b));
    if (op == "*") return ints ? Value(inum(a) * inum(b)) : Value(num(a) * num(b));
    if (op == "/") {
      if (num(b) == 0.0) fail("division by zero");
      return Value(num(a) / num(b));
    }
    if (op == "//" || op == "%") {
      if (num(b) == 0.0) fail(op == "//" ? "integer division or modulo by zero" : "modulo by zero");
      if (ints) {
        const int64_t x = inum(a), y = inum(b);
        int64_t q = x / y;
        if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
        return op == "//" ? Value(q) : Value(x - q * y);
      }
      const double q = std::floor(num(a) / num(b));
      return op == "//" ? Value(q) : Value(num(a) - q * num(b));
    }
    if (op == "**") {
      if (ints && inum(b) >= 0) {
        int64_t r = 1;
        for (int64_t i = 0; i < inum(b); ++i) r *= inum(a);
        return Value(r);
      }
      return Value(std::pow(num(a), num(b)));
    }
    return type_error();
  }
  if (op == "+") {
    if (a.is_string() && b.is_string()) return Value(a.str() + b.str());
    if (a.is_list() && b.is_list()) {
      List out = a.list();
      out.insert(out.end(), b.list().begin(), b.list().end());
      return Value(std::move(out));
    }
    if (a.is_string()) fail("can only concatenate str (not \"" + type_name(b) + "\") to str");
    if (a.is_list()) fail("can only concatenate list (not \"" + type_name(b) + "\") to list");
    return type_error();
  }
  if (op == "*") {
    const Value& seq = a.is_number() ? b : a;
    const Value& n = a.is_number() ? a : b;
    if ((seq.is_string() || seq.is_list()) && (n.is_int() || n.is_bool())) {
      const int64_t times = inum(n);
      if (seq.is_string()) {
        std::string out;
        for (int64_t i = 0; i < times; ++i) out += seq.str();
        return Value(std::move(out));
      }
      List out;
      for (int64_t i = 0; i < times; ++i) out.insert(out.end(), seq.list().begin(), seq.list().end());
      return Value(std::move(out));
    }
  }
  if (op == "%" && a.is_string()) fail("unsupported construct: printf-style '%' string formatting");
  return type_error();
}

bool compare_op(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return equals(a, b);
  if (op == "!=") return !equals(a, b);
  if (op == "in") return contains(b, a);
  if (op == "notin") return !contains(b, a);
  if (op == "<") return less(a, b, op);
  if (op == ">") return less(b, a, op);
  if (op == "<=") return !less(b, a, op);
  if (op == ">=") return !less(a, b, op);
  fail("unknown comparison '" + op + "'");
}

namespace {
const std::set<std::string>& filter_names() {
  static const std::set<std::string> k = {
      "abs",   "attr",   "capitalize", "count",   "d",          "default", "e",      "escape", "first",
      "float", "int",    "items",      "join",    "last",       "length",  "list",   "lower",  "map",
      "reject", "rejectattr", "replace", "reverse", "safe",     "select",  "selectattr", "string", "sum",
      "title", "tojson", "trim",       "unique",  "upper",      "forceescape"};
  return k;
}
const std::set<std::string>& test_names() {
  static const std::set<std::string> k = {
      "defined", "undefined", "none", "string", "mapping", "sequence", "iterable", "number", "integer",
      "float",   "boolean",   "true", "false",  "callable", "eq",     "equalto",  "==",     "ne",
      "!=",      "lt",        "<",    "le",     "<=",       "gt",     ">",        "ge",     ">=",
      "lessthan", "greaterthan", "in", "odd",   "even",     "divisibleby", "sameas", "lower", "upper",
      "filter",  "test",      "escaped"};
  return k;
}
}  // namespace

bool is_known_filter(const std::string& name) { return filter_names().count(name) != 0; }
bool is_known_test(const std::string& name) { return test_names().count(name) != 0; }

Value apply_filter(const std::string& name, const Value& v, const CallArgs& a) {
  const std::string what = "filter '" + name + "'";
  if (name == "tojson") {
    // transformers' tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
    Args args(what, a, {"ensure_ascii", "indent", "separators", "sort_keys"});
    const Value indent = args.get_or(1, Value(None{}));
    if (!indent.is_none() && !indent.is_int()) fail("tojson: only an integer indent is supported");
    const Value seps = args.get_or(2, Value(None{}));
    std::string item_sep, key_sep;
    if (!seps.is_none()) {
      if (!seps.is_list() || seps.list().size() != 2 || !seps.list()[0].is_string() || !seps.list()[1].is_string())
        fail("tojson: separators must be a pair of strings");
      item_sep = seps.list()[0].str();
      key_sep = seps.list()[1].str();
    }
    if (v.is_undefined()) fail("Object of type Undefined is not JSON serializable");
    return Value(to_json(v, indent.is_none() ? -1 : static_cast<int>(indent.as_int()),
                         truthy(args.get_or(0, Value(false))), truthy(args.get_or(3, Value(false))),
                         seps.is_none() ? nullptr : &item_sep, seps.is_none() ? nullptr : &key_sep));
  }
  if (name == "trim") {
    Args args(what, a, {"chars"});
    return Value(py::strip(to_str(v), args.opt_str(0), true, true));
  }
  if (name == "length" || name == "count") {
    Args args(what, a, {});
    return Value(length_of(v));
  }
  if (name == "string") {
    Args args(what, a, {});
    return Value(to_str(v));
  }
  if (name == "lower" || name == "upper" || name == "capitalize" || name == "title") {
    Args args(what, a, {});
    const std::string s = to_str(v);
    if (name == "lower") return Value(py::lower(s));
    if (name == "upper") return Value(py::upper(s));
    if (name == "capitalize") return Value(py::capitalize(s));
    return Value(py::jinja_title(s));
  }
  if (name == "replace") {
    Args args(what, a, {"old", "new", "count"});
    return Value(py::replace(to_str(v), to_str(args.get_or(0, Value(""))), to_str(args.get_or(1, Value(""))),
                             args.integer(2, -1)));
  }
  if (name == "join") {
    Args args(what, a, {"d", "attribute"});
    const std::string sep = to_str(args.get_or(0, Value("")));
    const auto attr = args.opt_str(1);
    std::string out;
    bool first = true;
    for (const auto& x : iterate(v)) {
      if (!first) out += sep;
      first = false;
      out += to_str(attr ? attr_path(x, *attr) : x);
    }
    return Value(std::move(out));
  }
  if (name == "first" || name == "last") {
    Args args(what, a, {});
    const List items = iterate(v);
    if (items.empty()) return Value(Undefined{"No " + name + " item, sequence was empty."});
    return name == "first" ? items.front() : items.back();
  }
  if (name == "default" || name == "d") {
    Args args(what, a, {"default_value", "boolean"});
    const bool boolean = truthy(args.get_or(1, Value(false)));
    if (v.is_undefined() || (boolean && !truthy(v))) return args.get_or(0, Value(""));
    return v;
  }
  if (name == "items") {
    Args args(what, a, {});
    if (v.is_undefined()) return Value(List{});
    if (!v.is_dict()) fail("Can only get item pairs from a mapping.");
    List out;
    for (const auto& [k, x] : v.dict()) out.emplace_back(List{Value(k), x});
    return Value(std::move(out));
  }
  if (name == "list") {
    Args args(what, a, {});
    return Value(iterate(v));
  }
  if (name == "reverse") {
    Args args(what, a, {});
    if (v.is_string()) return slice_value(v, Value(), Value(), Value(int64_t{-1}));
    List items = iterate(v);
    std::reverse(items.begin(), items.end());
    return Value(std::move(items));
  }
  if (name == "unique") {
    Args args(what, a, {"case_sensitive", "attribute"});
    const bool cs = truthy(args.get_or(0, Value(false)));
    const auto attr = args.opt_str(1);
    List out, seen;
    for (const auto& x : iterate(v)) {
      Value key = attr ? attr_path(x, *attr) : x;
      if (!cs && key.is_string()) key = Value(py::lower(key.str()));
      bool dup = false;
      for (const auto& s : seen) dup = dup || equals(s, key);
      if (!dup) {
        seen.push_back(key);
        out.push_back(x);
      }
    }
    return Value(std::move(out));
  }
  if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr")
    return select_like(name, v, a);
  if (name == "map") {
    List out;
    const Value* attr = nullptr;
    for (const auto& [k, x] : a.kwargs)
      if (k == "attribute") attr = &x;
    if (attr) {
      Value dflt;
      for (const auto& [k, x] : a.kwargs) {
        if (k == "default") dflt = x;
        else if (k != "attribute") fail("map got an unexpected keyword argument '" + k + "'");
      }
      for (const auto& x : iterate(v)) {
        Value r = attr_path(x, to_str(*attr));
        out.push_back(r.is_undefined() && !dflt.is_undefined() ? dflt : r);
      }
      return Value(std::move(out));
    }
    if (a.args.empty() || !a.args[0].is_string()) fail("map needs a filter name or attribute=");
    const std::string f = a.args[0].str();
    if (!is_known_filter(f)) fail("no filter named '" + f + "'");
    const CallArgs fargs = rest_args(a, 1);
    for (const auto& x : iterate(v)) out.push_back(apply_filter(f, x, fargs));
    return Value(std::move(out));
  }
  if (name == "attr") {
    Args args(what, a, {"name"});
    return get_attr(v, args.str(0));
  }
  if (name == "abs") {
    Args args(what, a, {});
    if (v.is_int() || v.is_bool()) return Value(static_cast<int64_t>(std::llabs(inum(v))));
    if (v.is_float()) return Value(std::fabs(v.as_float()));
    fail("bad operand type for abs(): " + quoted_type(v));
  }
  if (name == "int") {
    Args args(what, a, {"default", "base"});
    if (args.integer(1, 10) != 10) fail("int filter: only base 10 is supported");
    return to_int(v, args.get_or(0, Value(int64_t{0})));
  }
  if (name == "float") {
    Args args(what, a, {"default"});
    if (v.is_number()) return Value(num(v));
    if (v.is_string()) {
      try {
        size_t used = 0;
        const std::string s = py::strip(v.str(), std::nullopt, true, true);
        const double d = std::stod(s, &used);
        if (used == s.size()) return Value(d);
      } catch (const std::exception&) {
      }
    }
    return args.get_or(0, Value(0.0));
  }
  if (name == "sum") {
    Args args(what, a, {"attribute", "start"});
    const auto attr = args.opt_str(0);
    Value total = args.get_or(1, Value(int64_t{0}));
    for (const auto& x : iterate(v)) total = binary_op("+", total, attr ? attr_path(x, *attr) : x);
    return total;
  }
  if (name == "safe") {
    Args args(what, a, {});
    return v;
  }
  if (name == "escape" || name == "e" || name == "forceescape") {
    Args args(what, a, {});
    return Value(html_escape(to_str(v)));
  }
  fail("no filter named '" + name + "'");
}

bool apply_test(const std::string& name, const Value& v, const CallArgs& a) {
  const std::string what = "test '" + name + "'";
  auto arg = [&]() -> const Value& {
    if (a.args.size() != 1 || !a.kwargs.empty()) fail(what + " takes exactly one argument");
    return a.args[0];
  };
  auto none = [&] {
    if (!a.args.empty() || !a.kwargs.empty()) fail(what + " takes no arguments");
  };
  if (name == "defined") return none(), !v.is_undefined();
  if (name == "undefined") return none(), v.is_undefined();
  if (name == "none") return none(), v.is_none();
  if (name == "string") return none(), v.is_string();
  if (name == "mapping") return none(), v.is_dict();
  if (name == "sequence") return none(), v.is_string() || v.is_list() || v.is_dict();
  if (name == "iterable") return none(), v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
  if (name == "number") return none(), v.is_number();
  if (name == "integer") return none(), v.is_int();
  if (name == "float") return none(), v.is_float();
  if (name == "boolean") return none(), v.is_bool();
  if (name == "true") return none(), v.is_bool() && v.as_bool();
  if (name == "false") return none(), v.is_bool() && !v.as_bool();
  if (name == "callable") return none(), v.is_callable();
  if (name == "eq" || name == "equalto" || name == "==") return equals(v, arg());
  if (name == "ne" || name == "!=") return !equals(v, arg());
  if (name == "lt" || name == "<" || name == "lessthan") return compare_op("<", v, arg());
  if (name == "le" || name == "<=") return compare_op("<=", v, arg());
  if (name == "gt" || name == ">" || name == "greaterthan") return compare_op(">", v, arg());
  if (name == "ge" || name == ">=") return compare_op(">=", v, arg());
  if (name == "in") return contains(arg(), v);
  if (name == "odd" || name == "even" || name == "divisibleby") {
    if (v.is_undefined()) fail_undefined(v);
    if (!(v.is_int() || v.is_bool())) fail(what + " needs an integer, not " + quoted_type(v));
    const int64_t x = inum(v);
    if (name == "odd") return none(), ((x % 2) + 2) % 2 == 1;
    if (name == "even") return none(), x % 2 == 0;
    const Value& d = arg();
    if (!(d.is_int() || d.is_bool()) || inum(d) == 0) fail(what + " needs a non-zero integer divisor");
    return x % inum(d) == 0;
  }
  if (name == "sameas") {
    const Value& o = arg();
    if (v.v.index() != o.v.index()) return false;
    if (v.is_none() || v.is_undefined()) return true;
    if (v.is_bool()) return v.as_bool() == o.as_bool();
    if (v.is_list()) return &v.list() == &o.list();
    if (v.is_dict()) return &v.dict() == &o.dict();
    return equals(v, o) && (v.is_int() ? v.as_int() >= -5 && v.as_int() <= 256 : false);
  }
  if (name == "lower" || name == "upper") {
    none();
    const std::string s = to_str(v);
    const bool cased = std::any_of(s.begin(), s.end(), [](char c) { return std::isalpha(static_cast<unsigned char>(c)); });
    return cased && (name == "lower" ? py::lower(s) == s : py::upper(s) == s);
  }
  if (name == "filter") return v.is_string() && is_known_filter(v.str());
  if (name == "test") return v.is_string() && is_known_test(v.str());
  if (name == "escaped") return none(), false;
  fail("no test named '" + name + "'");
}

}  // namespace nanovllm::chat::jinja
