#!/usr/bin/env python3
"""On a machine with transformers: render the cases render_reference.py wrote with the real
apply_chat_template and tokenizer, and write, per case, whether the text equals jinja2's (the
script's) and transformers' ids (tokenize=True), for test_chat_template_tokens.cpp.

Usage: transformers_check.py --cases cases.jsonl --tokenizers DIR --out ids.jsonl
  DIR/<template>/ holds tokenizer.json (or tokenizer.json.gz) and tokenizer_config.json.
"""
import argparse
import gzip
import json
import os
import shutil
import sys
import tempfile


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", required=True)
    ap.add_argument("--tokenizers", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    import transformers
    from transformers import AutoTokenizer
    toks = {}
    for name in sorted(os.listdir(a.tokenizers)):
        src = os.path.join(a.tokenizers, name)
        if not os.path.isdir(src):
            continue
        d = tempfile.mkdtemp()
        shutil.copy(os.path.join(src, "tokenizer_config.json"), d)
        if os.path.exists(os.path.join(src, "tokenizer.json.gz")):
            with gzip.open(os.path.join(src, "tokenizer.json.gz"), "rb") as f, open(os.path.join(d, "tokenizer.json"), "wb") as g:
                shutil.copyfileobj(f, g)
        else:
            shutil.copy(os.path.join(src, "tokenizer.json"), d)
        toks[name] = AutoTokenizer.from_pretrained(d)
    opener = gzip.open if a.cases.endswith(".gz") else open
    same = {}
    with opener(a.cases, "rt", encoding="utf-8") as f, gzip.open(a.out, "wt", encoding="utf-8") as out:
        for i, line in enumerate(f):
            c = json.loads(line)
            tok = toks.get(c["template"])
            if tok is None or "error" in c:
                continue
            kw = dict(tools=c["tools"], add_generation_prompt=c["add_generation_prompt"], **c["kwargs"])
            text = tok.apply_chat_template(c["messages"], tokenize=False, **kw)
            ids = tok.apply_chat_template(c["messages"], tokenize=True, **kw)
            if isinstance(ids, dict) or hasattr(ids, "keys"):
                ids = ids["input_ids"]
            ok = text == c["expected"]
            same.setdefault(c["template"], [0, 0])[0 if ok else 1] += 1
            rec = {"index": i, "template": c["template"], "text_equal": ok, "ids": list(ids)}
            if not ok:
                rec["text"] = text
            out.write(json.dumps(rec) + "\n")
    print("transformers", transformers.__version__, "text equal / different per template:", same)


if __name__ == "__main__":
    sys.exit(main())
