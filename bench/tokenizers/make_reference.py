#!/usr/bin/env python3
"""Trains the test tokenizers on Debian's fortunes with Hugging Face `tokenizers` and writes the
ids it gives for >= 10,000 test strings: the reference leantrain's C++ tokenizers must match
(0 mismatches; tests/unit/test_tokenizer_reference.cpp reads these files in CI).

Runs where `tokenizers` is installed (the GPU machine); needs no GPU:
  python3 bench/tokenizers/make_reference.py --fortunes DIR --out tests/data/tokenizers

Styles (each <out>/<style>/tokenizer.json + tokenizer_config.json, vocab <= 4096 so llama-tiny
reads every id):
  gpt2           ByteLevel pre-tokenizer (GPT-2 regex), BPE, <|endoftext|>
  llama3         Split(Llama 3 regex, Isolated) + ByteLevel(use_regex=False), BPE ignore_merges,
                 TemplateProcessing with <|begin_of_text|>
  smollm2        Digits(individual) + ByteLevel(use_regex=True), BPE, <|im_start|>/<|im_end|>
  sentencepiece  Llama 2 / TinyLlama layout: normalizer Prepend+Replace, no pre-tokenizer, BPE with
                 byte_fallback and <0x00>..<0xFF>, decoder Replace/ByteFallback/Fuse/Strip, "<s> $A"
  sentencepiece-metaspace  the same vocabulary in the newer layout: Metaspace pre-tokenizer and decoder
  bert-uncased   BERT: BertNormalizer (lowercase, accents stripped), BertPreTokenizer, WordPiece ([UNK], ##),
                 WordPiece decoder, TemplateProcessing "[CLS] $A [SEP]"
  bert-cased     the same, cased (no lowercase, no accent stripping), BertProcessing
  roberta        RoBERTa: ByteLevel BPE, <s> <pad> </s> <unk> <mask>, RobertaProcessing
  qwen2          Qwen2: NFC normalizer, Split(Qwen2 regex, Isolated) + ByteLevel(use_regex false), BPE
Files: strings.jsonl.gz (one {"text": ...} per line) and <style>/expected.jsonl.gz (line i:
{"ids", "ids_special", "decoded", "decoded_skip"} for string i).
"""
import argparse
import gzip
import json
import os
import random

import tokenizers
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

VOCAB = 4096
GPT2_PAT = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
LLAMA3_PAT = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
              r"""|\s*[\r\n]+|\s+(?!\S)|\s+""")


def read_fortunes(d):
    entries = []
    for name in sorted(os.listdir(d)):
        p = os.path.join(d, name)
        if name.startswith(".") or name.endswith((".dat", ".u8")) or not os.path.isfile(p):
            continue
        with open(p, encoding="utf-8", errors="replace") as f:
            text = f.read()
        cur = []
        for line in text.split("\n"):
            if line.strip() == "%":
                if cur:
                    entries.append("\n".join(cur))
                cur = []
            else:
                cur.append(line)
        if cur and "\n".join(cur).strip():
            entries.append("\n".join(cur))
    return [e for e in entries if e.strip()]


def rand_range(rng, lo, hi, n):
    return "".join(chr(rng.randint(lo, hi)) for _ in range(n))


