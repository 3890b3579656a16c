#!/usr/bin/env python3
# gen_tokenizer_golden: writes the golden token ids that tests/tokenizer/test_tokenizer.c
# compares pdbridge's C tokenizer against. Invariants: the string set is deterministic (fixed
# seed, no environment input), every line is {"text": str, "ids": [int]} encoded by the
# reference HF `tokenizers` library with add_special_tokens=False, and the file stays < 1 MB.
# A second file holds chat-template renderings ({"messages", "add_generation_prompt", "text",
# "ids"}) made with jinja2 from tokenizer_config.json's chat_template, the spec of pdb_chat.
#
# usage: gen_tokenizer_golden.py --tokenizer tokenizer.json --out deepseek_v3.jsonl
#            [--config tokenizer_config.json] [--chat-out deepseek_v3_chat.jsonl] [--dry-run]
# --dry-run needs neither tokenizers nor the tokenizer file: it writes the strings with
# "ids": null so the set can be reviewed (and sized) on a machine without the library.
import argparse
import json
import os
import random
import sys

from pdb_chat_template import BOS, EOS, render_chat

USER = "<\uff5cUser\uff5c>"
ASSISTANT = "<\uff5cAssistant\uff5c>"
PAD = "<\uff5c\u2581pad\u2581\uff5c>"
FIM_HOLE = "<\uff5cfim\u2581hole\uff5c>"
FIM_BEGIN = "<\uff5cfim\u2581begin\uff5c>"
FIM_END = "<\uff5cfim\u2581end\uff5c>"
TOOL_SEP = "<\uff5ctool\u2581sep\uff5c>"
PLACEHOLDER = "<\uff5cplace\u2581holder\u2581no\u2581%d\uff5c>"


def english():
    return [
        "Hello, world!",
        "The quick brown fox jumps over the lazy dog.",
        "It's a truth universally acknowledged, that a single man in possession of a good "
        "fortune, must be in want of a wife.",
        "I'm sure you'll agree: we've done what they'd said we'd do, haven't we?",
        "DON'T SHOUT. I'LL HEAR YOU'RE FINE. WE'VE GOT IT. THEY'D KNOW. HE'S HERE. I'M OK.",
        "Mr. Smith paid $1,234.56 on 2024-03-15 at 10:45 a.m. (UTC+01:00) for 3.5 kg of apples.",
        "Prefill is compute-bound; decode is memory-bandwidth-bound. The two phases want "
        "different hardware, so we split them across machines.",
        "e.g. i.e. etc. vs. cf. Dr. St. Jr. Ph.D. U.S.A. a.k.a. R&D AT&T",
        "\"Quoted,\" she said, 'single quoted', and `backticks`.",
        "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor "
        "incididunt ut labore et dolore magna aliqua. Ut enim ad minim veniam, quis nostrud "
        "exercitation ullamco laboris nisi ut aliquip ex ea commodo consequat.",
        "ALL CAPS SENTENCE WITH NUMBERS 123 AND SYMBOLS #@!",
        "camelCaseIdentifier snake_case_identifier kebab-case-identifier PascalCase",
        "Well...\n\nThat was unexpected.\nWasn't it?",
        "   leading spaces and trailing spaces   ",
        "a b c d e f g h i j k l m n o p q r s t u v w x y z",
        "Tokenization isn't easy; it's full of edge-cases (like this one).",
        "https://example.com/path/to/page?query=value&other=42#fragment",
        "user@example.org, admin+tag@sub.domain.co.uk",
        "The year 1999 ended; 2000 began. 1 2 3 4 5 6 7 8 9 10 100 1000 10000 100000",
        "Pi is approximately 3.14159265358979323846264338327950288419716939937510.",
        "He said: \u201cIt\u2019s fine\u201d \u2014 and left\u2026",
        "Q: What's 2+2?\nA: 4.\n",
        "- item one\n- item two\n  - nested item\n* star item\n1. numbered\n",
        "# Heading\n\n## Subheading\n\nSome **bold** and _italic_ text with a [link](http://x.y).",
        "| a | b |\n|---|---|\n| 1 | 2 |\n",
        "'s 't 're 've 'm 'll 'd",
        "'S 'T 'RE 'VE 'M 'LL 'D",
        "rock'n'roll o'clock y'all ma'am",
    ]


