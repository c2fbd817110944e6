// Golden ids for the C++ tokenizer, from the HF `tokenizers` Rust core (Node binding, same ids as Python).
//
//   mkdir -p /tmp/tokoracle && cd /tmp/tokoracle && npm install tokenizers@0.23.2
//   NODE_PATH=/tmp/tokoracle/node_modules node scripts/tokenizer_golden.mjs            # writes goldens
//   NODE_PATH=/tmp/tokoracle/node_modules node scripts/tokenizer_golden.mjs --bench F  # HF encode MB/s on F
//   NODE_PATH=... node scripts/tokenizer_golden.mjs --ids F OUT.bin   # HF ids of F, line by line, int32
//
// Reads tests/data/tokenizer/corpus.json (hand-written cases), adds random Unicode strings generated with a
// fixed seed (the strings themselves land in the golden file, so the repo never needs this script to test),
// and writes tests/data/tokenizer/qwen3_golden.json:
//   cases:        {name, text, nfc, ids, decoded, decoded_skip}   encode(text) and decode of those ids
//   decode_cases: {ids, decoded, decoded_skip}                    random id runs (partial UTF-8 bytes, specials)
//   variant:      {added_tokens, cases:[{name, text, ids}]}        extra added tokens exercising lstrip/rstrip/
//                                                                 single_word/normalized, appended to Qwen's
import { createRequire } from 'module';
import fs from 'fs';
import path from 'path';
import { fileURLToPath } from 'url';

const require = createRequire(import.meta.url);
const { Tokenizer } = require(process.env.NODE_PATH ? path.join(process.env.NODE_PATH, 'tokenizers') : 'tokenizers');

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const tokPath = path.join(root, 'tests/data/qwen3-tokenizer/tokenizer.json');
const tokJson = fs.readFileSync(tokPath, 'utf8');
const tok = Tokenizer.fromString(tokJson);

// mulberry32: tiny deterministic PRNG so the random cases are reproducible.
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

async function encodeCase(t, text) {
  const e = await t.encode(text, null, { addSpecialTokens: true });
  return Array.from(e.getIds());
}

if (process.argv[2] === '--ids') {
  // --ids CORPUS OUT: encode CORPUS line by line ("\n" kept), write all ids as little-endian int32 to OUT
  // (compare with `tokenizer_bench --dump-ids`).
  const lines = fs.readFileSync(process.argv[3], 'utf8').split(/(?<=\n)/);
  const ids = [];
  for (const l of lines) for (const id of (await tok.encode(l, null, { addSpecialTokens: true })).getIds()) ids.push(id);
  fs.writeFileSync(process.argv[4], Buffer.from(new Int32Array(ids).buffer));
  console.log(JSON.stringify({ lines: lines.length, ids: ids.length }));
  process.exit(0);
}

if (process.argv[2] === '--bench') {
  const text = fs.readFileSync(process.argv[3], 'utf8');
  const bytes = Buffer.byteLength(text, 'utf8');
  // Chunks of ~4 KiB lines, like prompts; one encode call at a time (single thread).
  const chunks = [];
  for (let i = 0; i < text.length; i += 4096) {
    let j = Math.min(text.length, i + 4096);
    if (j < text.length && text.charCodeAt(j - 1) >= 0xd800 && text.charCodeAt(j - 1) < 0xdc00) j++;
    chunks.push(text.slice(i, j));
    i = j - 4096;
  }
  await encodeCase(tok, 'warm up');
  const t0 = process.hrtime.bigint();
  let n = 0;
  for (const c of chunks) n += (await tok.encode(c, null, { addSpecialTokens: true })).getIds().length;
  const s = Number(process.hrtime.bigint() - t0) / 1e9;
  console.log(JSON.stringify({ bytes, tokens: n, seconds: s, mb_per_s: bytes / 1e6 / s }));
  process.exit(0);
}

// ---- random Unicode ---------------------------------------------------------------------------------
const pools = [
  [0x20, 0x7e], [0x20, 0x7e], [0x09, 0x0d], [0xa0, 0x24f], [0x300, 0x36f], [0x370, 0x52f], [0x590, 0x6ff],
  [0x900, 0x97f], [0xe00, 0xe7f], [0x1100, 0x11ff], [0x2000, 0x206f], [0x3000, 0x30ff], [0x4e00, 0x9fff],
  [0xac00, 0xd7a3], [0xf900, 0xfaff], [0xff00, 0xffef], [0x1f300, 0x1faff], [0x1f1e6, 0x1f1ff],
  [0x1f3fb, 0x1f3ff], [0x200d, 0x200d], [0xfe0f, 0xfe0f], [0x0, 0x10ffff],
];
function randomString(r) {
  const len = Math.floor(r() * 40);
  let s = '';
  for (let i = 0; i < len; i++) {
    const [lo, hi] = pools[Math.floor(r() * pools.length)];
    let cp = lo + Math.floor(r() * (hi - lo + 1));
    if (cp >= 0xd800 && cp <= 0xdfff) cp = 0xfffd;  // no lone surrogates: text must be valid UTF-8
    s += String.fromCodePoint(cp);
  }
  return s;
}

