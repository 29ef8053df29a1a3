#!/usr/bin/env python3
"""gen_tokenizer_golden.py: golden token ids and chat prompts for tests/test_tokenizer.c.

Run from the repo root with the project venv (CI never runs this; its output is committed):
    /work/pyenv/bin/python tests/golden/gen_tokenizer_golden.py
Writes
    tests/golden/tokenizer_strings.txt   the test strings, one per line, escaped (see esc())
    tests/golden/tokenizer_smollm2.txt   ids per string (one line each, same order)
    tests/golden/tokenizer_qwen2.txt     ids per string for Qwen2.5-Coder (0.5B GGUF)
    tests/golden/tokenizer_chat.txt      chat prompts rendered by each GGUF's jinja template
    tests/golden/tokenizer_wiki.txt      id count + checksum for all of wikitext-2 wiki.test.raw
    build/tokjson/smollm2/{tokenizer.json,tokenizer_config.json}   (ignored; for the json loader test)

Reference tokenizers (HF `tokenizers`, built by transformers from the GGUF files):
  * Qwen2: AutoTokenizer.from_pretrained(gguf_file=...) as is: Split(qwen2 regex, isolated) +
    ByteLevel(use_regex=False), no normalizer (= llama.cpp). The original Qwen2 tokenizer.json
    also has an NFC normalizer; the strings where that changes the ids are printed (not used).
  * SmolLM2: transformers maps tokenizer.ggml.pre='smollm' to a plain GPT-2 ByteLevel
    pre-tokenizer, but SmolLM2's own tokenizer.json (and llama.cpp's 'smollm') first isolates
    every digit: Sequence[Digits(individual_digits=True), ByteLevel(add_prefix_space=False,
    use_regex=True)]. We set that pre-tokenizer on the GGUF-built tokenizer.
"""
import json
import os
import sys
import unicodedata

from tokenizers import pre_tokenizers, normalizers
from transformers import AutoTokenizer

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MODELS = os.environ.get("SKV_MODELS_DIR", os.path.join(ROOT, "models"))
GOLD = os.path.join(ROOT, "tests", "golden")

STRINGS = [
    "",
    "Hello world",
    "Hello, world! How are you today?",
    "The quick brown fox jumps over the lazy dog.",
    " leading space",
    "  two leading spaces",
    "trailing space ",
    "trailing spaces   ",
    "multiple   spaces   inside",
    "don't can't won't I'm you're we've they'll he'd it's",
    "I'LL DON'T WE'VE SHE'S THEY'RE I'M HE'D",
    "'s 't 're 've 'm 'll 'd ' s",
    "rock 'n' roll ''quoted'' `backticks`",
    "0", "7 8 9",
    "12345678901234567890",
    "3.14159265358979 and 2.71828",
    "Price: $1,234,567.89 (approx. 1.2e6)",
    "version 1.2.3-rc4 build 20240101",
    "x1y22z333 a1b2c3",
    "tab\tseparated\tvalues\t",
    "\ttab at start",
    "line one\nline two\nline three",
    "windows\r\nline\r\nendings\r\n",
    "mixed \t \n \r\n  spaces\n\n\nand newlines",
    "\n\n\n",
    "   \n   \n",
    "a\n\n b \n\t c\t\n",
    "    ",
    "\t\t\t",
    "end with newline\n",
    "def add(a, b):\n    return a + b\n",
    "int main(void) {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}\n",
    "for (int i = 0; i < n; i++) { x[i] += y[i] * 2; }",
    "fn main() -> Result<(), Box<dyn Error>> { let v: Vec<u8> = vec![1, 2, 3]; Ok(()) }",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;",
    "const f = async (x) => { await fetch(`/api/${x}`); };",
    "#include <stdio.h>\n#define MAX(a,b) ((a)>(b)?(a):(b))",
    "<html><body class=\"main\">Hi &amp; bye</body></html>",
    "{\"key\": [1, 2.5, null, true], \"nested\": {\"a\": \"b\"}}",
    "    if x:\n        pass\n    else:\n        return None",
    "!!!???...,,,;;;:::---___===+++***",
    "email@example.com https://example.org/path?q=1&r=2#frag",
    "café naïve résumé façade über straße",
    "Ça va? Él está aquí. Niño, corazón.",
    "日本語のテキストです。漢字とひらがな。",
    "中文测试：你好，世界！",
    "한국어 텍스트입니다",
    "Привет, мир! Как дела?",
    "Γειά σου Κόσμε",
    "مرحبا بالعالم",
    "שלום עולם",
    "नमस्ते दुनिया",
    "สวัสดีชาวโลก",
    "emoji 😀🎉👍🏽 family 👨‍👩‍👧‍👦 flags 🇫🇷🇯🇵",
    "e\u0301 a\u0300 o\u0308 combining marks n\u0303",
    "zero\u200bwidth\u200cjoiner\u200d",
    "nbsp\u00a0here and\u3000ideographic space",
    "em\u2003space thin\u2009space\u2028line sep",
    "control \x01\x02\x1f chars \x7f",
    "fullwidth ＡＢＣ １２３",
    "superscripts x² y³ ½ ¾ Ⅻ ٣٤٥ ۷",
    "math ∑∫√∞≠≤≥ arrows ←→↑↓",
    "<|im_start|>user\nHello<|im_end|>\n",
    "text<|endoftext|>more text",
    "<|im_start|><|im_end|><|im_start|>",
    "almost special <|im_start|| <|im_end and <|endoftext|",
    "<tool_call>{\"name\": \"f\"}</tool_call>",
    "<file_sep><repo_name>x",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "                                                                ",
    "ab" * 40,
    "Supercalifragilisticexpialidocious antidisestablishmentarianism",
    "CamelCaseIdentifier snake_case_name SCREAMING_CASE kebab-case",
    "it'\u017f ok",
    "\u0085next line\u0085",
    "x \u00a0y\u00a0 \u00a0",
    "1\n2\r\n3\r4",
    "a.b,c;d:e!f?g",
    "\u00e9\u00e9\u00e9 \u0438\u0438\u0438 \u4e00\u4e00",
    "ctrl\x04\x06\x13x\x14\x16\x1d end a\x04b",
    "planes \U00050000\U00090001 \U00010348",
]