def cjk():
    return [
        "你好，世界！",
        "今天天气很好，我们去公园散步吧。",
        "机器学习是人工智能的一个分支，它使计算机能够从数据中学习。",
        "中华人民共和国成立于1949年10月1日。",
        "《红楼梦》是中国古典四大名著之一。",
        "「引用」『二重引用』【括弧】〔亀甲〕",
        "こんにちは、世界！",
        "日本語の文章を正しくトークン化できるか確認します。",
        "カタカナとひらがなと漢字が混ざった文です。",
        "ｶﾀｶﾅ ﾊﾝｶｸ",
        "東京都渋谷区1-2-3、電話03-1234-5678",
        "안녕하세요, 세계!",
        "한국어 문장을 토큰화합니다. 잘 되나요?",
        "서울특별시 강남구 테헤란로 123",
        "中文English混合text測試テスト한국어",
        "𠀀𠀁𠀂 (CJK Extension B) 𪚥 𰻞",
        "繁體中文與简体中文的區別",
        "㐀㐁㐂 Extension A",
        "ＡＢＣ　ｆｕｌｌｗｉｄｔｈ　１２３",
        "一二三四五六七八九十百千万亿",
        "〇一二三",
        "龥龦龧鿿",
        "ー〜・",
    ]


def other_scripts():
    return [
        "Привет, мир! Как дела?",
        "Γειά σου Κόσμε! Αλφάβητο: αβγδεζηθικλμνξοπρστυφχψω",
        "สวัสดีชาวโลก ภาษาไทยไม่มีช่องว่างระหว่างคำ",
        "नमस्ते दुनिया! हिन्दी भाषा",
        "வணக்கம் உலகம்",
        "გამარჯობა მსოფლიო",
        "Բարեւ աշխարհ",
        "ሰላም ልዑል",
        "Xin chào thế giới! Tiếng Việt có nhiều dấu.",
        "Zażółć gęślą jaźń. Příliš žluťoučký kůň úpěl ďábelské ódy.",
        "Ærøskøbing, Æsir, œuvre, straße, STRASSE, ﬁ ﬂ ligatures",
        "İstanbul ıİiI",
        "ᚠᛇᚻ᛫ᛒᛦᚦ runes",
        "∀x∈ℝ: x² ≥ 0; ∑ᵢ aᵢ = ∫₀¹ f(x) dx ≈ π/4 ≠ ∞",
        "┌──┬──┐\n│a │b │\n└──┴──┘",
        "♠♥♦♣ ★☆ ✓✗ ←↑→↓ ⇒⇔",
        "€100 £50 ¥1000 ₹500 ₿0.01 ¢25 ₩1000",
        "©®™ §¶ †‡ •·‣",
        "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕄𝕒𝕥𝕙 𝒮𝒸𝓇𝒾𝓅𝓉",
        "Ⅰ Ⅱ Ⅲ Ⅻ ⅰⅱⅲ",
        "½ ¼ ¾ ⅓ ⅔ ⅛",
        "x² y³ z¹⁰ H₂O CO₂",
        "١٢٣٤٥٦٧٨٩٠ ۱۲۳ ४५६ ๑๒๓",
        "①②③ ⑴⑵⑶ ⒈⒉⒊",
        "１２３４５６７",
    ]


def rtl():
    return [
        "مرحبا بالعالم",
        "اللغة العربية جميلة جداً، أليس كذلك؟",
        "العدد ١٢٣ والعدد 456 في جملة واحدة.",
        "שלום עולם",
        "עברית נכתבת מימין לשמאל.",
        "English then עברית then English again.",
        "\u200fRLM mark\u200e LRM mark \u202bembedding\u202c",
        "سلام دنیا! فارسی",
        "اردو زبان",
        "ܫܠܡܐ ܥܠܡܐ",
    ]


