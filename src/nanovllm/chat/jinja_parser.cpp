// Recursive-descent parser with jinja2's grammar and operator precedence (jinja2/parser.py):
// condexpr < or < and < not < compare < + - < ~ < * / // % < ** < unary < primary/postfix/filters.
#include <set>

#include "nanovllm/chat/jinja_ast.h"
#include "nanovllm/chat/jinja_lexer.h"
#include "nanovllm/core/error.h"

namespace nanovllm::chat::jinja {

std::string describe_position(const std::string& source, size_t pos) {
  size_t line = 1, col = 1;
  for (size_t i = 0; i < pos && i < source.size(); ++i) {
    if (source[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return "line " + std::to_string(line) + ", column " + std::to_string(col);
}

namespace {

std::shared_ptr<Expr> make(Expr::Kind kind, size_t pos) {
  auto e = std::make_shared<Expr>();
  e->kind = kind;
  e->pos = pos;
  return e;
}

class Parser {
 public:
  Parser(const std::string& src, std::vector<Token> tokens) : src_(src), toks_(std::move(tokens)) {}

  Body parse_all() {
    auto [body, end] = subparse({});
    (void)end;
    return body;
  }

 private:
  const Token& cur() const { return toks_[i_]; }
  const Token& peek(size_t k = 1) const { return toks_[std::min(i_ + k, toks_.size() - 1)]; }
  void advance() {
    if (i_ + 1 < toks_.size()) ++i_;
  }
  bool is_op(const char* op) const { return cur().type == TokenType::kOp && cur().text == op; }
  bool is_name(const char* n) const { return cur().type == TokenType::kName && cur().text == n; }

  [[noreturn]] void fail(const std::string& msg, size_t pos) const {
    NANOVLLM_FAIL("chat template syntax error: ", msg, " at ", describe_position(src_, pos));
  }
  std::string describe(const Token& t) const {
    switch (t.type) {
      case TokenType::kData: return "template text";
      case TokenType::kVarBegin: return "'{{'";
      case TokenType::kVarEnd: return "'}}'";
      case TokenType::kBlockBegin: return "'{%'";
      case TokenType::kBlockEnd: return "'%}'";
      case TokenType::kEof: return "end of template";
      case TokenType::kString: return "string literal";
      default: return "'" + t.text + "'";
    }
  }
  void expect_op(const char* op) {
    if (!is_op(op)) fail(std::string("expected '") + op + "', got " + describe(cur()), cur().pos);
    advance();
  }
  std::string expect_name() {
    if (cur().type != TokenType::kName) fail("expected a name, got " + describe(cur()), cur().pos);
    std::string n = cur().text;
    advance();
    return n;
  }
  void expect_block_end() {
    if (cur().type != TokenType::kBlockEnd) fail("expected '%}', got " + describe(cur()), cur().pos);
    advance();
  }

  // Parses statements until a block tag named in `ends` (returned, tag name consumed, '%}' not).
  std::pair<Body, std::string> subparse(const std::set<std::string>& ends) {
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.type == TokenType::kEof) {
        if (!ends.empty()) fail("unexpected end of template, expected '" + *ends.begin() + "'", t.pos);
        return {std::move(body), ""};
      }
      if (t.type == TokenType::kData) {
        auto s = std::make_shared<Stmt>();
        s->kind = Stmt::Kind::kData;
        s->pos = t.pos;
        s->text = t.text;
        body.push_back(s);
        advance();
      } else if (t.type == TokenType::kVarBegin) {
        auto s = std::make_shared<Stmt>();
        s->kind = Stmt::Kind::kPrint;
        s->pos = t.pos;
        advance();
        s->expr = parse_tuple(true);
        if (cur().type != TokenType::kVarEnd) fail("expected '}}', got " + describe(cur()), cur().pos);
        advance();
        body.push_back(s);
      } else if (t.type == TokenType::kBlockBegin) {
        const size_t pos = t.pos;
        advance();
        if (cur().type != TokenType::kName) fail("expected a tag name after '{%', got " + describe(cur()), cur().pos);
        const std::string tag = cur().text;
        if (ends.count(tag)) {
          advance();
          return {std::move(body), tag};
        }
        body.push_back(parse_statement(tag, pos));
      } else {
        fail("unexpected " + describe(t), t.pos);
      }
    }
  }

  StmtPtr parse_statement(const std::string& tag, size_t pos) {
    DepthGuard guard(this);
    const size_t tag_pos = cur().pos;
    advance();  // the tag name
    auto s = std::make_shared<Stmt>();
    s->pos = pos;
    if (tag == "if") {
      s->kind = Stmt::Kind::kIf;
      ExprPtr cond = parse_tuple(false);
      while (true) {
        expect_block_end();
        auto [body, end] = subparse({"elif", "else", "endif"});
        s->branches.emplace_back(cond, std::move(body));
        if (end == "elif") {
          cond = parse_tuple(false);
          continue;
        }
        if (end == "else") {
          expect_block_end();
          s->else_body = subparse({"endif"}).first;
        }
        break;
      }
    } else if (tag == "for") {
      s->kind = Stmt::Kind::kFor;
      s->targets = parse_targets();
      if (!is_name("in")) fail("expected 'in' in for loop, got " + describe(cur()), cur().pos);
      advance();
      s->expr = parse_tuple(false);
      if (is_name("if")) {
        advance();
        s->cond = parse_tuple(true);
      }
      if (is_name("recursive")) fail("unsupported construct 'recursive' for loop", cur().pos);
      expect_block_end();
      ++loop_depth_;
      auto [body, end] = subparse({"endfor", "else"});
      --loop_depth_;
      s->body = std::move(body);
      if (end == "else") {
        expect_block_end();
        s->else_body = subparse({"endfor"}).first;
      }
    } else if (tag == "set") {
      const std::string first = expect_name();
      if (is_op(".")) {
        advance();
        s->targets = {first};
        s->attr = expect_name();
      } else {
        s->targets = {first};
        while (is_op(",")) {
          advance();
          s->targets.push_back(expect_name());
        }
      }
      if (is_op("=")) {
        advance();
        s->kind = Stmt::Kind::kSet;
        s->expr = parse_tuple(true);
      } else {
        if (!s->attr.empty() || s->targets.size() != 1)
          fail("block 'set' needs a single plain name", tag_pos);
        if (is_op("|")) fail("unsupported construct: filter on block 'set'", cur().pos);
        s->kind = Stmt::Kind::kSetBlock;
        expect_block_end();
        s->body = subparse({"endset"}).first;
      }
    } else if (tag == "macro") {
      s->kind = Stmt::Kind::kMacro;
      s->name = expect_name();
      expect_op("(");
      while (!is_op(")")) {
        if (!s->params.empty()) expect_op(",");
        if (is_op(")")) break;
        s->params.push_back(expect_name());
        if (is_op("=")) {
          advance();
          s->defaults.push_back(parse_expression(true));
        } else {
          s->defaults.push_back(nullptr);
        }
      }
      advance();
      expect_block_end();
      const int saved = loop_depth_;
      loop_depth_ = 0;
      s->body = subparse({"endmacro"}).first;
      loop_depth_ = saved;
    } else if (tag == "call") {
      s->kind = Stmt::Kind::kCallBlock;
      if (is_op("(")) fail("unsupported construct: call block with caller arguments", cur().pos);
      s->expr = parse_expression(true);
      if (s->expr->kind != Expr::Kind::kCall) fail("'call' block needs a macro call", tag_pos);
      expect_block_end();
      s->body = subparse({"endcall"}).first;
    } else if (tag == "filter") {
      s->kind = Stmt::Kind::kFilterBlock;
      ExprPtr chain;
      do {
        if (chain) advance();  // '|'
        chain = parse_filter(chain, cur().pos);
      } while (is_op("|"));
      s->expr = chain;
      expect_block_end();
      s->body = subparse({"endfilter"}).first;
    } else if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) fail("'" + tag + "' outside of a loop", tag_pos);
      s->kind = tag == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue;
    } else if (tag == "generation") {
      s->kind = Stmt::Kind::kScope;
      expect_block_end();
      s->body = subparse({"endgeneration"}).first;
      return finish_tag(s);
    } else {
      static const std::set<std::string> kKnownUnsupported = {"raw", "include", "import", "from", "extends",
                                                               "block", "with", "autoescape", "do", "trans"};
      if (kKnownUnsupported.count(tag)) fail("unsupported construct '{% " + tag + " %}'", tag_pos);
      fail("unknown tag '" + tag + "'", tag_pos);
    }
    return finish_tag(s);
  }

  StmtPtr finish_tag(const std::shared_ptr<Stmt>& s) {
    expect_block_end();
    return s;
  }

  std::vector<std::string> parse_targets() {
    std::vector<std::string> names;
    const bool paren = is_op("(");
    if (paren) advance();
    names.push_back(expect_name());
    while (is_op(",")) {
      advance();
      if (cur().type != TokenType::kName) break;
      names.push_back(expect_name());
    }
    if (paren) expect_op(")");
    return names;
  }

  bool tuple_ends() const {
    const auto t = cur().type;
    return t == TokenType::kBlockEnd || t == TokenType::kVarEnd || t == TokenType::kEof || is_op(")") ||
           is_op("]") || is_name("in") || is_name("if") || is_name("recursive");
  }

  // expr or "a, b, ..." (a tuple, which we treat as a list).
  ExprPtr parse_tuple(bool with_condexpr) {
    const size_t pos = cur().pos;
    ExprPtr first = parse_expression(with_condexpr);
    if (!is_op(",")) return first;
    auto list = make(Expr::Kind::kList, pos);
    list->children.push_back(first);
    while (is_op(",")) {
      advance();
      if (tuple_ends()) break;
      list->children.push_back(parse_expression(with_condexpr));
    }
    return list;
  }

  ExprPtr parse_expression(bool with_condexpr) {
    DepthGuard guard(this);
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  // Bounds recursion so absurdly nested input fails cleanly instead of overflowing the stack.
  struct DepthGuard {
    explicit DepthGuard(Parser* p) : p_(p) {
      if (++p_->depth_ > kMaxDepth) p_->fail("nesting too deep", p_->cur().pos);
    }
    ~DepthGuard() { --p_->depth_; }
    Parser* p_;
  };
  static constexpr int kMaxDepth = 256;

  ExprPtr parse_condexpr() {
    ExprPtr expr = parse_or();
    while (is_name("if")) {
      const size_t pos = cur().pos;
      advance();
      auto cond = make(Expr::Kind::kCond, pos);
      cond->children.push_back(parse_or());
      cond->children.push_back(expr);
      if (is_name("else")) {
        advance();
        cond->children.push_back(parse_condexpr());
      } else {
        cond->children.push_back(nullptr);
      }
      expr = cond;
    }
    return expr;
  }

  ExprPtr binary(Expr::Kind kind, const std::string& op, ExprPtr l, ExprPtr r, size_t pos) {
    auto e = make(kind, pos);
    e->name = op;
    e->children = {std::move(l), std::move(r)};
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr l = parse_and();
    while (is_name("or")) {
      const size_t pos = cur().pos;
      advance();
      l = binary(Expr::Kind::kOr, "or", l, parse_and(), pos);
    }
    return l;
  }
  ExprPtr parse_and() {
    ExprPtr l = parse_not();
    while (is_name("and")) {
      const size_t pos = cur().pos;
      advance();
      l = binary(Expr::Kind::kAnd, "and", l, parse_not(), pos);
    }
    return l;
  }
  ExprPtr parse_not() {
    DepthGuard guard(this);
    if (is_name("not")) {
      auto e = make(Expr::Kind::kUnary, cur().pos);
      advance();
      e->name = "not";
      e->children.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    const size_t pos = cur().pos;
    ExprPtr first = parse_math1();
    std::shared_ptr<Expr> cmp;
    while (true) {
      std::string op;
      if (cur().type == TokenType::kOp &&
          (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == ">" ||
           cur().text == "<=" || cur().text == ">=")) {
        op = cur().text;
        advance();
      } else if (is_name("in")) {
        op = "in";
        advance();
      } else if (is_name("not") && peek().type == TokenType::kName && peek().text == "in") {
        op = "notin";
        advance();
        advance();
      } else {
        break;
      }
      if (!cmp) {
        cmp = make(Expr::Kind::kCompare, pos);
        cmp->children.push_back(first);
      }
      cmp->ops.push_back(op);
      cmp->children.push_back(parse_math1());
    }
    return cmp ? ExprPtr(cmp) : first;
  }
  ExprPtr parse_math1() {
    ExprPtr l = parse_concat();
    while (is_op("+") || is_op("-")) {
      const std::string op = cur().text;
      const size_t pos = cur().pos;
      advance();
      l = binary(Expr::Kind::kBinary, op, l, parse_concat(), pos);
    }
    return l;
  }
  ExprPtr parse_concat() {
    ExprPtr l = parse_math2();
    while (is_op("~")) {
      const size_t pos = cur().pos;
      advance();
      l = binary(Expr::Kind::kBinary, "~", l, parse_math2(), pos);
    }
    return l;
  }
  ExprPtr parse_math2() {
    ExprPtr l = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const std::string op = cur().text;
      const size_t pos = cur().pos;
      advance();
      l = binary(Expr::Kind::kBinary, op, l, parse_pow(), pos);
    }
    return l;
  }
  ExprPtr parse_pow() {
    ExprPtr l = parse_unary(true);
    while (is_op("**")) {
      const size_t pos = cur().pos;
      advance();
      l = binary(Expr::Kind::kBinary, "**", l, parse_unary(true), pos);
    }
    return l;
  }
  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(this);
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      auto e = make(Expr::Kind::kUnary, cur().pos);
      e->name = cur().text;
      advance();
      e->children.push_back(parse_unary(false));
      node = e;
    } else {
      node = parse_postfix(parse_primary());
    }
    return with_filter ? parse_filter_expr(node) : node;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    const size_t pos = t.pos;
    if (t.type == TokenType::kName) {
      auto e = make(Expr::Kind::kLiteral, pos);
      if (t.text == "true" || t.text == "True") {
        e->literal = Value(true);
      } else if (t.text == "false" || t.text == "False") {
        e->literal = Value(false);
      } else if (t.text == "none" || t.text == "None") {
        e->literal = Value(None{});
      } else {
        e->kind = Expr::Kind::kName;
        e->name = t.text;
      }
      advance();
      return e;
    }
    if (t.type == TokenType::kString) {
      std::string s;
      while (cur().type == TokenType::kString) {  // adjacent literals concatenate
        s += cur().text;
        advance();
      }
      auto e = make(Expr::Kind::kLiteral, pos);
      e->literal = Value(std::move(s));
      return e;
    }
    if (t.type == TokenType::kInt || t.type == TokenType::kFloat) {
      auto e = make(Expr::Kind::kLiteral, pos);
      e->literal = t.type == TokenType::kInt ? Value(t.int_value) : Value(t.float_value);
      advance();
      return e;
    }
    if (is_op("(")) {
      advance();
      if (is_op(")")) {
        advance();
        return make(Expr::Kind::kList, pos);
      }
      ExprPtr first = parse_expression(true);
      if (is_op(")")) {
        advance();
        return first;
      }
      auto list = make(Expr::Kind::kList, pos);
      list->children.push_back(first);
      while (is_op(",")) {
        advance();
        if (is_op(")")) break;
        list->children.push_back(parse_expression(true));
      }
      expect_op(")");
      return list;
    }
    if (is_op("[")) {
      advance();
      auto list = make(Expr::Kind::kList, pos);
      while (!is_op("]")) {
        if (!list->children.empty()) expect_op(",");
        if (is_op("]")) break;
        list->children.push_back(parse_expression(true));
      }
      advance();
      return list;
    }
    if (is_op("{")) {
      advance();
      auto dict = make(Expr::Kind::kDict, pos);
      while (!is_op("}")) {
        if (!dict->children.empty()) expect_op(",");
        if (is_op("}")) break;
        dict->children.push_back(parse_expression(true));
        expect_op(":");
        dict->children.push_back(parse_expression(true));
      }
      advance();
      return dict;
    }
    fail("unexpected " + describe(t) + " in expression", pos);
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (is_op(".")) {
        const size_t pos = cur().pos;
        advance();
        if (cur().type == TokenType::kName) {
          auto e = make(Expr::Kind::kGetAttr, pos);
          e->name = cur().text;
          e->children.push_back(node);
          advance();
          node = e;
        } else if (cur().type == TokenType::kInt) {
          auto e = make(Expr::Kind::kGetItem, pos);
          auto idx = make(Expr::Kind::kLiteral, cur().pos);
          idx->literal = Value(cur().int_value);
          e->children = {node, idx};
          advance();
          node = e;
        } else {
          fail("expected an attribute name after '.', got " + describe(cur()), cur().pos);
        }
      } else if (is_op("[")) {
        node = parse_subscript(node);
      } else if (is_op("(")) {
        node = parse_call(node);
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr node) {
    const size_t pos = cur().pos;
    advance();  // '['
    ExprPtr parts[3] = {nullptr, nullptr, nullptr};
    bool is_slice = false;
    if (!is_op(":")) parts[0] = parse_expression(true);
    if (is_op(":")) {
      is_slice = true;
      advance();
      if (!is_op("]") && !is_op(":")) parts[1] = parse_expression(true);
      if (is_op(":")) {
        advance();
        if (!is_op("]")) parts[2] = parse_expression(true);
      }
    }
    if (is_op(",")) fail("unsupported construct: tuple subscript", cur().pos);
    expect_op("]");
    auto e = make(is_slice ? Expr::Kind::kSlice : Expr::Kind::kGetItem, pos);
    e->children.push_back(node);
    e->children.push_back(parts[0]);
    if (is_slice) {
      e->children.push_back(parts[1]);
      e->children.push_back(parts[2]);
    }
    return e;
  }

  // Parses "(args, name=kwargs)" into e->children (after any already there) and e->kwargs.
  void parse_call_args(const std::shared_ptr<Expr>& e) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (is_op(")")) break;
      if (is_op("*") || is_op("**")) fail("unsupported construct: *args / **kwargs in a call", cur().pos);
      if (cur().type == TokenType::kName && peek().type == TokenType::kOp && peek().text == "=") {
        std::string key = cur().text;
        advance();
        advance();
        e->kwargs.emplace_back(std::move(key), parse_expression(true));
      } else {
        if (!e->kwargs.empty()) fail("positional argument after keyword argument", cur().pos);
        e->children.push_back(parse_expression(true));
      }
    }
    advance();
  }

  ExprPtr parse_call(ExprPtr node) {
    auto e = make(Expr::Kind::kCall, cur().pos);
    e->children.push_back(node);
    parse_call_args(e);
    return e;
  }

  ExprPtr parse_filter(ExprPtr node, size_t pos) {
    auto e = make(Expr::Kind::kFilter, pos);
    e->name = expect_name();
    if (!is_known_filter(e->name)) fail("no filter named '" + e->name + "'", pos);
    e->children.push_back(node);
    if (is_op("(")) parse_call_args(e);
    return e;
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (is_op("|")) {
        advance();
        node = parse_filter(node, cur().pos);
      } else if (is_name("is")) {
        node = parse_test(node);
      } else if (is_op("(")) {
        node = parse_call(node);
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_test(ExprPtr node) {
    advance();  // 'is'
    auto e = make(Expr::Kind::kTest, cur().pos);
    if (is_name("not")) {
      e->negated = true;
      advance();
    }
    e->name = expect_name();
    if (!is_known_test(e->name)) fail("no test named '" + e->name + "'", e->pos);
    e->children.push_back(node);
    const auto t = cur().type;
    if (is_op("(")) {
      parse_call_args(e);
    } else if ((t == TokenType::kName || t == TokenType::kString || t == TokenType::kInt ||
                t == TokenType::kFloat || is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail("you cannot chain multiple tests with 'is'", cur().pos);
      e->children.push_back(parse_postfix(parse_primary()));
    }
    return e;
  }

  const std::string& src_;
  std::vector<Token> toks_;
  size_t i_ = 0;
  int loop_depth_ = 0;
  int depth_ = 0;
};

}  // namespace

std::shared_ptr<const Program> parse_template(const std::string& source) {
  auto program = std::make_shared<Program>();
  program->source = normalize_source(source);
  Parser parser(program->source, tokenize(program->source));
  program->body = parser.parse_all();
  return program;
}

}  // namespace nanovllm::chat::jinja
