// Every schema of the JSON-Schema-Test-Suite (npm json-schema-test-suite, draft 4, the required tests) as a
// structured-output constraint against a running `nanovllm serve` with a random-weight model: the server
// either refuses the schema with a 400 naming what it does not support, or every answer that finishes with
// "stop" must parse and validate with ajv (an independent validator). Answers cut off by max_tokens are
// retried with another seed. Started by tests/server/openai_sdk_test.cpp:
//   node schema_suite.mjs BASE_URL API_KEY
// Prints a report (supported / refused by keyword / validated / cut off) and exits 1 on any invalid answer
// or when fewer schemas than expected are supported.
import { createRequire } from 'node:module';
import Ajv04 from 'ajv-draft-04';
import addFormats from 'ajv-formats';

const require = createRequire(import.meta.url);
const suite = require('json-schema-test-suite');
const [baseURL, apiKey] = process.argv.slice(2);
setTimeout(() => {
  console.log('FAIL time-out: the schema suite took longer than 600 s');
  process.exit(2);
}, 600000).unref();

const ajv = new Ajv04({ strict: false, allErrors: true });
addFormats(ajv);

async function complete(schema, seed) {
  const r = await fetch(`${baseURL}/completions`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${apiKey}` },
    body: JSON.stringify({ prompt: 'JSON:', max_tokens: 160, temperature: 1.0, seed,
                           structured_outputs: { json: schema } }),
  });
  return { status: r.status, body: await r.json() };
}

const groups = [];
for (const file of suite.draft4()) for (const g of file.schemas) groups.push({ file: file.file, ...g });

let supported = 0, validated = 0, failed = 0;
const cutOff = [];
const refused = new Map();  // reason -> count
async function run(g) {
  const name = `${g.file}: ${g.description}`;
  // Two seeds: the random-weight model's long answers (open objects and arrays, long strings) stay long, and the
  // 10 of 58 schemas cut off on every seed were two thirds of the suite's tokens with three seeds of 200 tokens.
  for (let attempt = 0; attempt < 2; ++attempt) {
    const { status, body } = await complete(g.schema, 1000 + attempt);
    if (status === 400) {
      const msg = body.error?.message ?? '';
      const kw = msg.match(/keyword '([^']+)'/)?.[1] ?? msg.replace(/^.*?: /, '').slice(0, 60);
      refused.set(kw, (refused.get(kw) ?? 0) + 1);
      return;
    }
    supported += attempt === 0 ? 1 : 0;
    if (status !== 200) {
      console.log(`FAIL ${name}: status ${status} ${JSON.stringify(body)}`);
      failed += 1;
      return;
    }
    const choice = body.choices[0];
    if (choice.finish_reason === 'length') continue;  // cut off: another seed
    let value;
    try {
      value = JSON.parse(choice.text);
    } catch (e) {
      console.log(`FAIL ${name}: not JSON: ${JSON.stringify(choice.text)}`);
      failed += 1;
      return;
    }
    if (!ajv.validate(g.schema, value)) {
      console.log(`FAIL ${name}: ${JSON.stringify(choice.text)} is invalid: ${ajv.errorsText(ajv.errors)}`);
      failed += 1;
      return;
    }
    validated += 1;
    return;
  }
  cutOff.push(name);
}
// 16 schemas in flight at a time: the engine batches them.
const queue = [...groups];
await Promise.all(Array.from({ length: 16 }, async () => {
  while (queue.length > 0) await run(queue.shift());
}));

console.log(`schemas: ${groups.length} (draft 4, required tests); supported ${supported}, refused ${groups.length - supported}`);
console.log(`answers: ${validated} validated with ajv, ${cutOff.length} cut off by max_tokens on every seed, ${failed} failed`);
if (cutOff.length > 0) console.log(`cut off: ${cutOff.join(' | ')}`);
console.log(`refused by reason: ${JSON.stringify(Object.fromEntries([...refused].sort((a, b) => b[1] - a[1])))}`);
// Regressions in coverage fail too: the subset supported today.
const minSupported = 58;
if (supported < minSupported) {
  console.log(`FAIL coverage: ${supported} schemas supported, expected at least ${minSupported}`);
  process.exit(1);
}
if (failed > 0 || validated === 0) process.exit(1);
console.log('all checks passed');
