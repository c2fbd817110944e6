// Tree-walking interpreter: renders a parsed Program against a context of variables, with jinja2's
// scoping (a fresh scope per loop iteration and per macro call; `set` writes the innermost scope).
#pragma once

#include <string>
#include <unordered_map>

#include "nanovllm/chat/jinja_ast.h"

namespace nanovllm::chat::jinja {

using Context = std::unordered_map<std::string, Value>;

// Renders `program` with `context` (template variables and globals such as raise_exception).
// Throws nanovllm::Error with the template position on any render-time error.
std::string render_program(const Program& program, Context context);

}  // namespace nanovllm::chat::jinja