def code():
    return [
        "#include <stdio.h>\n\nint main(void) {\n    printf(\"Hello, world!\\n\");\n    return 0;\n}\n",
        "static inline uint64_t pdb_hash(const uint8_t *p, size_t n) {\n\tuint64_t h = 1469598103934665603ULL;\n\tfor (size_t i = 0; i < n; i++) { h ^= p[i]; h *= 1099511628211ULL; }\n\treturn h;\n}",
        "def fib(n: int) -> int:\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n",
        "class Foo(Bar):\n    def __init__(self, *args, **kwargs):\n        super().__init__(*args, **kwargs)\n        self._x = None  # private\n",
        "fn main() {\n    let v: Vec<i32> = (0..10).map(|x| x * x).collect();\n    println!(\"{:?}\", v);\n}\n",
        "impl<'a, T: Clone + 'a> Iterator for Foo<'a, T> { type Item = &'a T; }",
        "const add = (a, b) => a + b;\nconsole.log(`sum: ${add(1, 2)}`);\nlet x = a?.b ?? c;\n",
        "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(\"hi\")\n}\n",
        "SELECT id, name FROM users WHERE age >= 18 AND name LIKE 'A%' ORDER BY id DESC LIMIT 10;",
        "<!DOCTYPE html>\n<html>\n<head><title>Test</title></head>\n<body><p class=\"x\">Hi &amp; bye</p></body>\n</html>",
        "{\"key\": \"value\", \"list\": [1, 2, 3], \"nested\": {\"a\": null, \"b\": true}}",
        "#!/bin/bash\nset -euo pipefail\nfor f in *.txt; do\n  echo \"$f\" | wc -c >> out.log 2>&1\ndone\n",
        "\\documentclass{article}\n\\begin{document}\n$E = mc^2$ and \\[ \\int_0^\\infty e^{-x^2} dx = \\frac{\\sqrt{\\pi}}{2} \\]\n\\end{document}",
        "template <typename T>\nstd::vector<T> v{1, 2, 3};\nstd::cout << v[0] << std::endl;",
        "public static void main(String[] args) throws Exception { System.out.println(args.length); }",
        "x += 1; y -= 2; z *= 3; w /= 4; a <<= 1; b >>= 2; c &&= d; e ||= f; g ??= h;",
        "if (a == b && c != d || !e) { return a <= b ? c >= d : e; }",
        "    indented four\n        indented eight\n\t\ttabbed twice\n",
        "// comment\n/* block\n * comment */\n# hash comment\n-- sql comment\n",
        "0x1F 0xDEADBEEF 0b1010 0o777 1e-10 3.14f 1_000_000 42u64",
        "arr[i][j] = matrix[k](x)->field.member;",
        "@decorator\ndef f(): pass\n",
        "regex = r'^(?:[a-z0-9!#$%&\\'*+/=?^_`{|}~-]+)@\\w+\\.\\w{2,}$'",
        "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n-old\n+new\n",
        "Makefile:\nall:\n\t$(CC) -O2 -o $@ $^\n",
        "    \n\n    return;\n\n\n}",
        "print('a'); print(\"b\"); print('''c'''); print(\"\"\"d\"\"\")",
        "<?php echo $var; ?> <% erb %> {{ jinja }} {% block %}",
        "key: value\nlist:\n  - a\n  - b\nmap: {x: 1}\n",
        "[section]\nname = \"value\"\nnum = 3\n",
    ]


def digits():
    out = []
    seq = "12345678901234567890123456789012345678901234567890"
    for n in range(1, 41):
        out.append(seq[:n])
    for n in (1, 2, 3, 4, 5, 6, 7, 9, 10, 13, 16):
        out.append("x" + "9" * n + "y")
        out.append(" " + "0" * n)
    out += ["1,000,000", "3.14159", "-42", "+7", "1e100", "2024-01-01T00:00:00Z",
            "192.168.0.1", "v1.2.3", "abc123def456", "123abc", "a1b2c3d4", "1st 2nd 3rd 4th",
            "0000", "007", "$5.99", "50%", "10:30", "1/2", "(555) 123-4567"]
    return out


