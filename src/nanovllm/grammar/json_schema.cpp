#include "nanovllm/grammar/json_schema.h"

#include <algorithm>
#include <cctype>
#include <functional>
#include <map>
#include <set>
#include <string>

#include "nanovllm/core/error.h"
#include "nanovllm/grammar/json_number.h"
#include "nanovllm/grammar/regex.h"

namespace nanovllm::grammar {
namespace {

using json = nlohmann::ordered_json;

// Validation keywords this converter does not implement: each is an error, never dropped.
const std::set<std::string>& unsupported_keywords() {
  static const std::set<std::string> s = {
      "not", "if", "then", "else", "patternProperties", "propertyNames", "dependentRequired", "dependentSchemas",
      "dependencies", "contains", "minContains", "maxContains", "minProperties", "maxProperties", "multipleOf",
      "unevaluatedProperties", "unevaluatedItems", "$dynamicRef", "$dynamicAnchor", "$recursiveRef",
      "$recursiveAnchor", "contentSchema"};
  return s;
}
// Keywords that only describe: they never change what validates.
const std::set<std::string>& annotation_keywords() {
  static const std::set<std::string> s = {
      "title", "description", "default", "examples", "$comment", "$schema", "$id", "$anchor", "$vocabulary",
      "deprecated", "readOnly", "writeOnly", "contentMediaType", "contentEncoding", "$defs", "definitions"};
  return s;
}

enum TypeBits : uint32_t {
  kNull = 1, kBoolean = 2, kInteger = 4, kNumber = 8, kString = 16, kArray = 32, kObject = 64,
  kAnyType = 127
};

uint32_t type_bit(const std::string& name) {
  if (name == "null") return kNull;
  if (name == "boolean") return kBoolean;
  if (name == "integer") return kInteger;
  if (name == "number") return kNumber;
  if (name == "string") return kString;
  if (name == "array") return kArray;
  if (name == "object") return kObject;
  return 0;
}

// The type bits of a JSON value (an integer-valued number is both integer and number).
uint32_t value_types(const json& v) {
  if (v.is_null()) return kNull;
  if (v.is_boolean()) return kBoolean;
  if (v.is_number_integer() || v.is_number_unsigned()) return kInteger | kNumber;
  if (v.is_number_float()) {
    const double d = v.get<double>();
    return d == static_cast<double>(static_cast<int64_t>(d)) ? (kInteger | kNumber) : kNumber;
  }
  if (v.is_string()) return kString;
  if (v.is_array()) return kArray;
  return kObject;
}

bool has_any(const json& s, std::initializer_list<const char*> keys) {
  for (const char* k : keys)
    if (s.contains(k)) return true;
  return false;
}

// Regular expressions for the formats, generating only strings that every validator accepts (days up to
// 28 so every month has them; a time always has its zone).
const char* format_regex(const std::string& format) {
  static const std::map<std::string, const char*> formats = {
      {"date", R"([0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8]))"},
      {"time", R"(([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9]))"},
      {"date-time",
       R"([0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9]))"},
      {"email", R"([a-zA-Z0-9_+-]{1,32}(\.[a-zA-Z0-9_+-]{1,32}){0,3}@[a-zA-Z0-9]([a-zA-Z0-9-]{0,30}[a-zA-Z0-9])?(\.[a-zA-Z0-9]([a-zA-Z0-9-]{0,30}[a-zA-Z0-9])?){0,3}\.[a-zA-Z]{2,8})"},
      {"uuid", R"([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})"},
      {"ipv4", R"(((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9]))"},
      {"ipv6", R"(([0-9a-fA-F]{1,4}:){7}[0-9a-fA-F]{1,4})"},
      {"hostname", R"([a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?(\.[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?){0,2})"},
      {"uri", R"(https?://[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?){0,3}(/[a-zA-Z0-9._~-]{0,32}){0,8})"},
  };
  auto it = formats.find(format);
  return it == formats.end() ? nullptr : it->second;
}

class SchemaConverter {
 public:
  explicit SchemaConverter(const json& root) : root_(root) {}

  Grammar run() {
    const int32_t root = g_.add_rule("root");
    g_.set_root(root);
    refs_["#"] = root;
    g_.set_body(root, value_expr(root_, "#"));
    return std::move(g_);
  }

  Grammar any(bool object_only) {
    const int32_t root = g_.add_rule("root");
    g_.set_root(root);
    g_.set_body(root, Expr::ref(builtin(object_only ? "object" : "value")));
    return std::move(g_);
  }