def test_strings(fortunes, rng):
    out = []
    # Real text: fortunes, cut at 300 characters.
    for e in rng.sample(fortunes, min(6000, len(fortunes))):
        out.append(e[:300])
    emoji = ["😀", "😂", "👍", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇺🇸", "🇯🇵", "1️⃣", "❤️", "🤖", "🧑🏾‍💻", "🐍", "✨"]
    scripts = {
        "cjk": (0x4E00, 0x9FFF), "hiragana": (0x3041, 0x3096), "katakana": (0x30A1, 0x30FA),
        "hangul": (0xAC00, 0xD7A3), "cyrillic": (0x0410, 0x044F), "greek": (0x0391, 0x03C9),
        "arabic": (0x0621, 0x064A), "hebrew": (0x05D0, 0x05EA), "devanagari": (0x0905, 0x0939),
        "thai": (0x0E01, 0x0E2E), "latin1": (0x00C0, 0x00FF),
    }
    specials = ["<|endoftext|>", "<s>", "</s>", "<unk>", "<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>",
                "<|im_end|>", "<0x41>", "<|eot_id|>"]
    code = [
        "def f(x):\n    return x * 2\n", "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}\n",
        "    if (err != nil) {\n        return err\n    }", "SELECT * FROM t WHERE id = 42;",
        "x = [1, 2, 3]  # comment\n\n\nprint(x)", "fn main() { println!(\"héllo\"); }",
        "#include <stdio.h>\nint main(void){return 0;}", "a+=b;c-=d;e*=f;g/=h;", "{\"key\": [1.5e-3, null]}",
    ]
    contractions = ["I'm", "DON'T", "she'LL", "it's", "we've", "They'd", "you're", "O'Neil", "rock'n'roll", "'tis"]
    words = [w for e in fortunes[:2000] for w in e.split()][:20000]
    gens = []
    gens.append(lambda: " " * rng.randint(1, 12) + rng.choice(words) + " " * rng.randint(0, 5))
    gens.append(lambda: "\n" * rng.randint(1, 5) + rng.choice(words) + "\n" * rng.randint(0, 4) + "\t" * rng.randint(0, 3))
    gens.append(lambda: rng.choice(words) + "\r\n" + rng.choice(words) + " \n \n  " + rng.choice(words))
    gens.append(lambda: "".join(rng.choice(emoji) for _ in range(rng.randint(1, 6))) + " " + rng.choice(words))
    gens.append(lambda: rand_range(rng, *scripts[rng.choice(list(scripts))], rng.randint(1, 20)))
    gens.append(lambda: rng.choice(words) + " " + rand_range(rng, *scripts["cjk"], rng.randint(1, 8)) + "。"
                + rng.choice(words))
    gens.append(lambda: rng.choice(code))
    gens.append(lambda: " ".join(rng.choice(contractions) for _ in range(rng.randint(1, 5))))
    gens.append(lambda: str(rng.randint(0, 10**rng.randint(1, 12))) + rng.choice(["", " ", ".", ",", "%"])
                + str(rng.random())[:rng.randint(3, 10)])
    gens.append(lambda: rng.choice(words) + rng.choice(specials) + rng.choice(words))
    gens.append(lambda: rng.choice(specials) + " " + rng.choice(specials) + rng.choice(words))
    gens.append(lambda: "e\u0301 cafe\u0301 n\u0303 " + rng.choice(words))  # decomposed accents
    gens.append(lambda: "".join(chr(rng.choice([rng.randint(0x20, 0x7E), rng.randint(0xA0, 0xD7FF),
                                                rng.randint(0xE000, 0xFFFD), rng.randint(0x10000, 0x10FFFF)]))
                                for _ in range(rng.randint(1, 12))))
    gens.append(lambda: "".join(rng.choice(" \t\n\r\u00a0\u3000x") for _ in range(rng.randint(1, 16))))
    while len(out) < 10500:
        out.append(rng.choice(gens)())
    out += ["", " ", "\n", "  ", "\t", "a", "A", "▁", "▁▁x", " ▁ ", "<0xFF>", "<", "|", "'s", "'S", "0", "00000"]
    return out


def trained(tok, corpus, trainer):
    tok.train_from_iterator(corpus, trainer=trainer)
    return tok


def byte_level(corpus, specials, pre, post, ignore_merges=False):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre
    tok.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                             show_progress=False)
    tok = trained(tok, corpus, tr)
    if post is not None:
        tok.post_processor = post(tok)
    j = json.loads(tok.to_str())
    j["model"]["ignore_merges"] = ignore_merges
    return Tokenizer.from_str(json.dumps(j))


def sentencepiece(corpus):
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    tr = trainers.BpeTrainer(vocab_size=VOCAB - 256, special_tokens=["<unk>", "<s>", "</s>"], limit_alphabet=200,
                             show_progress=False)
    tok = trained(tok, corpus, tr)
    j = json.loads(tok.to_str())
    old = j["model"]["vocab"]
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab["<0x%02X>" % b] = 3 + b
    for t, i in sorted(old.items(), key=lambda kv: kv[1]):
        if t not in vocab:
            vocab[t] = len(vocab)
    j["model"]["vocab"] = vocab
    j["model"]["byte_fallback"] = True
    j["model"]["fuse_unk"] = True
    for a in j["added_tokens"]:
        a["id"] = vocab[a["content"]]
    legacy = dict(j)
    legacy["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "▁"}, {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]}
    legacy["pre_tokenizer"] = None
    legacy["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    legacy["post_processor"] = None  # set below, through the Python object (its JSON form varies by version)
    meta = dict(legacy)
    meta["normalizer"] = None
    meta["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False}
    meta["decoder"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False}
    out = []
    for j2 in (legacy, meta):
        t = Tokenizer.from_str(json.dumps(j2))
        t.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                         special_tokens=[("<s>", 1)])
        out.append(t)
    return out[0], out[1]


def wordpiece(corpus, lowercase, post):
    """BERT's layout: BertNormalizer, BertPreTokenizer, WordPiece with [UNK] and ##, WordPiece decoder."""
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=None,
                                                lowercase=lowercase)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=True)
    tr = trainers.WordPieceTrainer(vocab_size=VOCAB, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
                                   show_progress=False)
    tok = trained(tok, corpus, tr)
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = (processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
                                                        special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
                          if post == "template" else processors.BertProcessing(("[SEP]", sep), ("[CLS]", cls)))
    return tok


