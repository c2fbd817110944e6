#include "nanovllm/chat/jinja_interp.h"

#include "nanovllm/chat/jinja_builtins.h"
#include "nanovllm/core/error.h"

namespace nanovllm::chat::jinja {
namespace {

constexpr int kMaxCallDepth = 100;

class Interpreter {
 public:
  explicit Interpreter(const Program& program) : program_(program) {}

  std::string run(Context context) {
    std::string out;
    out_ = &out;
    scopes_ = {&context};
    try {
      exec_body(program_.body);
    } catch (const TemplateError& e) {
      if (e.raised)
        NANOVLLM_FAIL("chat template raised an exception: ", e.what(), " (at ",
                      describe_position(program_.source, pos_), ")");
      NANOVLLM_FAIL("chat template error at ", describe_position(program_.source, pos_), ": ", e.what());
    }
    return out;
  }

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  Flow exec_body(const Body& body) {
    for (const auto& s : body) {
      const Flow f = exec(*s);
      if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
  }

  Value lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto found = (*it)->find(name);
      if (found != (*it)->end()) return found->second;
    }
    return Value(Undefined{"'" + name + "' is undefined"});
  }

  void assign(const std::string& name, Value v) { (*scopes_.back())[name] = std::move(v); }

  void assign_targets(const std::vector<std::string>& targets, const Value& v) {
    if (targets.size() == 1) {
      assign(targets[0], v);
      return;
    }
    const List items = iterate(v);
    if (items.size() != targets.size())
      throw TemplateError("cannot unpack " + std::to_string(items.size()) + " values into " +
                          std::to_string(targets.size()) + " names");
    for (size_t i = 0; i < targets.size(); ++i) assign(targets[i], items[i]);
  }

  Flow exec(const Stmt& s) {
    pos_ = s.pos;
    switch (s.kind) {
      case Stmt::Kind::kData:
        *out_ += s.text;
        return Flow::kNormal;
      case Stmt::Kind::kPrint:
        *out_ += to_str(eval(*s.expr));
        return Flow::kNormal;
      case Stmt::Kind::kIf:
        for (const auto& [cond, body] : s.branches)
          if (truthy(eval(*cond))) return exec_body(body);
        return exec_body(s.else_body);
      case Stmt::Kind::kFor:
        return exec_for(s);
      case Stmt::Kind::kSet: {
        Value v = eval(*s.expr);
        pos_ = s.pos;
        if (!s.attr.empty()) {
          const Value target = lookup(s.targets[0]);
          if (!target.is_namespace())
            throw TemplateError("cannot assign attribute '" + s.attr + "' on non-namespace object '" +
                                s.targets[0] + "'");
          auto& attrs = target.ns().attrs;
          for (auto& [k, x] : attrs) {
            if (k == s.attr) {
              x = std::move(v);
              return Flow::kNormal;
            }
          }
          attrs.emplace_back(s.attr, std::move(v));
          return Flow::kNormal;
        }
        assign_targets(s.targets, v);
        return Flow::kNormal;
      }
      case Stmt::Kind::kSetBlock:
        assign(s.targets[0], Value(capture(s.body)));
        return Flow::kNormal;
      case Stmt::Kind::kMacro:
        assign(s.name, make_macro(s));
        return Flow::kNormal;
      case Stmt::Kind::kCallBlock:
        *out_ += to_str(call_block(s));
        return Flow::kNormal;
      case Stmt::Kind::kFilterBlock: {
        const Value body(capture(s.body));
        *out_ += to_str(apply_filter_chain(*s.expr, body));
        return Flow::kNormal;
      }
      case Stmt::Kind::kBreak:
        return Flow::kBreak;
      case Stmt::Kind::kContinue:
        return Flow::kContinue;
      case Stmt::Kind::kScope:
        return exec_body(s.body);
    }
    return Flow::kNormal;
  }

  std::string capture(const Body& body) {
    std::string buf;
    std::string* saved = out_;
    out_ = &buf;
    exec_body(body);
    out_ = saved;
    return buf;
  }

