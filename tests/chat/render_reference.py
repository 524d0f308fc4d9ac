#!/usr/bin/env python3
"""Reference renderings of chat templates, for tests/unit/test_chat_template_reference.cpp.

Renders seeded random conversations with jinja2 configured as transformers' apply_chat_template
configures it (ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with the
loopcontrols extension and a {% generation %} tag, globals raise_exception and strftime_now,
transformers' tojson filter), and writes one JSON line per conversation:
  {"template", "messages", "tools", "add_generation_prompt", "kwargs", "now", "expected" | "error"}
where "error" is "raised" (raise_exception) or the jinja2 exception's type.

Usage: render_reference.py --templates tests/data/chat_templates --out cases.jsonl [--count 1000] [--seed 0]
       render_reference.py --templates X --constructs tests/chat/constructs.json --out cases.jsonl
Needs only Debian's python3-jinja2 (scripts/deps.sh --tests).
"""
import argparse
import json
import os
import random
import sys
from datetime import datetime

import jinja2
import jinja2.ext
from jinja2 import nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

NOW = 1767225600  # 2026-01-01 00:00:00 UTC: what strftime_now formats, in local time on both sides


class Raised(Exception):
    pass


class Generation(jinja2.ext.Extension):
    """{% generation %}...{% endgeneration %} renders its body (transformers' AssistantTracker
    also records the span; the C++ test checks spans itself)."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.Scope(body, lineno=lineno)


def make_env():
    def raise_exception(message):
        raise Raised(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.fromtimestamp(NOW).strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def special_tokens_map(cfg):
    """What transformers' tokenizer.special_tokens_map passes to the template."""
    out = {}
    for key in ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"]:
        v = cfg.get(key)
        if isinstance(v, dict):
            v = v.get("content")
        if v:
            out[key] = v
    if isinstance(cfg.get("additional_special_tokens"), list):
        out["additional_special_tokens"] = [t["content"] if isinstance(t, dict) else t
                                            for t in cfg["additional_special_tokens"]]
    return out


# ---- random conversations ----
WORDS = ["hello", "world", "the", "model", "train", "memory", "GPU", "token", "loss", "why", "how", "is",
         "café", "naïve", "Straße", "日本語", "中文", "한국어", "Ελληνικά", "русский", "עברית", "العربية",
         "😀", "👩‍👩‍👧", "🇫🇷", "x²", "∑", "—", "'quoted'", '"double"', "back\\slash", "tab\there",
         "{{ not a tag }}", "{% if %}", "<|im_end|>", "<|eot_id|>", "</s>", "<end_of_turn>", "{'a': 1}",
         "\u00a0nbsp", "zero\u200bwidth", "line\u2028sep", "\x7f", "ctrl\x01", "%d", "12", "3.5", "-7"]


def text(rng, allow_empty=True):
    r = rng.random()
    if allow_empty and r < 0.04:
        return ""
    if r < 0.08:
        return rng.choice([" ", "\n", "  \n\t ", "\n\n"])
    n = rng.randint(1, 14)
    parts = []
    for _ in range(n):
        parts.append(rng.choice(WORDS))
        parts.append(rng.choice([" ", " ", " ", "\n", "  ", "\t", "\r\n", ", ", ". "]))
    s = "".join(parts[:-1])
    if rng.random() < 0.2:
        s = rng.choice([" ", "\n", "\n\n", "  "]) + s
    if rng.random() < 0.2:
        s = s + rng.choice([" ", "\n", "\n\n", "?", " ?"])
    return s


def tool_schema(rng, i):
    props = {}
    for k in range(rng.randint(0, 3)):
        props[rng.choice(["city", "unit", "query", "n", "ünïcode", "days"]) + str(k)] = {
            "type": rng.choice(["string", "integer", "number", "boolean"]),
            "description": text(rng, False)}
    fn = {"name": f"tool_{i}", "description": text(rng, False),
          "parameters": {"type": "object", "properties": props, "required": sorted(props)[:1]}}
    if rng.random() < 0.2:
        del fn["description"]
    return {"type": "function", "function": fn}


def arguments(rng):
    args = {}
    for k in range(rng.randint(0, 3)):
        args[rng.choice(["city", "n", "flag", "x", "list", "ü"]) + str(k)] = rng.choice(
            [text(rng), rng.randint(-5, 1000), rng.random() * 100, True, False, None, [1, "two", 3.0], {"k": "v"}])
    return args


def tool_call(rng, tools):
    name = rng.choice(tools)["function"]["name"] if tools else "lookup"
    args = arguments(rng)
    if rng.random() < 0.2:
        args = json.dumps(args, ensure_ascii=False)
    return {"type": "function", "function": {"name": name, "arguments": args}}