const corpus = JSON.parse(fs.readFileSync(path.join(root, 'tests/data/tokenizer/corpus.json'), 'utf8'));
const r = rng(20240607);
const inputs = corpus.cases.map((c) => ({ name: c.name, text: c.text }));
for (let i = 0; i < 300; i++) inputs.push({ name: `random_${i}`, text: randomString(r) });

const cases = [];
for (const c of inputs) {
  const ids = await encodeCase(tok, c.text);
  cases.push({
    name: c.name, text: c.text, nfc: c.text.normalize('NFC'), ids,
    decoded: await tok.decode(ids, false), decoded_skip: await tok.decode(ids, true),
  });
}

// Random id runs: tokens that carry partial UTF-8 bytes, special tokens, ids past the vocab (dropped by HF).
const allIds = cases.flatMap((c) => c.ids);
const decodeCases = [];
for (let i = 0; i < 300; i++) {
  const n = 1 + Math.floor(r() * 12);
  const ids = [];
  for (let k = 0; k < n; k++) {
    const p = r();
    if (p < 0.5) ids.push(allIds[Math.floor(r() * allIds.length)]);
    else if (p < 0.75) ids.push(Math.floor(r() * 151669));
    else if (p < 0.95) ids.push(Math.floor(r() * 256) + (r() < 0.5 ? 0 : 0));  // single bytes: partial chars
    else ids.push(151643 + Math.floor(r() * 30));  // specials, non-special added tokens, out of range
  }
  decodeCases.push({ ids, decoded: await tok.decode(ids, false), decoded_skip: await tok.decode(ids, true) });
}

// Variant tokenizer: extra added tokens with every matching flag.
const variantAdded = [
  { id: 151669, content: '[LS]', single_word: false, lstrip: true, rstrip: false, normalized: false, special: true },
  { id: 151670, content: '[RS]', single_word: false, lstrip: false, rstrip: true, normalized: false, special: true },
  { id: 151671, content: 'xyzzy', single_word: true, lstrip: false, rstrip: false, normalized: false, special: false },
  { id: 151672, content: 'caf\u00e9', single_word: false, lstrip: false, rstrip: false, normalized: true, special: false },
  { id: 151673, content: '[BOTH]', single_word: false, lstrip: true, rstrip: true, normalized: false, special: true },
];
const vj = JSON.parse(tokJson);
vj.added_tokens.push(...variantAdded);
const vtok = Tokenizer.fromString(JSON.stringify(vj));
// HF re-numbers added tokens whose content is already in the vocab: keep the ids we write self-consistent.
for (const a of variantAdded) {
  if (vtok.tokenToId(a.content) !== a.id) throw new Error(`variant token ${a.content} got id ${vtok.tokenToId(a.content)}`);
}
const variantTexts = [
  'hello   [LS] x', '[LS]start', 'a\t\n [LS]b', 'x [RS]   y', '[RS]\n\n z', 'p  [BOTH]  q',
  'xyzzy xyzzys sxyzzy xyzzy. _xyzzy xyzzy_ (xyzzy) 1xyzzy xyzzy1 xyzzy\u0301 é-xyzzy-中xyzzy xyzzy\u200d', 'Cafe\u0301 cafe\u0301 caf\u00e9s mycaf\u00e9',
  '<|im_start|>[LS] xyzzy [RS]caf\u00e9<|im_end|>', '  [LS][RS]  [BOTH][BOTH]  ', 'xyzzyxyzzy xyzzy\txyzzy\n',
];
const variantCases = [];
for (const [i, text] of variantTexts.entries()) {
  const ids = await encodeCase(vtok, text);
  variantCases.push({ name: `variant_${i}`, text, ids, decoded: await vtok.decode(ids, false),
                      decoded_skip: await vtok.decode(ids, true) });
}

const out = {
  oracle: 'tokenizers@0.23.2 (Node binding of the HF Rust core)',
  tokenizer: 'tests/data/qwen3-tokenizer/tokenizer.json',
  vocab_size: tok.getVocabSize(true),
  cases, decode_cases: decodeCases,
  variant: { added_tokens: variantAdded, cases: variantCases },
};
const outPath = path.join(root, 'tests/data/tokenizer/qwen3_golden.json');
fs.writeFileSync(outPath, JSON.stringify(out));
console.log(`wrote ${outPath}: ${cases.length} cases, ${decodeCases.length} decode cases, ${variantCases.length} variant cases`);
