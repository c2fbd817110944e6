// JSON Schema -> Grammar: the grammar of JSON texts that validate against the schema (a subset of them
// where the schema allows more than a grammar can say cheaply; never a text that fails validation).
//
// Supported keywords: type (a name or a list), enum, const, properties, required, additionalProperties,
// items (a schema, false, or draft-4..7's list), prefixItems, additionalItems, minItems, maxItems,
// uniqueItems (false, or with maxItems <= 1), minLength, maxLength, pattern (regex.h; not together with a
// length), format (date, time, date-time, email, uuid, ipv4, ipv6, hostname, uri), minimum, maximum,
// exclusiveMinimum, exclusiveMaximum (a number bound between whole numbers is rounded inward), anyOf, oneOf (branches that cannot
// overlap: different types, or objects told apart by a required const/enum property), allOf (merged),
// $ref to the same document (#, #/$defs/..., #/definitions/..., any JSON pointer) with recursion, $defs /
// definitions, and the annotations (title, description, default, examples, ...), which change nothing.
// A validation keyword outside this list (not, if/then/else, patternProperties, multipleOf,
// minProperties, contains, ...) is an Error naming it and where it is: never silently dropped. Keywords
// that are not JSON Schema at all are ignored, as validators ignore them.
//
// Choices made for generation: properties come in the schema's order; an object with `properties` gets
// no other keys (with additionalProperties a schema and no properties, keys are free); whitespace between
// tokens is at most one space or a newline plus up to 20 spaces/tabs (pretty-printed output fits; a weak
// model cannot pad forever); the whole text is the JSON value with no whitespace around it.
#pragma once

#include <string_view>

#include <nlohmann/json.hpp>

#include "nanovllm/grammar/grammar.h"

namespace nanovllm::grammar {

// Throws nanovllm::Error ("JSON Schema at #/properties/x: ...") for invalid or unsupported schemas. An
// ordered_json keeps the properties in the order the schema lists them.
Grammar json_schema_grammar(const nlohmann::ordered_json& schema);
// `schema_text` is JSON text (an Error names the parse failure).
Grammar json_schema_grammar(std::string_view schema_text);
// Any JSON object (response_format json_object), or any JSON value.
Grammar json_object_grammar();
Grammar json_value_grammar();

}  // namespace nanovllm::grammar