def conversation(rng, style):
    """messages, tools, kwargs for one conversation in what `style` accepts."""
    tools = None
    if style in ("qwen3", "smollm2") and rng.random() < 0.35:
        tools = [tool_schema(rng, i) for i in range(rng.randint(1, 3))]
    msgs = []
    if rng.random() < 0.4:
        msgs.append({"role": "system", "content": text(rng)})
    turns = rng.randint(1, 5)
    for t in range(turns):
        user = text(rng)
        if style == "qwen3" and rng.random() < 0.1:
            user = "<tool_response>" + text(rng) + "</tool_response>"
        if style == "gemma3" and rng.random() < 0.15:
            user = [{"type": "text", "text": text(rng)}] + ([{"type": "image"}] if rng.random() < 0.5 else [])
        msgs.append({"role": "user", "content": user})
        last = t == turns - 1
        if last and rng.random() < 0.4:
            break  # ends with the user: the case generation prompts are for
        a = {"role": "assistant", "content": text(rng)}
        if style == "qwen3":
            r = rng.random()
            if r < 0.25:
                a["content"] = "<think>\n" + text(rng) + "\n</think>\n\n" + text(rng)
            elif r < 0.4:
                a["reasoning_content"] = text(rng)
            elif r < 0.45:
                a["reasoning_content"] = None
        if style in ("qwen3", "smollm2") and rng.random() < 0.3:
            a["tool_calls"] = [tool_call(rng, tools) for _ in range(rng.randint(1, 5 if style == "smollm2" else 3))]
            msgs.append(a)
            for _ in range(rng.randint(1, 3)):
                tm = {"role": "tool", "content": text(rng)}
                msgs.append(tm)
            if rng.random() < 0.7:
                msgs.append({"role": "assistant", "content": text(rng)})
            continue
        msgs.append(a)
        if style in ("llama3", "zephyr") and rng.random() < 0.1:
            m = {"role": "tool", "content": text(rng)}
            if rng.random() < 0.5:
                m["name"] = "lookup"
            msgs.append(m)
    if style == "gemma3" and rng.random() < 0.05:
        msgs.append({"role": "user", "content": "twice in a row"})  # breaks alternation: raises
    if style == "zephyr" and rng.random() < 0.03:
        msgs.append({"role": "narrator", "content": "?"})  # unknown role: raises
    kwargs = {}
    if style == "qwen3":
        r = rng.random()
        if r < 0.33:
            kwargs["enable_thinking"] = False
        elif r < 0.66:
            kwargs["enable_thinking"] = True
    return msgs, tools, kwargs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--templates", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", default="")
    ap.add_argument("--constructs", help="a JSON list of [template, variables]: render each, write its case")
    a = ap.parse_args()
    env = make_env()
    if a.constructs:
        with open(a.out, "w", encoding="utf-8") as out:
            for source, variables in json.load(open(a.constructs, encoding="utf-8")):
                case = {"source": source, "vars": variables, "now": NOW}
                try:
                    case["expected"] = env.from_string(source).render(**variables)
                except Raised as e:
                    case["error"] = "raised"
                except Exception as e:
                    case["error"] = type(e).__name__ + ": " + str(e)
                out.write(json.dumps(case, ensure_ascii=False) + "\n")
        return 0
    names = sorted(d for d in os.listdir(a.templates) if os.path.isfile(os.path.join(a.templates, d, "tokenizer_config.json")))
    if a.only:
        names = [n for n in names if n in a.only.split(",")]
    with open(a.out, "w", encoding="utf-8") as out:
        for name in names:
            cfg = json.load(open(os.path.join(a.templates, name, "tokenizer_config.json"), encoding="utf-8"))
            tmpl = env.from_string(cfg["chat_template"])
            special = special_tokens_map(cfg)
            rng = random.Random(f"{a.seed}:{name}")
            for _ in range(a.count):
                msgs, tools, kwargs = conversation(rng, name)
                # JSON round trip: the C++ side reads exactly these values.
                msgs = json.loads(json.dumps(msgs))
                gen = rng.random() < 0.5
                case = {"template": name, "messages": msgs, "tools": tools, "add_generation_prompt": gen,
                        "kwargs": kwargs, "now": NOW}
                try:
                    case["expected"] = tmpl.render(messages=msgs, tools=tools, documents=None,
                                                   add_generation_prompt=gen, **special, **kwargs)
                except Raised:
                    case["error"] = "raised"
                except Exception as e:  # the C++ side must fail too
                    case["error"] = type(e).__name__
                out.write(json.dumps(case, ensure_ascii=False) + "\n")
    print(f"jinja2 {jinja2.__version__}: {len(names)} templates x {a.count} conversations -> {a.out}")


if __name__ == "__main__":
    sys.exit(main())
