// Checks that HF `tokenizers` (Rust core, Node binding) and our tokenizer read the retrieval fixture's
// byte-level tokenizer.json alike: same ids for every case, id == byte for plain text, specials as one id,
// and decode(encode(text)) == text.
//
//   mkdir -p /tmp/tokoracle && (cd /tmp/tokoracle && npm install tokenizers@0.23.2)
//   NODE_PATH=/tmp/tokoracle/node_modules node scripts/check_byte_tokenizer.mjs build/cpu/tools/nanovllm
import { createRequire } from 'module';
import { execFileSync } from 'child_process';
import fs from 'fs';
import os from 'os';
import path from 'path';
import { fileURLToPath } from 'url';

const require = createRequire(import.meta.url);
const { Tokenizer } = require(process.env.NODE_PATH ? path.join(process.env.NODE_PATH, 'tokenizers') : 'tokenizers');

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const modelDir = path.join(root, 'tests/data/retrieval-model');
const binary = process.argv[2] || path.join(root, 'build/cpu/tools/nanovllm');
const tok = Tokenizer.fromString(fs.readFileSync(path.join(modelDir, 'tokenizer.json'), 'utf8'));

const cases = [
  'Hello, world!',
  ' leading space and  two spaces\n\ttab',
  'One of the special magic numbers for tasteful-blanket is: 4718292.',
  'ünïcödé 你好 🙂 عربى',
  'specials: <|endoftext|> <|im_start|>user\nhi<|im_end|>',
  '<|endoftext|><|endoftext|>',
  '\u0000\u0001\u001f control \u007f',
  'a'.repeat(5000) + ' ' + 'The grass is green. '.repeat(300),
];
const bytesOf = (s) => Array.from(Buffer.from(s, 'utf8'));

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'bytetok-'));
fs.writeFileSync(path.join(tmp, 'cases.json'), JSON.stringify(cases));
const ours = JSON.parse(execFileSync(binary, ['tokenize', '--model', modelDir, '--input-json', path.join(tmp, 'cases.json')],
                                     { maxBuffer: 1 << 28 }).toString());
let failures = 0;
for (let i = 0; i < cases.length; ++i) {
  const hf = Array.from((await tok.encode(cases[i], null, { addSpecialTokens: true })).getIds());
  const same = hf.length === ours[i].length && hf.every((v, j) => v === ours[i][j]);
  const decoded = await tok.decode(hf, false);
  if (!same) { console.log(`case ${i}: ids differ\n  hf   ${hf.slice(0, 40)}\n  ours ${ours[i].slice(0, 40)}`); ++failures; }
  if (decoded !== cases[i]) { console.log(`case ${i}: decode(encode(text)) != text`); ++failures; }
  if (!cases[i].includes('<|')) {
    const b = bytesOf(cases[i]);
    if (b.length !== hf.length || !b.every((v, j) => v === hf[j])) { console.log(`case ${i}: ids are not the bytes`); ++failures; }
  }
}
const sp = Array.from((await tok.encode('<|endoftext|>', null, {})).getIds());
if (sp.length !== 1 || sp[0] !== 256) { console.log(`<|endoftext|> -> ${sp}, expected [256]`); ++failures; }
fs.rmSync(tmp, { recursive: true });
console.log(failures === 0 ? `ok: ${cases.length} cases, HF == ours, id == byte` : `${failures} failures`);
process.exit(failures === 0 ? 0 : 1);
