// Python/jinja2 semantics of the interpreter's operations: attribute and item access, slicing,
// operators, membership, and the built-in filters, tests and str/dict/list methods.
// All failures throw TemplateError (the caller adds the template position).
#pragma once

#include <string>

#include "nanovllm/chat/jinja_value.h"

namespace nanovllm::chat::jinja {

// jinja2 environment.getattr / getitem (getattr falls back to getitem and vice versa).
Value get_attr(const Value& obj, const std::string& name);
Value get_item(const Value& obj, const Value& key);
// obj[start:stop:step] for lists and strings (None / Undefined parts mean "omitted").
Value slice_value(const Value& obj, const Value& start, const Value& stop, const Value& step);
// The items a for-loop / filter iterates: list elements, dict keys, string characters, nothing for
// Undefined.
List iterate(const Value& v);
// Python "item in container".
bool contains(const Value& container, const Value& item);
// + - * / // % ** and ~.
Value binary_op(const std::string& op, const Value& a, const Value& b);
// == != < > <= >= in notin.
bool compare_op(const std::string& op, const Value& a, const Value& b);
// Python len() (code points for strings); Undefined has length 0.
int64_t length_of(const Value& v);

Value apply_filter(const std::string& name, const Value& v, const CallArgs& args);
bool apply_test(const std::string& name, const Value& v, const CallArgs& args);

// Raises the error a use of an Undefined value raises in jinja2.
[[noreturn]] void fail_undefined(const Value& v);

}  // namespace nanovllm::chat::jinja