 private:
  const json& root_;
  Grammar g_;
  std::map<std::string, int32_t> refs_;      // "$ref" value -> its rule
  std::map<std::string, int32_t> builtins_;  // ws, string, value, ...
  int depth_ = 0;

  [[noreturn]] static void fail(const std::string& path, const std::string& what) {
    NANOVLLM_FAIL("JSON Schema at ", path, ": ", what);
  }

  // ---- shared rules ----------------------------------------------------------------------------------

  static Expr json_char() {
    const Expr hex = Expr::cls({{'0', '9'}, {'A', 'F'}, {'a', 'f'}});
    // \uXXXX without surrogates: a lone one is not a character (validators count code points).
    const Expr u_escape = Expr::seq(
        {Expr::literal("u"),
         Expr::alt({Expr::seq({Expr::cls({{'0', '9'}, {'A', 'C'}, {'a', 'c'}, {'E', 'F'}, {'e', 'f'}}),
                               Expr::repeat(hex, 3, 3)}),
                    Expr::seq({Expr::cls({{'D', 'D'}, {'d', 'd'}}), Expr::cls({{'0', '7'}}), Expr::repeat(hex, 2, 2)})})});
    const Expr escape = Expr::seq({Expr::literal("\\"), Expr::alt({Expr::cls({{'"', '"'}, {'\\', '\\'}, {'/', '/'},
                                                                             {'b', 'b'}, {'f', 'f'}, {'n', 'n'},
                                                                             {'r', 'r'}, {'t', 't'}}),
                                                                  u_escape})});
    return Expr::alt({Expr::cls(complement_ranges(normalize_ranges({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}}))), escape});
  }

  int32_t builtin(const std::string& name) {
    if (auto it = builtins_.find(name); it != builtins_.end()) return it->second;
    const int32_t id = g_.add_rule_unique(name);
    builtins_[name] = id;
    Expr body;
    if (name == "ws") {
      body = Expr::optional(Expr::alt({Expr::literal(" "), Expr::seq({Expr::literal("\n"),
                                                                      Expr::repeat(Expr::cls({{' ', ' '}, {'\t', '\t'}}), 0, 20)})}));
    } else if (name == "string") {
      body = Expr::seq({Expr::literal("\""), Expr::star(json_char()), Expr::literal("\"")});
    } else if (name == "number") {
      body = json_number_expr({});
    } else if (name == "integer") {
      body = json_integer_expr({});
    } else if (name == "boolean") {
      body = Expr::alt({Expr::literal("true"), Expr::literal("false")});
    } else if (name == "null") {
      body = Expr::literal("null");
    } else if (name == "value") {
      body = Expr::alt({Expr::ref(builtin("object")), Expr::ref(builtin("array")), Expr::ref(builtin("string")),
                        Expr::ref(builtin("number")), Expr::ref(builtin("boolean")), Expr::ref(builtin("null"))});
    } else if (name == "object") {
      body = object_of(Expr::ref(builtin("value")));
    } else if (name == "array") {
      body = list_of(Expr::ref(builtin("value")), 0, -1);
    } else {
      NANOVLLM_ASSERT(false, "unknown builtin ", name);
    }
    g_.set_body(id, std::move(body));
    return id;
  }
  Expr ws() { return Expr::ref(builtin("ws")); }
  Expr sep() { return Expr::seq({ws(), Expr::literal(","), ws()}); }

  // "{" members with free keys "}".
  Expr object_of(Expr value) {
    const Expr member = Expr::seq({Expr::ref(builtin("string")), ws(), Expr::literal(":"), ws(), std::move(value)});
    const Expr members = Expr::seq({member, Expr::star(Expr::seq({sep(), member})), ws()});
    return Expr::seq({Expr::literal("{"), ws(), Expr::optional(members), Expr::literal("}")});
  }
  // "[" between min and max (-1: any number of) items "]".
  Expr list_of(Expr item, int32_t min, int32_t max) {
    if (max == 0) return Expr::seq({Expr::literal("["), ws(), Expr::literal("]")});
    const Expr rest = Expr::repeat(Expr::seq({sep(), item}), std::max(min - 1, 0), max < 0 ? -1 : max - 1);
    const Expr items = Expr::seq({item, rest, ws()});
    return Expr::seq({Expr::literal("["), ws(), min > 0 ? items : Expr::optional(items), Expr::literal("]")});
  }

  // ---- references ------------------------------------------------------------------------------------

