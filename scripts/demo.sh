#!/usr/bin/env bash
# The setup.sh demo: generates text with a built `nanovllm` and shows what to try next.
#   scripts/demo.sh --bin PATH [--model HF_MODEL_DIR] [--workdir DIR] [generate options...]
# Without --model it first writes a tiny random-weight Qwen3 checkpoint that carries the real Qwen3
# tokenizer into DIR/tiny-qwen3-text (DIR: build), so the demo needs no GPU and no download, and says
# that its text is gibberish.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="" model="" workdir="$root/build"
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) bin=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --workdir) workdir=$2; shift 2 ;;
    *) break ;;
  esac
done
[ -n "$bin" ] || { echo "usage: $0 --bin PATH [--model DIR] [--workdir DIR] [generate options...]" >&2; exit 1; }

prompt="The capital of France is"
if [ -z "$model" ]; then
  model="$workdir/tiny-qwen3-text"
  [ -f "$model/tokenizer.json" ] ||
    "$bin" make-test-model --out "$model" --preset tiny --seed 0 --tokenizer "$root/tests/data/qwen3-tokenizer" \
      --config-override '{"vocab_size": 151936, "tie_word_embeddings": false}'
  echo
  echo "== Demo model: $model is a tiny RANDOM-WEIGHT Qwen3 test model (2 layers, the real Qwen3 tokenizer)."
  echo "   It runs anywhere in a second, but it has learned nothing: expect fluent-looking gibberish."
fi
echo "== $bin generate --model $model --prompt \"$prompt\" --temperature 0 --max-tokens 24 $*"
"$bin" generate --model "$model" --prompt "$prompt" --temperature 0 --max-tokens 24 "$@" 2>&1
cat <<NEXT

== Next, try:
   # a real checkpoint (huggingface-cli download Qwen/Qwen3-0.6B --local-dir ~/models/Qwen3-0.6B):
   $bin generate --model ~/models/Qwen3-0.6B --prompt "$prompt" --max-tokens 32
   # interactive chat (/think on|off, /reset, /exit):
   $bin chat --model $model
   # an OpenAI-compatible server on http://127.0.0.1:8000/v1:
   $bin serve $model --port 8000
   # every command; <command> --help for its options:
   $bin --help
NEXT