def roberta(corpus):
    """RoBERTa's layout: byte-level BPE, <s> <pad> </s> <unk> <mask>, RobertaProcessing."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok = trained(tok, corpus, tr)
    tok.post_processor = processors.RobertaProcessing(("</s>", tok.token_to_id("</s>")), ("<s>", tok.token_to_id("<s>")),
                                                      trim_offsets=True, add_prefix_space=False)
    return tok


def qwen2(corpus):
    """Qwen2's layout: NFC normalizer, Split(Qwen2's regex, Isolated) + ByteLevel(use_regex false), BPE."""
    pat = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"""
           r"""|\s+(?!\S)|\s+""")
    tok = byte_level(corpus, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                     pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(pat), behavior="isolated", invert=False),
                                              pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
                     lambda tok: processors.ByteLevel(trim_offsets=False))
    tok.normalizer = normalizers.NFC()
    return tok


def template(bos):
    return lambda tok: processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B",
                                                     special_tokens=[(bos, tok.token_to_id(bos))])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fortunes", default="/usr/share/games/fortunes")
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="", help="comma-separated styles to write (default: all)")
    a = ap.parse_args()
    fortunes = read_fortunes(a.fortunes)
    rng = random.Random(12)
    corpus = fortunes
    gpt2 = byte_level(corpus, ["<|endoftext|>"], pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
                      lambda tok: processors.ByteLevel(trim_offsets=False))
    llama3 = byte_level(corpus, ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"],
                        pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(LLAMA3_PAT), behavior="isolated", invert=False),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
                        template("<|begin_of_text|>"), ignore_merges=True)
    smollm2 = byte_level(corpus, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                         pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                  pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]),
                         lambda tok: processors.ByteLevel(trim_offsets=False))
    sp, sp_meta = sentencepiece(corpus)
    bert_uncased = wordpiece(corpus, True, "template")
    bert_cased = wordpiece(corpus, False, "bert")
    rob = roberta(corpus)
    qw = qwen2(corpus)
    configs = {
        "bert-uncased": {"cls_token": "[CLS]", "sep_token": "[SEP]", "pad_token": "[PAD]", "unk_token": "[UNK]"},
        "bert-cased": {"cls_token": "[CLS]", "sep_token": "[SEP]", "pad_token": "[PAD]", "unk_token": "[UNK]"},
        "roberta": {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>"},
        "qwen2": {"eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>"},
        "gpt2": {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>"},
        "llama3": {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"},
        "smollm2": {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"},
        "sentencepiece": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": True,
                          "add_eos_token": False},
        "sentencepiece-metaspace": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
                                    "add_bos_token": True, "add_eos_token": False},
    }
    toks = {"gpt2": gpt2, "llama3": llama3, "smollm2": smollm2, "sentencepiece": sp, "sentencepiece-metaspace": sp_meta,
            "bert-uncased": bert_uncased, "bert-cased": bert_cased, "roberta": rob, "qwen2": qw}
    only = [x for x in a.only.split(",") if x]
    if only:
        toks = {k: v for k, v in toks.items() if k in only}
    strings = test_strings(fortunes, rng)
    os.makedirs(a.out, exist_ok=True)
    strings_path = os.path.join(a.out, "strings.jsonl.gz")
    if only and os.path.exists(strings_path):  # new styles against the committed strings
        with gzip.open(strings_path, "rt", encoding="utf-8") as f:
            strings = [json.loads(line)["text"] for line in f]
    else:
        with gzip.open(strings_path, "wt", encoding="utf-8") as f:
            for s in strings:
                f.write(json.dumps({"text": s}, ensure_ascii=False) + "\n")
    for style, tok in toks.items():
        d = os.path.join(a.out, style)
        os.makedirs(d, exist_ok=True)
        tok.save(os.path.join(d, "tokenizer.json"))
        with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
            json.dump(configs[style], f, indent=2)
        n_tok = 0
        with gzip.open(os.path.join(d, "expected.jsonl.gz"), "wt", encoding="utf-8") as f:
            for s in strings:
                ids = tok.encode(s, add_special_tokens=False).ids
                ids_sp = tok.encode(s, add_special_tokens=True).ids
                n_tok += len(ids)
                f.write(json.dumps({"ids": ids, "ids_special": ids_sp,
                                    "decoded": tok.decode(ids_sp, skip_special_tokens=False),
                                    "decoded_skip": tok.decode(ids_sp, skip_special_tokens=True)},
                                   ensure_ascii=False) + "\n")
        print(f"{style}: vocab {tok.get_vocab_size()}, {len(strings)} strings, {n_tok} tokens")
    with open(os.path.join(a.out, "VERSION"), "w") as f:
        f.write(f"tokenizers {tokenizers.__version__}\n")
    print("tokenizers", tokenizers.__version__)


if __name__ == "__main__":
    main()