  Flow exec_for(const Stmt& s) {
    const Value iterable = eval(*s.expr);
    pos_ = s.pos;
    List items = iterate(iterable);
    if (s.cond) {
      List kept;
      for (const auto& item : items) {
        Context frame;
        scopes_.push_back(&frame);
        assign_targets(s.targets, item);
        const bool keep = truthy(eval(*s.cond));
        scopes_.pop_back();
        if (keep) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) return exec_body(s.else_body);
    const auto n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      Context frame;
      scopes_.push_back(&frame);
      Dict loop;
      loop.emplace_back("index0", Value(i));
      loop.emplace_back("index", Value(i + 1));
      loop.emplace_back("revindex0", Value(n - i - 1));
      loop.emplace_back("revindex", Value(n - i));
      loop.emplace_back("first", Value(i == 0));
      loop.emplace_back("last", Value(i == n - 1));
      loop.emplace_back("length", Value(n));
      loop.emplace_back("depth", Value(int64_t{1}));
      loop.emplace_back("depth0", Value(int64_t{0}));
      loop.emplace_back("previtem", i > 0 ? items[i - 1] : Value(Undefined{"there is no previous item"}));
      loop.emplace_back("nextitem", i + 1 < n ? items[i + 1] : Value(Undefined{"there is no next item"}));
      loop.emplace_back("cycle", Value(Callable{"loop.cycle", [i](CallArgs& a) -> Value {
                                                  if (a.args.empty()) throw TemplateError("no items for cycling given");
                                                  return a.args[static_cast<size_t>(i) % a.args.size()];
                                                }}));
      frame["loop"] = Value(std::move(loop));
      try {
        assign_targets(s.targets, items[i]);
      } catch (...) {
        scopes_.pop_back();
        throw;
      }
      Flow f;
      try {
        f = exec_body(s.body);
      } catch (...) {
        scopes_.pop_back();
        throw;
      }
      scopes_.pop_back();
      if (f == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  Value make_macro(const Stmt& s) {
    const Stmt* def = &s;
    return Value(Callable{s.name, [this, def](CallArgs& a) { return call_macro(*def, a); }});
  }

  Value call_macro(const Stmt& def, CallArgs& a) {
    if (a.args.size() > def.params.size())
      throw TemplateError("macro '" + def.name + "' takes not more than " + std::to_string(def.params.size()) +
                          " argument(s)");
    if (++depth_ > kMaxCallDepth) throw TemplateError("maximum macro recursion depth exceeded");
    Context frame;
    // Parameter defaults are evaluated in the caller's scope, then the body runs in its own scope
    // on top of the template's top level.
    for (size_t i = 0; i < def.params.size(); ++i) {
      if (i < a.args.size()) {
        frame[def.params[i]] = a.args[i];
      } else {
        frame[def.params[i]] = def.defaults[i] ? eval(*def.defaults[i]) : Value(Undefined{"parameter '" + def.params[i] + "' was not provided"});
      }
    }
    for (const auto& [k, v] : a.kwargs) {
      bool known = k == "caller";
      for (const auto& p : def.params) known = known || p == k;
      if (!known) throw TemplateError("macro '" + def.name + "' takes no keyword argument '" + k + "'");
      frame[k] = v;
    }
    std::vector<Context*> saved_scopes = {scopes_.front(), &frame};
    std::swap(saved_scopes, scopes_);
    std::string buf;
    std::string* saved_out = out_;
    out_ = &buf;
    try {
      exec_body(def.body);
    } catch (...) {
      std::swap(saved_scopes, scopes_);
      out_ = saved_out;
      --depth_;
      throw;
    }
    std::swap(saved_scopes, scopes_);
    out_ = saved_out;
    --depth_;
    return Value(std::move(buf));
  }

  Value call_block(const Stmt& s) {
    const Expr& call = *s.expr;
    const Value callee = eval(*call.children[0]);
    CallArgs args = eval_args(call);
    const Body* body = &s.body;
    const std::vector<Context*> site = scopes_;
    args.kwargs.emplace_back("caller", Value(Callable{"caller", [this, body, site](CallArgs&) {
                                         std::vector<Context*> saved = site;
                                         std::swap(saved, scopes_);
                                         std::string text;
                                         try {
                                           text = capture(*body);
                                         } catch (...) {
                                           std::swap(saved, scopes_);
                                           throw;
                                         }
                                         std::swap(saved, scopes_);
                                         return Value(std::move(text));
                                       }}));
    pos_ = s.pos;
    if (!callee.is_callable()) throw TemplateError("'call' block target is not callable");
    return callee.callable().fn(args);
  }

  CallArgs eval_args(const Expr& e, size_t first = 1) {
    CallArgs args;
    for (size_t i = first; i < e.children.size(); ++i) args.args.push_back(eval(*e.children[i]));
    for (const auto& [k, x] : e.kwargs) args.kwargs.emplace_back(k, eval(*x));
    return args;
  }

  // A filter chain from a {% filter %} block: innermost operand is the block's output.
  Value apply_filter_chain(const Expr& e, const Value& input) {
    const Value operand = e.children[0] ? apply_filter_chain(*e.children[0], input) : input;
    CallArgs args = eval_args(e);
    pos_ = e.pos;
    return apply_filter(e.name, operand, args);
  }

  Value eval(const Expr& e) {
    pos_ = e.pos;
    switch (e.kind) {
      case Expr::Kind::kLiteral:
        return e.literal;
      case Expr::Kind::kName:
        return lookup(e.name);
      case Expr::Kind::kGetAttr: {
        const Value obj = eval(*e.children[0]);
        pos_ = e.pos;
        return get_attr(obj, e.name);
      }
      case Expr::Kind::kGetItem: {
        const Value obj = eval(*e.children[0]);
        const Value key = eval(*e.children[1]);
        pos_ = e.pos;
        return get_item(obj, key);
      }
      case Expr::Kind::kSlice: {
        const Value obj = eval(*e.children[0]);
        Value parts[3];
        for (int i = 0; i < 3; ++i)
          if (e.children[i + 1]) parts[i] = eval(*e.children[i + 1]);
        pos_ = e.pos;
        return slice_value(obj, parts[0], parts[1], parts[2]);
      }
      case Expr::Kind::kCall: {
        const Value callee = eval(*e.children[0]);
        CallArgs args = eval_args(e);
        pos_ = e.pos;
        if (callee.is_undefined()) fail_undefined(callee);
        if (!callee.is_callable()) throw TemplateError(quoted(callee) + " object is not callable");
        return callee.callable().fn(args);
      }
      case Expr::Kind::kFilter: {
        const Value operand = eval(*e.children[0]);
        CallArgs args = eval_args(e);
        pos_ = e.pos;
        return apply_filter(e.name, operand, args);
      }
      case Expr::Kind::kTest: {
        const Value operand = eval(*e.children[0]);
        CallArgs args = eval_args(e);
        pos_ = e.pos;
        return Value(apply_test(e.name, operand, args) != e.negated);
      }
      case Expr::Kind::kUnary: {
        const Value v = eval(*e.children[0]);
        pos_ = e.pos;
        if (e.name == "not") return Value(!truthy(v));
        if (v.is_undefined()) fail_undefined(v);
        if (!v.is_number()) throw TemplateError("bad operand type for unary " + e.name + ": " + quoted(v));
        if (e.name == "+") return v.is_bool() ? Value(static_cast<int64_t>(v.as_bool())) : v;
        if (v.is_float()) return Value(-v.as_float());
        return Value(-(v.is_bool() ? static_cast<int64_t>(v.as_bool()) : v.as_int()));
      }
      case Expr::Kind::kBinary: {
        const Value l = eval(*e.children[0]);
        const Value r = eval(*e.children[1]);
        pos_ = e.pos;
        return binary_op(e.name, l, r);
      }
      case Expr::Kind::kAnd: {
        Value l = eval(*e.children[0]);
        return truthy(l) ? eval(*e.children[1]) : l;
      }
      case Expr::Kind::kOr: {
        Value l = eval(*e.children[0]);
        return truthy(l) ? l : eval(*e.children[1]);
      }
      case Expr::Kind::kCompare: {
        Value l = eval(*e.children[0]);
        for (size_t i = 0; i < e.ops.size(); ++i) {
          Value r = eval(*e.children[i + 1]);
          pos_ = e.pos;
          if (!compare_op(e.ops[i], l, r)) return Value(false);
          l = std::move(r);
        }
        return Value(true);
      }
      case Expr::Kind::kCond:
        if (truthy(eval(*e.children[0]))) return eval(*e.children[1]);
        return e.children[2] ? eval(*e.children[2]) : Value(Undefined{"the inline if-expression evaluated to false and no else section was defined"});
      case Expr::Kind::kList: {
        List l;
        for (const auto& c : e.children) l.push_back(eval(*c));
        return Value(std::move(l));
      }
      case Expr::Kind::kDict: {
        Dict d;
        for (size_t i = 0; i + 1 < e.children.size(); i += 2) {
          Value k = eval(*e.children[i]);
          Value v = eval(*e.children[i + 1]);
          pos_ = e.children[i]->pos;
          if (!k.is_string()) throw TemplateError("unsupported construct: non-string dict key " + repr(k));
          bool replaced = false;
          for (auto& [dk, dv] : d) {
            if (dk == k.str()) {
              dv = v;
              replaced = true;
            }
          }
          if (!replaced) d.emplace_back(k.str(), std::move(v));
        }
        return Value(std::move(d));
      }
    }
    return Value();
  }

  static std::string quoted(const Value& v) { return "'" + type_name(v) + "'"; }

  const Program& program_;
  std::vector<Context*> scopes_;
  std::string* out_ = nullptr;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace

std::string render_program(const Program& program, Context context) {
  return Interpreter(program).run(std::move(context));
}

}  // namespace nanovllm::chat::jinja
