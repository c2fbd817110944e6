// Round trips of the official OpenAI Node SDK against a running `nanovllm serve` (a tiny random-weight
// model, so texts are noise: the checks are about the protocol). Started by tests/server/openai_sdk_test.cpp:
//   node sdk_roundtrip.mjs BASE_URL API_KEY MODEL_ID MODEL_PATH [--only NAME | --skip NAME]
// Prints one line per check ("ok NAME" / "FAIL NAME: why") and exits 1 if any failed, 2 on a time-out.
import OpenAI from 'openai';

const [baseURL, apiKey, modelId, modelPath, mode, selected] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, timeout: 30000, maxRetries: 0 });
setTimeout(() => {
  console.log('FAIL time-out: the round trips took longer than 120 s');
  process.exit(2);
}, 120000).unref();

let failed = 0;
async function check(name, fn) {
  if ((mode === '--only' && name !== selected) || (mode === '--skip' && name === selected)) return;
  try {
    await fn();
    console.log(`ok ${name}`);
  } catch (e) {
    failed += 1;
    console.log(`FAIL ${name}: ${e && e.stack ? e.stack.split('\n').slice(0, 3).join(' | ') : e}`);
  }
}
function expect(cond, what) {
  if (!cond) throw new Error(what);
}
// An SDK call that must be refused with `status`, naming `param` when given.
async function refused(call, status, param) {
  try {
    await call();
  } catch (e) {
    expect(e instanceof OpenAI.APIError, `not an APIError: ${e}`);
    expect(e.status === status, `status ${e.status}, expected ${status}: ${e.message}`);
    if (param !== undefined) expect(e.param === param, `param ${e.param}, expected ${param}`);
    return;
  }
  throw new Error(`accepted, expected ${status}`);
}

const user = [{ role: 'user', content: 'Say hi.' }];
const tools = [{
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Current weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
}];

await check('models.list', async () => {
  const page = await client.models.list();
  const ids = page.data.map((m) => m.id);
  expect(ids.includes(modelId) && ids.includes(modelPath), `ids ${JSON.stringify(ids)}`);
});

await check('models.retrieve', async () => {
  for (const id of [modelId, modelPath]) {  // the path's slashes travel percent-encoded
    const m = await client.models.retrieve(id);
    expect(m.id === id && m.object === 'model', JSON.stringify(m));
  }
  await refused(() => client.models.retrieve('no-such-model'), 404);
});

await check('chat.completions', async () => {
  const r = await client.chat.completions.create({ model: modelId, messages: user, max_tokens: 4, temperature: 0 });
  expect(r.object === 'chat.completion', `object ${r.object}`);
  expect(r.choices.length === 1 && r.choices[0].message.role === 'assistant', JSON.stringify(r.choices));
  expect(typeof r.choices[0].message.content === 'string', 'content is not a string');
  expect(['stop', 'length'].includes(r.choices[0].finish_reason), `finish_reason ${r.choices[0].finish_reason}`);
  expect(r.usage.completion_tokens >= 1 && r.usage.completion_tokens <= 4, JSON.stringify(r.usage));
});

await check('chat.completions stream', async () => {
  const stream = await client.chat.completions.create({
    model: modelId, messages: user, max_tokens: 5, temperature: 0, stream: true,
    stream_options: { include_usage: true }, logprobs: true, top_logprobs: 2,
  });
  let text = '', finish = null, usage = null, role = null;
  for await (const chunk of stream) {
    expect(chunk.object === 'chat.completion.chunk', `object ${chunk.object}`);
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      if (c.delta.role) role = c.delta.role;
      text += c.delta.content ?? '';
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  expect(role === 'assistant', `role ${role}`);
  expect(finish === 'length' || finish === 'stop', `finish ${finish}`);
  expect(usage && usage.completion_tokens >= 1, `usage ${JSON.stringify(usage)}`);
  // The stream's text equals the non-streamed one (greedy).
  const whole = await client.chat.completions.create({ model: modelId, messages: user, max_tokens: 5, temperature: 0 });
  expect(whole.choices[0].message.content === text, `${JSON.stringify(text)} vs ${JSON.stringify(whole.choices[0].message.content)}`);
});

await check('completions', async () => {
  const r = await client.completions.create({ model: modelId, prompt: 'Once upon a time', max_tokens: 4, temperature: 0, n: 2 });
  expect(r.object === 'text_completion' && r.choices.length === 2, JSON.stringify(r));
  expect(r.usage.completion_tokens >= 2, JSON.stringify(r.usage));
});

await check('completions stream', async () => {
  const stream = await client.completions.create({ model: modelId, prompt: [1000, 2000, 3000], max_tokens: 4, temperature: 0, stream: true });
  let text = '', finish = null;
  for await (const chunk of stream) {
    text += chunk.choices[0]?.text ?? '';
    if (chunk.choices[0]?.finish_reason) finish = chunk.choices[0].finish_reason;
  }
  expect(finish !== null, 'no finish_reason');
  const whole = await client.completions.create({ model: modelId, prompt: [1000, 2000, 3000], max_tokens: 4, temperature: 0 });
  expect(whole.choices[0].text === text, `${JSON.stringify(text)} vs ${JSON.stringify(whole.choices[0].text)}`);
});

await check('tools request', async () => {
  const r = await client.chat.completions.create({
    model: modelId, messages: [{ role: 'user', content: 'Weather in Paris?' }], tools, tool_choice: 'auto', max_tokens: 4,
  });
  expect(r.choices.length === 1, JSON.stringify(r));
});

// The assistant's tool call goes back with content: null, then the tool's answer (the chat template renders
// both: the other half of the round trip).
await check('tools round trip', async () => {
  const r = await client.chat.completions.create({
    model: modelId, tools, max_tokens: 4,
    messages: [
      { role: 'user', content: 'Weather in Paris?' },
      { role: 'assistant', content: null,
        tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Paris"}' } }] },
      { role: 'tool', tool_call_id: 'call_1', content: '{"temperature_c": 21}' },
    ],
  });
  expect(r.choices.length === 1 && typeof r.choices[0].message.content === 'string', JSON.stringify(r));
});

await check('unsupported parameters are refused by name', async () => {
  const base = { model: modelId, messages: user, max_tokens: 2 };
  await refused(() => client.chat.completions.create({ ...base, response_format: { type: 'json_object' } }), 400, 'response_format');
  await refused(() => client.chat.completions.create({ ...base, tools, tool_choice: 'required' }), 400, 'tool_choice');
  await refused(() => client.chat.completions.create({ ...base, reasoning_effort: 'low' }), 400, 'reasoning_effort');
  await refused(() => client.completions.create({ model: modelId, prompt: 'a', max_tokens: 2, best_of: 3 }), 400, 'best_of');
  await refused(() => client.completions.create({ model: modelId, prompt: 'a', max_tokens: 2, suffix: 'z' }), 400, 'suffix');
  // Values that ask for nothing pass.
  await client.chat.completions.create({ ...base, response_format: { type: 'text' }, user: 'u1', store: false });
});

await check('errors are OpenAI errors', async () => {
  await refused(() => client.chat.completions.create({ model: 'gpt-nothing', messages: user }), 404);
  await refused(() => client.chat.completions.create({ model: modelId, messages: user, temperature: -1 }), 400, 'temperature');
  const stranger = new OpenAI({ baseURL, apiKey: 'sk-wrong', maxRetries: 0 });
  await refused(() => stranger.models.list(), 401);
});

console.log(failed ? `${failed} check(s) failed` : 'all checks passed');
process.exit(failed ? 1 : 0);
