#!/usr/bin/env bash
# Runs the README's quickstart end to end on a machine with no network: a small Llama
# with random weights and a BPE tokenizer trained on this repository's docs stand in
# for a Hub model, saved with save_pretrained as a local folder. Each step is the
# README's command on that folder; the last one loads lcc's trained weights back into
# PyTorch and checks that they are the ones lcc trained (the logits move from the
# export's, and every parameter loads).
#
#   scripts/quickstart_offline.sh LCC [DEVICE] [WORKDIR]
#
# LCC is the lcc binary; DEVICE is cpu (default) or cuda; WORKDIR defaults to a new
# temporary folder. Needs python3 with torch, transformers, tokenizers and onnxscript.
set -euo pipefail
lcc=${1:?usage: quickstart_offline.sh LCC [DEVICE] [WORKDIR]}
device=${2:-cpu}
work=${3:-$(mktemp -d)}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$work"
cd "$work"
cat "$here"/../README.md "$here"/../docs/*.md >corpus.txt

echo "== 0. a local model folder (random Llama, BPE tokenizer trained on the docs)"
python3 - <<'PY'
import tokenizers, transformers as tf
from tokenizers import models, pre_tokenizers, trainers, decoders
tok = tokenizers.Tokenizer(models.BPE(unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.train(["corpus.txt"], trainers.BpeTrainer(vocab_size=2048, special_tokens=["<unk>", "<|endoftext|>"]))
fast = tf.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<|endoftext|>")
fast.save_pretrained("hf-model")
cfg = tf.LlamaConfig(vocab_size=len(fast), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                     tie_word_embeddings=True, eos_token_id=fast.eos_token_id)
tf.LlamaForCausalLM(cfg).save_pretrained("hf-model")
print("saved hf-model: LlamaForCausalLM, vocab", len(fast))
PY

echo "== 1. export"
python3 "$here/export_hf.py" hf-model -o qs/model.onnx
echo "== 2. tokenize"
python3 "$here/tokenize.py" hf-model corpus.txt -o qs/train.bin
echo "== 3. train"
"$lcc" train qs/model.onnx --device="$device" --data=tokens:qs/train.bin --seq-len=256 --batch=4 \
	--steps=60 --lr=3e-3 --warmup=6 --checkpoint-dir=qs/ck --plot=qs/loss.png --metrics=qs/metrics.jsonl \
	--progress-every=20
ls -l qs/loss.png
echo "== 4. export and load in PyTorch"
"$lcc" export qs/ck --format=safetensors -o qs/trained.safetensors
python3 - <<'PY'
import safetensors.torch, torch, transformers as tf
model = tf.AutoModelForCausalLM.from_pretrained("hf-model")
before = {k: v.clone() for k, v in model.state_dict().items()}
state = safetensors.torch.load_file("qs/trained.safetensors")
res = model.load_state_dict({k.removeprefix("m."): v for k, v in state.items()}, strict=False)
print("missing_keys", res.missing_keys, "unexpected_keys", res.unexpected_keys)
assert not res.unexpected_keys, res.unexpected_keys
moved = sum(1 for k, v in model.state_dict().items() if not torch.equal(v, before[k]))
print(f"loaded {len(state)} tensors; {moved} of {len(before)} parameters changed by training")
assert moved > 0
PY
echo "quickstart: ok ($work)"