  const json& resolve_pointer(const std::string& ref, const std::string& path) const {
    if (ref.empty() || ref[0] != '#')
      fail(path, "$ref '" + ref + "' points outside this schema (only '#...' references are supported)");
    if (ref.size() > 1 && ref[1] != '/') fail(path, "$ref '" + ref + "' uses an anchor (only JSON pointers are supported)");
    const json* cur = &root_;
    size_t pos = 1;
    while (pos < ref.size()) {
      const size_t next = ref.find('/', pos + 1);
      std::string token = ref.substr(pos + 1, next == std::string::npos ? std::string::npos : next - pos - 1);
      pos = next == std::string::npos ? ref.size() : next;
      std::string decoded;  // percent-decoding, then ~1 -> /, ~0 -> ~
      for (size_t i = 0; i < token.size(); ++i) {
        if (token[i] == '%' && i + 2 < token.size() + 0 && std::isxdigit(static_cast<unsigned char>(token[i + 1])) &&
            std::isxdigit(static_cast<unsigned char>(token[i + 2]))) {
          decoded += static_cast<char>(std::stoi(token.substr(i + 1, 2), nullptr, 16));
          i += 2;
        } else {
          decoded += token[i];
        }
      }
      std::string key;
      for (size_t i = 0; i < decoded.size(); ++i) {
        if (decoded[i] == '~' && i + 1 < decoded.size() && (decoded[i + 1] == '0' || decoded[i + 1] == '1')) {
          key += decoded[i + 1] == '0' ? '~' : '/';
          ++i;
        } else {
          key += decoded[i];
        }
      }
      if (cur->is_object() && cur->contains(key)) {
        cur = &(*cur)[key];
      } else if (cur->is_array() && !key.empty() && key.find_first_not_of("0123456789") == std::string::npos &&
                 std::stoul(key) < cur->size()) {
        cur = &(*cur)[std::stoul(key)];
      } else {
        fail(path, "$ref '" + ref + "' does not resolve");
      }
    }
    return *cur;
  }

  int32_t ref_rule(const json& ref, const std::string& path) {
    if (!ref.is_string()) fail(path, "$ref must be a string");
    const std::string r = ref.get<std::string>();
    if (auto it = refs_.find(r); it != refs_.end()) return it->second;
    const json& target = resolve_pointer(r, path);
    const size_t slash = r.rfind('/');
    const int32_t id = g_.add_rule_unique(slash == std::string::npos ? "ref" : r.substr(slash + 1));
    refs_[r] = id;
    g_.set_body(id, value_expr(target, r));
    return id;
  }

  // A schema with its $ref (if it is only a $ref) followed, for merging.
  const json& follow_refs(const json& s, const std::string& path) const {
    const json* cur = &s;
    for (int hops = 0; cur->is_object() && cur->contains("$ref"); ++hops) {
      if (hops > 32) fail(path, "$ref chain longer than 32");
      if (!(*cur)["$ref"].is_string()) fail(path, "$ref must be a string");
      cur = &resolve_pointer((*cur)["$ref"].get<std::string>(), path);
    }
    return *cur;
  }

  // ---- combining schemas -----------------------------------------------------------------------------

  static json type_list(const json& t) { return t.is_array() ? t : json::array({t}); }

  // a AND b as one schema, for the keywords this converter reads; a conflict is an error.
  json merge(const json& a, const json& b, const std::string& path) const {
    if (a.is_boolean() || b.is_boolean()) {
      if ((a.is_boolean() && !a.get<bool>()) || (b.is_boolean() && !b.get<bool>()))
        fail(path, "combining with the schema `false` allows no value");
      return a.is_boolean() ? b : a;
    }
    json out = a;
    for (const auto& [k, v] : b.items()) {
      if (!out.contains(k) || out[k] == v) {
        out[k] = v;
      } else if (annotation_keywords().contains(k)) {
        continue;
      } else if (k == "required") {
        for (const json& r : v)
          if (std::find(out[k].begin(), out[k].end(), r) == out[k].end()) out[k].push_back(r);
      } else if (k == "properties") {
        for (const auto& [p, ps] : v.items())
          out[k][p] = out[k].contains(p) ? merge(follow_refs(out[k][p], path), follow_refs(ps, path), path) : ps;
      } else if (k == "type") {
        json both = json::array();
        for (const json& t : type_list(out[k])) {
          for (const json& u : type_list(v)) {
            if (t == u || (t == "number" && u == "integer")) both.push_back(u);
            else if (t == "integer" && u == "number") both.push_back(t);
          }
        }
        if (both.empty()) fail(path, "combined schemas allow no common type");
        out[k] = both;
      } else if ((k == "minimum" || k == "exclusiveMinimum" || k == "minLength" || k == "minItems") && v.is_number()) {
        out[k] = std::max(out[k].get<double>(), v.get<double>());
      } else if ((k == "maximum" || k == "exclusiveMaximum" || k == "maxLength" || k == "maxItems") && v.is_number()) {
        out[k] = std::min(out[k].get<double>(), v.get<double>());
      } else {
        fail(path, "cannot combine two different '" + k + "' (allOf, or anyOf/oneOf with sibling keywords)");
      }
    }
    return out;
  }