def whitespace():
    out = []
    for n in range(1, 17):
        out.append(" " * n)
    out += ["\t", "\t\t", "\t\t\t\t", "\n", "\n\n", "\n\n\n\n\n", "\r\n", "\r\n\r\n", "\r",
            "\r\r\n", " \n", "\n ", " \n ", "  \n\n  ", "\t\n\t", " \t \t ", "a  b", "a   b",
            "a\tb", "a\nb", "a\r\nb", "a \r\n b", "word \n", "word\n\n\nword", "x \t\n y",
            "line1\r\nline2\r\nline3\r\n", "   \n   \n   ", "a" + " " * 30 + "b",
            "trailing   ", "   leading", "\x0b\x0c", "a\x0bb\x0cc",
            "\u00a0", "a\u00a0b", "\u3000", "a\u3000b\u3000\u3000c", "\u2003em\u2002en\u2009thin",
            "\u0085", "a\u0085b", "a \u0085 b", "\u180e", "a\u180eb", "a \u180e b",
            "\u200b", "zero\u200bwidth", "\ufeffBOM", "a\u2028b\u2029c", "\u205f\u202f",
            "\x1c\x1d\x1e\x1f", "a\x1fb", "\x00", "nul\x00byte", "\x01\x02\x7f", "\u1680ogham",
            "end with newline\n", "  \t\r\n  x"]
    return out


def emoji():
    return [
        "😀", "😀😃😄😁", "Hello 👋 world 🌍!", "👍🏽 👍🏿 👋🏻",
        "👨\u200d👩\u200d👧\u200d👦", "👩\u200d💻 👨\u200d🚀 🧑\u200d🤝\u200d🧑",
        "🏳️\u200d🌈 🏴\u200d☠️", "🇺🇸🇯🇵🇨🇳🇩🇪", "1️⃣ 2️⃣ #️⃣ *️⃣",
        "❤️ ♥ ❤", "🏴󠁧󠁢󠁳󠁣󠁴󠁿", "🤷\u200d♀️🤦\u200d♂️", "emoji🙂inside🙃words",
        "🎉🎉🎉🎉🎉🎉🎉🎉", "☺️☹️", "🫠🫶🪿", "©️ ®️ ™️",
    ]


def specials():
    return [
        BOS, EOS, USER, ASSISTANT, PAD, BOS + "Hello" + EOS,
        BOS + "You are helpful." + USER + "Hi!" + ASSISTANT,
        USER + "What is 2+2?" + ASSISTANT + "4" + EOS + USER + "Thanks" + ASSISTANT,
        "text" + USER + "text", "  " + USER + "  ", "\n" + ASSISTANT + "\n",
        USER + USER + USER, EOS + EOS, "<\uff5cUser", "\uff5cUser\uff5c>", "<｜User｜ >",
        "<|EOT|>", "a<|EOT|>b", "<|EOT|", "<|eot|>", FIM_BEGIN + "def f():\n    " + FIM_HOLE + "\n" + FIM_END,
        "<" + USER + ">", "<<\uff5cUser\uff5c>>", PLACEHOLDER % 0, PLACEHOLDER % 42 + PLACEHOLDER % 791,
        "prefix" + PLACEHOLDER % 7 + "suffix", "<\uff5ctool\u2581calls\u2581begin\uff5c><\uff5ctool\u2581call\u2581begin\uff5c>function"
        + TOOL_SEP + "get_weather\n```json\n{\"city\": \"Paris\"}\n```<\uff5ctool\u2581call\u2581end\uff5c>",
        "<\uff5ctool\u2581outputs\u2581begin\uff5c><\uff5ctool\u2581output\u2581begin\uff5c>sunny<\uff5ctool\u2581output\u2581end\uff5c>",
        "<s> </s> <unk> <|endoftext|> [CLS] [SEP]",
        "<\uff5cbegin\u2581of\u2581sentence", "中文" + USER + "日本語" + ASSISTANT + "한국어",
        "123" + EOS + "456", "😀" + BOS + "😀",
    ]


