#include "eval/templates.h"

#include "nanovllm/core/error.h"

namespace nanovllm::eval::templates {

const std::string_view kNiah =
    "Some special magic {type_needle_v} are hidden within the following text. Make sure to memorize it. "
    "I will quiz you about the {type_needle_v} afterwards.\n{context}\n"
    "What are all the special magic {type_needle_v} for {query} mentioned in the provided text?";
const std::string_view kNiahAnswerPrefix =
    " The special magic {type_needle_v} for {query} mentioned in the provided text are";
const std::string_view kNiahNeedle = "One of the special magic {type_needle_v} for {key} is: {value}.";

// "assgined" is RULER's spelling.
const std::string_view kVariableTracking =
    "Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n{context}\n"
    "Question: Find all variables that are assigned the value {query} in the text above.";
const std::string_view kVariableTrackingAnswerPrefix =
    " Answer: According to the chain(s) of variable assignment in the text above, {num_v} variables are "
    "assgined the value {query}, they are: ";

const std::string_view kCommonWords =
    "Below is a numbered list of words. In these words, some appear more often than others. Memorize the "
    "ones that appear most often.\n{context}\nQuestion: What are the 10 most common words in the above list?";
const std::string_view kCommonWordsAnswerPrefix = " Answer: The top 10 words that appear most often in the list are:";

const std::string_view kFreqWords =
    "Read the following coded text and track the frequency of each coded word. Find the three most "
    "frequently appeared coded words. {context}\nQuestion: Do not provide any explanation. Please ignore "
    "the dots '....'. What are the three most frequently appeared words in the above coded text?";
const std::string_view kFreqWordsAnswerPrefix =
    " Answer: According to the coded text above, the three most frequently appeared words are:";

const std::string_view kNoise =
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.";

std::string format(std::string_view tmpl, std::initializer_list<std::pair<std::string_view, std::string_view>> fields) {
  std::string out;
  size_t i = 0;
  while (i < tmpl.size()) {
    const size_t open = tmpl.find('{', i);
    if (open == std::string_view::npos) break;
    const size_t close = tmpl.find('}', open);
    NANOVLLM_CHECK(close != std::string_view::npos, "eval template: unclosed '{' in '", tmpl, "'");
    out.append(tmpl, i, open - i);
    const std::string_view name = tmpl.substr(open + 1, close - open - 1);
    bool found = false;
    for (const auto& [key, value] : fields) {
      if (key == name) {
        out.append(value);
        found = true;
        break;
      }
    }
    NANOVLLM_CHECK(found, "eval template: no value for field '{", name, "}'");
    i = close + 1;
  }
  out.append(tmpl.substr(i));
  return out;
}

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  size_t i = 0;
  for (size_t at; (at = s.find(from, i)) != std::string_view::npos; i = at + from.size()) {
    out.append(s, i, at - i);
    out.append(to);
  }
  out.append(s.substr(i));
  return out;
}

}  // namespace nanovllm::eval::templates