  // Which JSON types a schema can produce (for oneOf's overlap check).
  uint32_t kinds(const json& s0, const std::string& path, int depth = 0) const {
    if (depth > 32) return kAnyType;
    const json& s = follow_refs(s0, path);
    if (s.is_boolean()) return s.get<bool>() ? static_cast<uint32_t>(kAnyType) : 0u;
    if (s.contains("const")) return value_types(s["const"]);
    uint32_t bits = 0;
    if (s.contains("enum") && s["enum"].is_array()) {
      for (const json& v : s["enum"]) bits |= value_types(v);
      return bits;
    }
    for (const char* key : {"anyOf", "oneOf"})
      if (s.contains(key) && s[key].is_array()) {
        for (const json& b : s[key]) bits |= kinds(b, path, depth + 1);
        return bits;
      }
    if (s.contains("type")) {
      for (const json& t : type_list(s["type"]))
        if (t.is_string()) bits |= type_bit(t.get<std::string>());
      if (bits & kNumber) bits |= kInteger;  // a number may be integer-valued
      return bits;
    }
    return inferred_types(s);
  }

  // The values a property may take when the schema pins it down (const / enum), else empty.
  static std::vector<json> pinned_values(const json& s) {
    if (!s.is_object()) return {};
    if (s.contains("const")) return {s["const"]};
    if (s.contains("enum") && s["enum"].is_array()) return s["enum"].get<std::vector<json>>();
    return {};
  }

  // oneOf is generated as anyOf, which is right only when no value matches two branches.
  void check_disjoint(const std::vector<json>& branches, const std::string& path) const {
    for (size_t i = 0; i < branches.size(); ++i) {
      for (size_t j = i + 1; j < branches.size(); ++j) {
        const uint32_t a = kinds(branches[i], path), b = kinds(branches[j], path);
        if ((a & b) == 0) continue;
        if (discriminated(branches[i], branches[j], path)) continue;
        fail(path, "oneOf branches " + std::to_string(i) + " and " + std::to_string(j) +
                       " may match the same value (only oneOf with branches of different types, or objects told "
                       "apart by a required const/enum property, is supported; anyOf is)");
      }
    }
  }
  bool discriminated(const json& a0, const json& b0, const std::string& path) const {
    const json& a = follow_refs(a0, path);
    const json& b = follow_refs(b0, path);
    if (!a.is_object() || !b.is_object() || !a.contains("properties") || !b.contains("properties")) return false;
    auto required = [](const json& s, const std::string& p) {
      return s.contains("required") && std::find(s["required"].begin(), s["required"].end(), p) != s["required"].end();
    };
    for (const auto& [p, ps] : a["properties"].items()) {
      if (!b["properties"].contains(p) || !required(a, p) || !required(b, p)) continue;
      const std::vector<json> va = pinned_values(follow_refs(ps, path));
      const std::vector<json> vb = pinned_values(follow_refs(b["properties"][p], path));
      if (va.empty() || vb.empty()) continue;
      bool overlap = false;
      for (const json& x : va) overlap |= std::find(vb.begin(), vb.end(), x) != vb.end();
      if (!overlap) return true;
    }
    return false;
  }

  // ---- schemas -> expressions ------------------------------------------------------------------------

  static uint32_t inferred_types(const json& s) {
    uint32_t bits = 0;
    if (has_any(s, {"properties", "required", "additionalProperties"})) bits |= kObject;
    if (has_any(s, {"items", "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems"})) bits |= kArray;
    if (has_any(s, {"minLength", "maxLength", "pattern", "format"})) bits |= kString;
    if (has_any(s, {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})) bits |= kNumber | kInteger;
    return bits == 0 ? kAnyType : bits;
  }

  void check_keywords(const json& s, const std::string& path) const {
    for (const auto& [k, v] : s.items()) {
      if (unsupported_keywords().contains(k)) fail(path, "keyword '" + k + "' is not supported");
      if (k == "uniqueItems" && v.is_boolean() && v.get<bool>()) {
        const bool at_most_one = s.contains("maxItems") && s["maxItems"].is_number() && s["maxItems"].get<double>() <= 1;
        if (!at_most_one) fail(path, "keyword 'uniqueItems' (true) is not supported");
      }
    }
  }