def accents():
    return [
        "café résumé naïve coöperate façade", "cafe\u0301 re\u0301sume\u0301 (decomposed)",
        "e\u0301\u0302\u0303\u0304 stacked", "Z\u0351\u0368a\u0364\u0306l\u0310g\u0343o\u0345\u0318 text",
        "Ñandú piñata jalapeño", "Ångström Œdipus Ça", "ǅ ǈ ǋ titlecase", "ﬀ ﬃ ﬄ",
        "\u0301 leading combining", "a\u0308\u0304", "ḍ ṭ ṇ ś ṣ ā ī ū", "Å (U+212B) Å (U+00C5)",
        "\u0915\u094d\u0937", "n\u0303o\u0303", "ı̇", "ﾟ゙",
    ]


def punctuation():
    return [
        "!!!", "???", "...", "…", "?!?!", "!?", "---", "--", "—", "–", "-_-", "~~~",
        ",,,", ";;;", ":::", "((()))", "[[[]]]", "{{{}}}", "<<<>>>", "'''", "\"\"\"", "```",
        "``` python", "@#$%^&*", "*/", "/*", "//", "\\\\", "//\\\\//", "=>", "->", "::", "...?",
        "«guillemets»", "„German quotes“", "‘single’ “double”", "¡Hola! ¿Qué tal?",
        "。、！？", "，；：", "a.b.c", "a,b,c", "a-b-c", "a_b_c", "a/b/c", "a\\b\\c", "a|b|c",
        ".hidden", "-flag", "--long-flag", "#hashtag", "@mention", "$var", "%d", "&amp;",
        "'word", "\"word", "(word)", "[word]", "!word", "?word", "~word", "^word", "`word`",
        "word.", "word!\n", "word?\r\n", "x.\n\n", "end.\r\n\r\n", "...\n", " .\n", " !?\n\n",
        "\u00b7\u2022\u2023", "+-*/=<>", "™word", "©2024", "°C °F", "±5", "×÷",
    ]


