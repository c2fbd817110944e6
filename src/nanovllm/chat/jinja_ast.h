// AST of the Jinja subset: what the parser builds from a chat template and the interpreter walks.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "nanovllm/chat/jinja_value.h"

namespace nanovllm::chat::jinja {

struct Expr;
using ExprPtr = std::shared_ptr<const Expr>;
using Kwargs = std::vector<std::pair<std::string, ExprPtr>>;

struct Expr {
  enum class Kind {
    kLiteral,  // literal
    kName,     // name
    kGetAttr,  // children[0].name
    kGetItem,  // children[0][children[1]]
    kSlice,    // children[0][children[1]:children[2]:children[3]] (missing parts are nullptr)
    kCall,     // children[0](children[1:], kwargs)
    kFilter,   // children[0] | name(children[1:], kwargs)
    kTest,     // children[0] is [not] name(children[1:])
    kUnary,    // name in {"-", "+", "not"} applied to children[0]
    kBinary,   // children[0] name children[1]: + - * / // % ** ~
    kAnd,
    kOr,
    kCompare,  // children[0] ops[0] children[1] ops[1] children[2] ... (chained, like Python)
    kCond,     // children[1] if children[0] else children[2] (children[2] may be nullptr)
    kList,     // [children...] and tuples
    kDict,     // {children[0]: children[1], ...}
  };
  Kind kind;
  size_t pos = 0;  // byte offset in the (newline-normalised) template source
  Value literal;
  std::string name;
  bool negated = false;
  std::vector<ExprPtr> children;
  std::vector<std::string> ops;
  Kwargs kwargs;
};

struct Stmt;
using StmtPtr = std::shared_ptr<const Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  enum class Kind {
    kData,         // text
    kPrint,        // {{ expr }}
    kIf,           // branches (cond, body)...; else_body
    kFor,          // for targets in expr [if cond] body else else_body
    kSet,          // set targets = expr   |  set targets[0].attr = expr (attr non-empty)
    kSetBlock,     // set targets[0] %} body {% endset
    kMacro,        // macro name(params=defaults) body
    kCallBlock,    // call expr (a macro call) with body as caller()
    kFilterBlock,  // filter expr (a kFilter with children[0] == nullptr) body
    kBreak,
    kContinue,
    kScope,        // generation (transformers' assistant-mask extension): just renders body
  };
  Kind kind;
  size_t pos = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr cond;  // for-loop filter
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
  std::vector<std::string> targets;
  std::string attr;
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // same length as params; nullptr where none
};

struct Program {
  std::string source;  // normalised source, for error positions
  Body body;
};

// "line L, column C" of a byte offset.
std::string describe_position(const std::string& source, size_t pos);

// Parses a template with jinja2's Environment(trim_blocks=True, lstrip_blocks=True) whitespace rules.
// Throws nanovllm::Error naming the construct and position for syntax errors / unsupported tags.
std::shared_ptr<const Program> parse_template(const std::string& source);

// Known filter / test names (checked at parse time like jinja2's compiler does).
bool is_known_filter(const std::string& name);
bool is_known_test(const std::string& name);

}  // namespace nanovllm::chat::jinja