  // The schema's expression; `path` is its JSON pointer for errors.
  Expr value_expr(const json& s, const std::string& path) {
    if (++depth_ > 64) fail(path, "schema nested deeper than 64 levels");
    Expr e = value_expr_inner(s, path);
    --depth_;
    return e;
  }

  Expr value_expr_inner(const json& s, const std::string& path) {
    if (s.is_boolean()) {
      if (!s.get<bool>()) fail(path, "the schema `false` allows no value");
      return Expr::ref(builtin("value"));
    }
    if (!s.is_object()) fail(path, "a schema must be an object or a boolean");
    check_keywords(s, path);
    if (s.contains("$ref")) {
      for (const auto& [k, v] : s.items())
        if (k != "$ref" && !annotation_keywords().contains(k) && unsupported_keywords().count(k) == 0 && is_validation_keyword(k))
          fail(path, "'$ref' next to '" + k + "' is not supported");
      return Expr::ref(ref_rule(s["$ref"], path));
    }
    if (s.contains("allOf")) {
      const json& all = s["allOf"];
      if (!all.is_array() || all.empty()) fail(path, "allOf must be a non-empty array");
      json merged = s;
      merged.erase("allOf");
      for (size_t i = 0; i < all.size(); ++i)
        merged = merge(merged, follow_refs(all[i], path), path + "/allOf/" + std::to_string(i));
      return value_expr(merged, path);
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!s.contains(key)) continue;
      if (s.contains("anyOf") && s.contains("oneOf")) fail(path, "anyOf together with oneOf is not supported");
      const json& list = s[key];
      if (!list.is_array() || list.empty()) fail(path, std::string(key) + " must be a non-empty array");
      json siblings = s;
      siblings.erase(key);
      bool constrained = false;
      for (const auto& [k, v] : siblings.items()) constrained |= is_validation_keyword(k);
      std::vector<json> branches;
      for (size_t i = 0; i < list.size(); ++i)
        branches.push_back(constrained ? merge(siblings, follow_refs(list[i], path), path + "/" + key + "/" + std::to_string(i))
                                       : list[i]);
      if (std::string(key) == "oneOf") check_disjoint(branches, path);
      std::vector<Expr> choices;
      for (size_t i = 0; i < branches.size(); ++i)
        choices.push_back(value_expr(branches[i], path + "/" + key + "/" + std::to_string(i)));
      return Expr::alt(std::move(choices));
    }
    const uint32_t allowed = s.contains("type") ? declared_types(s["type"], path) : kAnyType;
    if (s.contains("const") || s.contains("enum")) return enum_expr(s, allowed, path);
    uint32_t types = s.contains("type") ? allowed : inferred_types(s);
    if (types == kAnyType && !s.contains("type")) return Expr::ref(builtin("value"));
    if (types & kNumber) types &= ~kInteger;  // numbers include the integers
    std::vector<Expr> choices;
    if (types & kObject) choices.push_back(object_expr(s, path));
    if (types & kArray) choices.push_back(array_expr(s, path));
    if (types & kString) choices.push_back(string_expr(s, path));
    if (types & (kNumber | kInteger)) choices.push_back(number_expr(s, path, (types & kNumber) == 0));
    if (types & kBoolean) choices.push_back(Expr::ref(builtin("boolean")));
    if (types & kNull) choices.push_back(Expr::ref(builtin("null")));
    return Expr::alt(std::move(choices));
  }

