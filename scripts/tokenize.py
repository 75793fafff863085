"""Turns text into a token file for `lcc train --data=tokens:FILE`.

    python3 scripts/tokenize.py MODEL TEXT... -o train.bin
    python3 scripts/tokenize.py --bytes TEXT... -o train.bin

MODEL is the model's Hub name or local folder: its tokenizer (transformers'
AutoTokenizer) encodes each TEXT file, and an end-of-text token, when the tokenizer
has one, separates the files. --bytes needs no tokenizer: each UTF-8 byte is a token
(0..255), for a model whose vocabulary has at least 256 entries (or use lcc's
--data=bytes:FILE, which reads the text itself).

The file is nanoGPT's layout (its prepare.py writes train.bin the same way): the token
ids one after another, little-endian, no header; uint16 when every id fits (a
vocabulary of at most 65,536), else uint32. Train with --token-bytes=2 or 4 to match:
the script prints which. lcc reads sequence k from tokens [k·T, k·T + T] (T =
--seq-len, the last one the target of the one before), in order, wrapping around, and
refuses an id outside the model's vocabulary, naming its offset.
"""
import os
import sys

# This file is named tokenize.py, as Python's own tokenize module is, which the
# standard library imports (inspect, linecache). Python puts this script's folder
# first on the path; take it off, so that those imports find the real module.
_here = os.path.dirname(os.path.abspath(__file__))
sys.path = [p for p in sys.path if os.path.abspath(p or os.curdir) != _here]

import argparse
from array import array


def token_array(ids, vocab):
    """The ids as the narrowest array lcc reads: uint16 ('H') or uint32 ('I')."""
    top = max(max(ids, default=0), vocab - 1)
    for code in ("H", "I"):
        a = array(code)
        if top < 1 << (8 * a.itemsize):
            a.extend(ids)
            return a
    sys.exit(f"token id {top} does not fit in 32 bits")


def write_tokens(path, ids, vocab):
    """Writes ids to path little-endian; returns the bytes per token."""
    a = token_array(ids, vocab)
    if sys.byteorder == "big":
        a.byteswap()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path + ".tmp", "wb") as f:
        a.tofile(f)
    os.replace(path + ".tmp", path)
    return a.itemsize


def encode_files(model, texts):
    """Encodes each file with model's tokenizer; returns the ids and the vocabulary size."""
    if model is None:
        ids = []
        for t in texts:
            with open(t, "rb") as f:
                ids.extend(f.read())
        return ids, 256
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(model)
    ids = []
    for t in texts:
        with open(t, encoding="utf-8") as f:
            ids.extend(tok.encode(f.read(), add_special_tokens=False))
        if tok.eos_token_id is not None:
            ids.append(tok.eos_token_id)
    return ids, len(tok)


def main():
    p = argparse.ArgumentParser(description="write a token file for lcc train --data=tokens:FILE")
    p.add_argument("model", nargs="?", help="the model's Hub name or folder, whose tokenizer encodes")
    p.add_argument("texts", nargs="+", metavar="TEXT", help="UTF-8 text files")
    p.add_argument("-o", "--output", required=True, help="the token file to write (e.g. train.bin)")
    p.add_argument("--bytes", action="store_true", help="tokens are the text's UTF-8 bytes (no tokenizer)")
    a = p.parse_args()
    texts = a.texts
    if a.bytes:
        if a.model is not None:
            texts = [a.model] + texts  # with --bytes every argument is a text
        model = None
    else:
        model = a.model
    for t in texts:
        if not os.path.isfile(t):
            sys.exit(f"{t}: not a file")
    ids, vocab = encode_files(model, texts)
    width = write_tokens(a.output, ids, vocab)
    kind = {2: "uint16", 4: "uint32"}[width]
    print(f"wrote {a.output}: {len(ids)} tokens, {kind} little-endian (vocabulary {vocab}); "
          f"train with --data=tokens:{a.output} --token-bytes={width}")


if __name__ == "__main__":
    main()