WIKI = os.path.join(os.environ.get("SKV_DATA_DIR") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "data"), "wikitext2", "wiki.test.raw")


def fnv1a64(ids):
    h = 0xcbf29ce484222325
    for b in b"".join(int(i).to_bytes(4, "little", signed=True) for i in ids):
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def esc(s):
    """One line per string: \\n \\r \\t \\\\ and \\xHH for other control bytes; UTF-8 otherwise."""
    out = []
    for ch in s:
        o = ord(ch)
        if ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif o < 0x20 or o == 0x7F or o in (0x85, 0x2028, 0x2029):
            out.append("".join("\\x%02x" % b for b in ch.encode("utf-8")))
        else:
            out.append(ch)
    return "".join(out)


def load(gguf):
    return AutoTokenizer.from_pretrained(MODELS, gguf_file=gguf)


def ids_of(tok, s):
    return tok.backend_tokenizer.encode(s, add_special_tokens=False).ids


def write_ids(path, tok):
    with open(path, "w") as f:
        for s in STRINGS:
            f.write(" ".join(map(str, ids_of(tok, s))) + "\n")


def chat(tok, system, user):
    msgs = ([{"role": "system", "content": system}] if system is not None else []) + [
        {"role": "user", "content": user}]
    return tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)


def main():
    assert len(STRINGS) >= 60
    for s in STRINGS:
        assert "\n" not in esc(s)
    with open(os.path.join(GOLD, "tokenizer_strings.txt"), "w") as f:
        for s in STRINGS:
            f.write(esc(s) + "\n")

    # ---- SmolLM2
    smol = load("SmolLM2-135M-Instruct.Q4_1.gguf")
    plain = [ids_of(smol, s) for s in STRINGS]
    smol.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)])
    nd = sum(1 for s, p in zip(STRINGS, plain) if ids_of(smol, s) != p)
    print("smollm2: %d strings differ between transformers' GGUF pre-tokenizer and Digits+ByteLevel" % nd)
    write_ids(os.path.join(GOLD, "tokenizer_smollm2.txt"), smol)
    jdir = os.path.join(ROOT, "build", "tokjson", "smollm2")
    os.makedirs(jdir, exist_ok=True)
    smol.backend_tokenizer.save(os.path.join(jdir, "tokenizer.json"))
    with open(os.path.join(jdir, "tokenizer_config.json"), "w") as f:
        json.dump({"chat_template": smol.chat_template, "bos_token": "<|im_start|>",
                   "eos_token": "<|im_end|>", "add_bos_token": False}, f)

    # ---- Qwen2.5-Coder
    qwen = load("qwen2.5-coder-0.5b.gguf")
    write_ids(os.path.join(GOLD, "tokenizer_qwen2.txt"), qwen)
    qwen15 = load("qwen2.5-coder-1.5b.gguf")
    same = all(ids_of(qwen, s) == ids_of(qwen15, s) for s in STRINGS)
    print("qwen2 0.5b vs 1.5b ids equal on all strings:", same)
    nfc = [s for s in STRINGS if ids_of(qwen, unicodedata.normalize("NFC", s)) != ids_of(qwen, s)]
    print("qwen2: strings whose ids change under the original NFC normalizer:", [esc(s) for s in nfc])

    # ---- whole wikitext-2 test file: count + FNV-1a-64 of the ids (int32 little-endian)
    if os.path.exists(WIKI):
        text = open(WIKI, encoding="utf-8").read()
        with open(os.path.join(GOLD, "tokenizer_wiki.txt"), "w") as f:
            f.write("# wikitext-2 wiki.test.raw: model, token count, FNV-1a-64 of the ids as int32 LE\n")
            for name, tok in (("smollm2", smol), ("qwen2", qwen)):
                ids = ids_of(tok, text)
                f.write("%s %d %016x\n" % (name, len(ids), fnv1a64(ids)))

    # ---- chat prompts
    cases = [(None, "Hello!"), ("You are terse.", "What is 2+2?"), ("", "Hi\nthere")]
    with open(os.path.join(GOLD, "tokenizer_chat.txt"), "w") as f:
        f.write("# model<TAB>system (\\N = none)<TAB>user<TAB>rendering; escaped like tokenizer_strings.txt\n")
        for name, tok in (("smollm2", smol), ("qwen2", qwen), ("qwen2-1.5b", qwen15)):
            for system, user in cases:
                r = chat(tok, system, user)
                f.write("%s\t%s\t%s\t%s\n" % (name, "\\N" if system is None else esc(system), esc(user), esc(r)))
    print("wrote golden files to", GOLD)


if __name__ == "__main__":
    sys.exit(main())
