// Round trips of the official OpenAI Node SDK against a running `nanovllm serve` (a tiny random-weight
// model, so texts are noise: the checks are about the protocol). Started by tests/server/openai_sdk_test.cpp:
//   node sdk_roundtrip.mjs BASE_URL API_KEY MODEL_ID MODEL_PATH [--only NAME | --skip NAME]
// Prints one line per check ("ok NAME" / "FAIL NAME: why") and exits 1 if any failed, 2 on a time-out.
import OpenAI from 'openai';
import { zodResponseFormat } from 'openai/helpers/zod';
import { z } from 'zod';

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
  const badSchema = { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', not: {} } } };
  await refused(() => client.chat.completions.create({ ...base, response_format: badSchema }), 400, 'response_format');
  await refused(() => client.chat.completions.create({ ...base, tool_choice: 'required' }), 400, 'tool_choice');
  await refused(() => client.chat.completions.create({ ...base, reasoning_effort: 'low' }), 400, 'reasoning_effort');
  await refused(() => client.completions.create({ model: modelId, prompt: 'a', max_tokens: 2, best_of: 3 }), 400, 'best_of');
  await refused(() => client.completions.create({ model: modelId, prompt: 'a', max_tokens: 2, suffix: 'z' }), 400, 'suffix');
  // Values that ask for nothing pass.
  await client.chat.completions.create({ ...base, response_format: { type: 'text' }, user: 'u1', store: false });
});

// Structured outputs (the server runs with --reasoning-parser qwen3; thinking is off unless a check turns it on).
const noThinking = { chat_template_kwargs: { enable_thinking: false } };
const Verdict = z.object({ answer: z.string().max(6), score: z.number().int().min(1).max(5), sure: z.boolean() });

// A random model may run out of tokens inside a string: then the SDK's parse refuses (LengthFinishReasonError).
async function firstFinished(make) {
  for (let seed = 0; seed < 6; ++seed) {
    try {
      return await make(seed);
    } catch (e) {
      if (!(e instanceof OpenAI.LengthFinishReasonError)) throw e;
    }
  }
  throw new Error('every seed ran out of tokens');
}

await check('chat.completions.parse with a zod schema', async () => {
  const r = await firstFinished((seed) => client.chat.completions.parse({
    model: modelId, messages: user, max_tokens: 120, seed, temperature: 1,
    response_format: zodResponseFormat(Verdict, 'verdict'), ...noThinking,
  }));
  const parsed = r.choices[0].message.parsed;
  expect(parsed !== null && typeof parsed === 'object', JSON.stringify(r.choices[0].message));
  expect(Verdict.safeParse(parsed).success, `zod rejects ${JSON.stringify(parsed)}`);
  expect(r.choices[0].finish_reason === 'stop', `finish_reason ${r.choices[0].finish_reason}`);
});

await check('tool_choice required: streamed tool calls', async () => {
  const weatherTool = [{
    type: 'function',
    function: { name: 'get_weather', description: 'Current weather in a city',
                parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 10 } }, required: ['city'] } },
  }];
  const stream = client.chat.completions.stream({
    model: modelId, messages: [{ role: 'user', content: 'Weather in Paris?' }], tools: weatherTool,
    // One call (a random model would go on with more calls until max_tokens).
    tool_choice: 'required', parallel_tool_calls: false, max_tokens: 120, seed: 3, temperature: 1, ...noThinking,
  });
  let sawName = false, pieces = 0;
  stream.on('chunk', (chunk) => {
    for (const d of chunk.choices[0]?.delta?.tool_calls ?? []) {
      if (d.function?.name) sawName = true;
      if (d.function?.arguments) pieces += 1;
    }
  });
  const final = await stream.finalChatCompletion();
  const choice = final.choices[0];
  expect(choice.finish_reason === 'tool_calls', `finish_reason ${choice.finish_reason}`);
  const calls = choice.message.tool_calls;
  expect(calls && calls.length >= 1 && calls[0].function.name === 'get_weather', JSON.stringify(choice.message));
  const args = JSON.parse(calls[0].function.arguments);
  expect(typeof args.city === 'string' && args.city.length <= 10, calls[0].function.arguments);
  expect(sawName && pieces > 1, `name seen ${sawName}, argument pieces ${pieces}`);
  // Non-streamed, a named function.
  const r = await client.chat.completions.create({
    model: modelId, messages: [{ role: 'user', content: 'Weather?' }], tools: weatherTool, max_tokens: 120, seed: 4,
    tool_choice: { type: 'function', function: { name: 'get_weather' } }, ...noThinking,
  });
  expect(r.choices[0].finish_reason === 'tool_calls' && r.choices[0].message.tool_calls.length === 1, JSON.stringify(r.choices[0]));
  expect(r.choices[0].message.tool_calls[0].id.startsWith('call_'), r.choices[0].message.tool_calls[0].id);
});

await check('reasoning_content', async () => {
  // Thinking on; logit_bias opens <think> (151667) and, a little less, closes it (151668): a random model
  // reasons a few tokens, then answers under the schema.
  const thinking = { logit_bias: { 151667: 100, 151668: 97 }, response_format: zodResponseFormat(Verdict, 'verdict') };
  let found = false;
  for (let seed = 0; seed < 6 && !found; ++seed) {
    const r = await client.chat.completions.create({ model: modelId, messages: user, max_tokens: 150, seed, temperature: 1, ...thinking });
    const m = r.choices[0].message;
    if (r.choices[0].finish_reason !== 'stop') continue;
    expect(Verdict.safeParse(JSON.parse(m.content)).success, `content ${m.content}`);
    if (typeof m.reasoning_content !== 'string') continue;
    found = true;
    const stream = await client.chat.completions.create({ model: modelId, messages: user, max_tokens: 150, seed, temperature: 1,
                                                          stream: true, ...thinking });
    let reasoning = '', content = '';
    for await (const chunk of stream) {
      reasoning += chunk.choices[0]?.delta?.reasoning_content ?? '';
      content += chunk.choices[0]?.delta?.content ?? '';
    }
    expect(reasoning === m.reasoning_content, `streamed reasoning ${JSON.stringify(reasoning)} vs ${JSON.stringify(m.reasoning_content)}`);
    expect(content === m.content, `streamed content ${JSON.stringify(content)} vs ${JSON.stringify(m.content)}`);
  }
  expect(found, 'no seed gave reasoning_content');
});

await check('errors are OpenAI errors', async () => {
  await refused(() => client.chat.completions.create({ model: 'gpt-nothing', messages: user }), 404);
  await refused(() => client.chat.completions.create({ model: modelId, messages: user, temperature: -1 }), 400, 'temperature');
  const stranger = new OpenAI({ baseURL, apiKey: 'sk-wrong', maxRetries: 0 });
  await refused(() => stranger.models.list(), 401);
});

console.log(failed ? `${failed} check(s) failed` : 'all checks passed');
process.exit(failed ? 1 : 0);