def long_words():
    rnd = random.Random(1234)
    letters = "abcdefghijklmnopqrstuvwxyz"
    out = [
        "a" * 1000,
        "ab" * 300,
        "supercalifragilisticexpialidocious",
        "pneumonoultramicroscopicsilicovolcanoconiosis",
        "Donaudampfschifffahrtselektrizitätenhauptbetriebswerkbauunterbeamtengesellschaft",
        "".join(rnd.choice(letters) for _ in range(500)),
        "".join(rnd.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/") for _ in range(400)) + "==",
        "".join(rnd.choice("0123456789abcdef") for _ in range(256)),
        "中" * 300,
        "的是不了人我在有他这为之大来以个中上们" * 20,
        "ア" * 200,
        "한" * 200,
        " " * 500,
        "\n" * 200,
        "\t" * 100,
        "!" * 300,
        "1" * 500,
        "😀" * 100,
        "x" * 5000,
        "-" * 80 + "\n" + "=" * 80,
    ]
    return out


def prose_long():
    para = ("Disaggregated serving splits the prefill and decode phases of inference across "
            "different machines. The prefill engine computes the key-value cache for the prompt, "
            "which is compute-bound work, while the decode engine generates tokens one at a time, "
            "which is bound by memory bandwidth. ")
    zh = "分离式推理把预填充和解码两个阶段放在不同的机器上。预填充是计算密集型的，解码受内存带宽限制。"
    return [para * 8, zh * 10, (para + zh + "\n\n") * 3]


def fuzz(count=90):
    rnd = random.Random(20240601)
    pool = (list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
            + list(" \t\n\r.,;:!?'\"()[]{}<>-_=+*/\\|@#$%^&~`")
            + list("éüñçßøåæœ中文字日本語한국어Привет")
            + ["  ", "\r\n", "\n\n", "'s", "'ll", "😀", "👍🏽", "👨\u200d👩\u200d👧", "\u00a0",
               "\u3000", "１", "٣", "½", "\u0301", "ー", "。", "，", "123", "4567", USER,
               ASSISTANT, EOS, "<|EOT|>", "\u0085", "\u200b", "ｶ", "𝕄", "İ"])
    out = []
    for i in range(count):
        n = rnd.randint(1, 60 if i % 10 else 400)
        out.append("".join(rnd.choice(pool) for _ in range(n)))
    return out


def all_strings():
    groups = [[""], english(), cjk(), other_scripts(), rtl(), code(), digits(), whitespace(),
              emoji(), specials(), accents(), punctuation(), long_words(), prose_long(), fuzz()]
    seen = set()
    out = []
    for g in groups:
        for s in g:
            if s not in seen:
                seen.add(s)
                out.append(s)
    return out


def chat_cases():
    sys1 = {"role": "system", "content": "You are a helpful assistant."}
    sys2 = {"role": "system", "content": "Answer in French."}
    u1 = {"role": "user", "content": "Hello!"}
    a1 = {"role": "assistant", "content": "Hi! How can I help?"}
    u2 = {"role": "user", "content": "What is 2+2?\nExplain briefly."}
    a2 = {"role": "assistant", "content": "4, because 2 and 2 make 4."}
    cases = [
        ([u1], True), ([u1], False), ([sys1, u1], True), ([sys1, sys2, u1], True),
        ([sys1, u1, a1, u2], True), ([sys1, u1, a1, u2, a2], False), ([u1, a1], True),
        ([], True), ([], False), ([sys1], True), ([u1, sys2, a1], True),
        ([{"role": "user", "content": ""}], True),
        ([{"role": "user", "content": "你好，世界 😀\n\n  spaced  "}], True),
        ([{"role": "system", "content": ""}, {"role": "system", "content": "x"}, u1], True),
        ([{"role": "user", "content": "literal " + USER + " in content"}], True),
    ]
    return cases


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tokenizer", help="path to tokenizer.json")
    ap.add_argument("--config", help="tokenizer_config.json (default: beside --tokenizer)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--chat-out", help="default: <out dir>/deepseek_v3_chat.jsonl")
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args()

    strings = all_strings()
    chat_out = args.chat_out or os.path.join(os.path.dirname(os.path.abspath(args.out)),
                                             "deepseek_v3_chat.jsonl")
    tok = None
    if not args.dry_run:
        if not args.tokenizer:
            sys.exit("gen_tokenizer_golden: --tokenizer is required unless --dry-run")
        from tokenizers import Tokenizer
        import tokenizers
        print("tokenizers", tokenizers.__version__, file=sys.stderr)
        tok = Tokenizer.from_file(args.tokenizer)

    def enc(s):
        return None if tok is None else tok.encode(s, add_special_tokens=False).ids

    size = 0
    with open(args.out, "w", encoding="utf-8", newline="\n") as f:
        for s in strings:
            line = json.dumps({"text": s, "ids": enc(s)}, ensure_ascii=False) + "\n"
            size += len(line.encode("utf-8"))
            f.write(line)
    if tok is not None:
        import time
        big = "".join(all_strings()[1:])
        big = (big * (100000 // len(big) + 1))[:100000]
        t0 = time.perf_counter()
        nb = len(tok.encode(big, add_special_tokens=False).ids)
        print(f"reference speed: {len(big.encode())} bytes -> {nb} ids in "
              f"{time.perf_counter() - t0:.3f} s (first call, one thread)", file=sys.stderr)
    print(f"wrote {len(strings)} strings, {size} bytes to {args.out}", file=sys.stderr)
    if size >= 1 << 20:
        sys.exit("gen_tokenizer_golden: golden file is over 1 MB; trim the set")

    cfg = args.config
    if not cfg and args.tokenizer:
        cfg = os.path.join(os.path.dirname(os.path.abspath(args.tokenizer)), "tokenizer_config.json")
    if cfg and os.path.exists(cfg):
        try:
            template = json.load(open(cfg, encoding="utf-8"))["chat_template"]
            n = 0
            with open(chat_out, "w", encoding="utf-8", newline="\n") as f:
                for msgs, agp in chat_cases():
                    text = render_chat(template, msgs, agp)
                    f.write(json.dumps({"messages": msgs, "add_generation_prompt": agp,
                                        "text": text, "ids": enc(text)},
                                       ensure_ascii=False) + "\n")
                    n += 1
            print(f"wrote {n} chat cases to {chat_out}", file=sys.stderr)
        except ImportError as e:
            print(f"chat golden skipped: {e}", file=sys.stderr)
    else:
        print("chat golden skipped: no tokenizer_config.json", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