  static bool is_validation_keyword(const std::string& k) {
    static const std::set<std::string> v = {
        "type", "enum", "const", "properties", "required", "additionalProperties", "items", "prefixItems",
        "additionalItems", "minItems", "maxItems", "uniqueItems", "minLength", "maxLength", "pattern", "format",
        "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "anyOf", "oneOf", "allOf", "$ref"};
    return v.contains(k);
  }

  uint32_t declared_types(const json& t, const std::string& path) const {
    uint32_t bits = 0;
    for (const json& name : type_list(t)) {
      if (!name.is_string() || type_bit(name.get<std::string>()) == 0) fail(path, "unknown type " + name.dump());
      bits |= type_bit(name.get<std::string>());
    }
    if (bits == 0) fail(path, "'type' lists no type");
    return bits;
  }

  Expr enum_expr(const json& s, uint32_t allowed, const std::string& path) {
    for (const auto& [k, v] : s.items())
      if (k != "enum" && k != "const" && k != "type" && is_validation_keyword(k))
        fail(path, "enum/const together with '" + k + "' is not supported");
    std::vector<json> values;
    if (s.contains("const")) {
      values.push_back(s["const"]);
      if (s.contains("enum") && std::find(s["enum"].begin(), s["enum"].end(), s["const"]) == s["enum"].end())
        fail(path, "const is not one of enum's values");
    } else {
      if (!s["enum"].is_array()) fail(path, "enum must be an array");
      values = s["enum"].get<std::vector<json>>();
    }
    std::vector<Expr> choices;
    for (const json& v : values)
      if (value_types(v) & allowed) choices.push_back(Expr::literal(v.dump(-1, ' ', false, json::error_handler_t::strict)));
    if (choices.empty()) fail(path, "no enum/const value has an allowed type");
    return Expr::alt(std::move(choices));
  }

  static int32_t count_keyword(const json& s, const char* key, const std::string& path, int32_t fallback) {
    if (!s.contains(key)) return fallback;
    const json& v = s[key];
    if (!v.is_number() || v.get<double>() < 0 || v.get<double>() != static_cast<double>(static_cast<int64_t>(v.get<double>())))
      fail(path, std::string("'") + key + "' must be a non-negative integer");
    if (v.get<double>() > 100000) fail(path, std::string("'") + key + "' larger than 100000 is not supported");
    return static_cast<int32_t>(v.get<double>());
  }

  Expr string_expr(const json& s, const std::string& path) {
    const int32_t min = count_keyword(s, "minLength", path, 0);
    const int32_t max = count_keyword(s, "maxLength", path, -1);
    if (max >= 0 && max < min) fail(path, "maxLength is below minLength");
    const bool has_length = s.contains("minLength") || s.contains("maxLength");
    std::string regex;
    if (s.contains("pattern")) {
      if (!s["pattern"].is_string()) fail(path, "'pattern' must be a string");
      regex = s["pattern"].get<std::string>();
      if (s.contains("format")) fail(path, "'pattern' together with 'format' is not supported");
    } else if (s.contains("format")) {
      if (!s["format"].is_string()) fail(path, "'format' must be a string");
      const char* r = format_regex(s["format"].get<std::string>());
      if (!r) fail(path, "format '" + s["format"].get<std::string>() + "' is not supported");
      regex = r;
    }
    if (!regex.empty()) {
      if (has_length) fail(path, "minLength/maxLength together with a pattern or format is not supported");
      try {
        return Expr::seq({Expr::literal("\""), json_string_escaped(parse_regex(regex)), Expr::literal("\"")});
      } catch (const Error& e) {
        throw e.prefixed("JSON Schema at " + path + ": ");
      }
    }
    if (!has_length) return Expr::ref(builtin("string"));
    return Expr::seq({Expr::literal("\""), Expr::repeat(json_char(), min, max), Expr::literal("\"")});
  }

  Expr number_expr(const json& s, const std::string& path, bool integer) {
    NumberBounds b;
    auto read = [&](const char* key) -> std::optional<double> {
      if (!s.contains(key) || s[key].is_boolean()) return std::nullopt;
      if (!s[key].is_number()) fail(path, std::string("'") + key + "' must be a number");
      return s[key].get<double>();
    };
    const std::optional<double> minimum = read("minimum"), maximum = read("maximum");
    std::optional<double> ex_min = read("exclusiveMinimum"), ex_max = read("exclusiveMaximum");
    // Draft 4: exclusiveMinimum / exclusiveMaximum are booleans modifying minimum / maximum.
    if (s.contains("exclusiveMinimum") && s["exclusiveMinimum"].is_boolean() && s["exclusiveMinimum"].get<bool>())
      ex_min = minimum;
    if (s.contains("exclusiveMaximum") && s["exclusiveMaximum"].is_boolean() && s["exclusiveMaximum"].get<bool>())
      ex_max = maximum;
    if (ex_min && (!minimum || *ex_min >= *minimum)) {
      b.min = ex_min;
      b.min_exclusive = true;
    } else {
      b.min = minimum;
    }
    if (ex_max && (!maximum || *ex_max <= *maximum)) {
      b.max = ex_max;
      b.max_exclusive = true;
    } else {
      b.max = maximum;
    }
    if (!b.min && !b.max) return Expr::ref(builtin(integer ? "integer" : "number"));
    try {
      return integer ? json_integer_expr(b) : json_number_expr(b);
    } catch (const Error& e) {
      throw e.prefixed("JSON Schema at " + path + ": ");
    }
  }

  // A rule for a sub-schema (its own rule keeps positions shared and the grammar readable).
  int32_t schema_rule(const json& s, const std::string& path, const std::string& hint) {
    if (s.is_object() && s.size() == 1 && s.contains("$ref")) return ref_rule(s["$ref"], path);
    const int32_t id = g_.add_rule_unique(hint);
    g_.set_body(id, value_expr(s, path));
    return id;
  }

  Expr object_expr(const json& s, const std::string& path) {
    const json empty = json::object();
    const json& props = s.contains("properties") ? s["properties"] : empty;
    if (!props.is_object()) fail(path, "'properties' must be an object");
    const json additional = s.contains("additionalProperties") ? s["additionalProperties"] : json(true);
    if (!additional.is_boolean() && !additional.is_object()) fail(path, "'additionalProperties' must be a schema");
    const bool additional_allowed = !(additional.is_boolean() && !additional.get<bool>());
    std::vector<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) fail(path, "'required' must be an array");
      for (const json& r : s["required"]) {
        if (!r.is_string()) fail(path, "'required' must list strings");
        required.push_back(r.get<std::string>());
      }
    }
    struct Prop {
      std::string name;
      json schema;
      std::string schema_path;
      bool required;
    };
    std::vector<Prop> list;
    for (const auto& [name, ps] : props.items()) {
      const bool req = std::find(required.begin(), required.end(), name) != required.end();
      list.push_back({name, ps, path + "/properties/" + name, req});
    }
    for (const std::string& r : required) {
      if (props.contains(r)) continue;
      if (!additional_allowed) fail(path, "required property '" + r + "' is not allowed (additionalProperties is false)");
      if (std::none_of(list.begin(), list.end(), [&](const Prop& p) { return p.name == r; }))
        list.push_back({r, additional, path + "/additionalProperties", true});
    }
    // A property whose schema is `false` may not appear.
    std::erase_if(list, [&](const Prop& p) {
      if (p.schema.is_boolean() && !p.schema.get<bool>()) {
        if (p.required) fail(path, "required property '" + p.name + "' has the schema `false`");
        return true;
      }
      return false;
    });
    if (list.empty()) {
      if (!additional_allowed) return Expr::seq({Expr::literal("{"), ws(), Expr::literal("}")});
      const bool any_value = additional.is_boolean() || additional.empty();
      const int32_t value = any_value ? builtin("value") : schema_rule(additional, path + "/additionalProperties", "additional");
      return object_of(Expr::ref(value));
    }
    std::vector<Expr> kvs;
    for (const Prop& p : list) {
      const int32_t value = schema_rule(p.schema, p.schema_path, "prop-" + p.name);
      kvs.push_back(Expr::seq({Expr::literal(json(p.name).dump(-1, ' ', false, json::error_handler_t::strict)), ws(),
                               Expr::literal(":"), ws(), Expr::ref(value)}));
    }
    const size_t n = list.size();
    size_t first_required = n;
    for (size_t i = 0; i < n && first_required == n; ++i)
      if (list[i].required) first_required = i;
    // tail(i): the properties from i on, each after a separator, optional ones skippable.
    auto tail_expr = [&](size_t from, const std::function<Expr(size_t)>& next) {
      if (from == n) return Expr::empty();
      Expr item = Expr::seq({sep(), kvs[from]});
      return Expr::seq({list[from].required ? std::move(item) : Expr::optional(std::move(item)), next(from + 1)});
    };
    std::function<Expr(size_t)> tail;
    if (first_required == 0) {  // one way to start: inline
      tail = [&](size_t from) { return tail_expr(from, tail); };
      return Expr::seq({Expr::literal("{"), ws(), kvs[0], tail(1), ws(), Expr::literal("}")});
    }
    // Several possible first properties: the tails become rules so each is built once.
    std::vector<int32_t> tail_rules(n + 1, -1);
    for (size_t i = n; i-- > 1;) {
      tail_rules[i] = g_.add_rule_unique("object-tail");
      const size_t next_rule = i + 1;
      g_.set_body(tail_rules[i], tail_expr(i, [&](size_t j) { return j < n ? Expr::ref(tail_rules[next_rule]) : Expr::empty(); }));
    }
    std::vector<Expr> starts;
    for (size_t f = 0; f <= std::min(first_required, n - 1); ++f)
      starts.push_back(Expr::seq({kvs[f], f + 1 < n ? Expr::ref(tail_rules[f + 1]) : Expr::empty()}));
    Expr members = Expr::seq({Expr::alt(std::move(starts)), ws()});
    return Expr::seq({Expr::literal("{"), ws(), first_required == n ? Expr::optional(std::move(members)) : std::move(members),
                      Expr::literal("}")});
  }

  Expr array_expr(const json& s, const std::string& path) {
    std::vector<json> prefix;
    json items = true;
    if (s.contains("prefixItems")) {
      if (!s["prefixItems"].is_array()) fail(path, "'prefixItems' must be an array");
      prefix = s["prefixItems"].get<std::vector<json>>();
      if (s.contains("items")) items = s["items"];
    } else if (s.contains("items") && s["items"].is_array()) {  // draft 4-7 tuples
      prefix = s["items"].get<std::vector<json>>();
      if (s.contains("additionalItems")) items = s["additionalItems"];
    } else if (s.contains("items")) {
      items = s["items"];
    }
    if (!items.is_boolean() && !items.is_object()) fail(path, "'items' must be a schema");
    int32_t min = count_keyword(s, "minItems", path, 0);
    int32_t max = count_keyword(s, "maxItems", path, -1);
    const bool extra_allowed = !(items.is_boolean() && !items.get<bool>());
    const auto num_prefix = static_cast<int32_t>(prefix.size());
    if (!extra_allowed && (max < 0 || max > num_prefix)) max = num_prefix;
    if (max >= 0 && max < min) fail(path, "no array length satisfies minItems/maxItems (and items: false)");
    if (max >= 0 && max < num_prefix) prefix.resize(static_cast<size_t>(max));
    const auto positions = static_cast<int32_t>(prefix.size());
    std::vector<int32_t> prefix_rules;
    for (int32_t i = 0; i < positions; ++i) {
      const json& ps = prefix[static_cast<size_t>(i)];
      if (ps.is_boolean() && !ps.get<bool>()) {  // no item may stand here: the array ends before it
        if (min > i) fail(path, "prefixItems[" + std::to_string(i) + "] is `false` but minItems requires it");
        max = i;
        break;
      }
      prefix_rules.push_back(schema_rule(ps, path + "/prefixItems/" + std::to_string(i), "item-" + std::to_string(i)));
    }
    const auto p = static_cast<int32_t>(prefix_rules.size());
    const bool more = extra_allowed && (max < 0 || max > p) && p == positions;
    const int32_t item_rule = more ? schema_rule(items, path + "/items", "item") : -1;
    if (max == 0 || (p == 0 && !more)) {
      if (min > 0) fail(path, "minItems cannot be met");
      return Expr::seq({Expr::literal("["), ws(), Expr::literal("]")});
    }
    // After the prefix: extra items, each after a separator.
    Expr rest = Expr::empty();
    if (more) {
      const int32_t lo = std::max(min - p, 0), hi = max < 0 ? -1 : max - p;
      rest = Expr::repeat(Expr::seq({sep(), Expr::ref(item_rule)}), lo, hi);
    } else if (min > p) {
      fail(path, "minItems cannot be met");
    }
    // Positions p-1 .. 1, each after a separator; optional past minItems.
    for (int32_t i = p - 1; i >= 1; --i) {
      Expr item = Expr::seq({sep(), Expr::ref(prefix_rules[static_cast<size_t>(i)]), std::move(rest)});
      rest = i < min ? std::move(item) : Expr::optional(std::move(item));
    }
    Expr list;
    if (p > 0) {
      list = Expr::seq({Expr::ref(prefix_rules[0]), std::move(rest)});
    } else {  // no prefix: item (sep item){min-1, max-1}
      list = Expr::seq({Expr::ref(item_rule), Expr::repeat(Expr::seq({sep(), Expr::ref(item_rule)}),
                                                           std::max(min - 1, 0), max < 0 ? -1 : max - 1)});
    }
    Expr items_ws = Expr::seq({std::move(list), ws()});
    return Expr::seq({Expr::literal("["), ws(), min > 0 ? std::move(items_ws) : Expr::optional(std::move(items_ws)),
                      Expr::literal("]")});
  }
};

}  // namespace

Grammar json_schema_grammar(const nlohmann::ordered_json& schema) { return SchemaConverter(schema).run(); }

Grammar json_schema_grammar(std::string_view schema_text) {
  nlohmann::ordered_json schema;
  try {
    schema = nlohmann::ordered_json::parse(schema_text);
  } catch (const nlohmann::ordered_json::exception& e) {
    NANOVLLM_FAIL("JSON Schema is not valid JSON: ", e.what());
  }
  return json_schema_grammar(schema);
}

Grammar json_object_grammar() {
  const nlohmann::ordered_json none;
  return SchemaConverter(none).any(true);
}

Grammar json_value_grammar() {
  const nlohmann::ordered_json none;
  return SchemaConverter(none).any(false);
}

}  // namespace nanovllm::grammar
