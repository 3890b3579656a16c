# pdb_api_fields.py: issue 19's field rule against a running server (a decoder or a front, which
# parses with the same code): every row of docs/api.md's field table (the parser's own list,
# checked by tests/core/test_openai) is sent once to each endpoint it names, with the row's
# sample (a completions one and a chat one where they differ); honoured and accepted fields
# must get a 200, refused ones a 400 whose param names the field; an unknown field is a 400
# naming it. With --all, also what the honoured fields promise: logprobs (greedy token = top-1,
# descending, stream == non-stream, chat bytes == the text), n = 2 (choice 0 == the n = 1
# answer, stream == non-stream), echo, logit_bias, JSON mode whose every answer parses, and tools
# beside them (a forced call with logprobs; n > 1 with tools, a forced call per choice; JSON mode
# with tools refused).
# Usage: python3 pdb_api_fields.py URL DOCS_API_MD [--all]; exit 0 when every check passed.
import json, re, sys, urllib.request, urllib.error
URL, DOC = sys.argv[1], sys.argv[2]
fails = []
def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond: fails.append(what)
def post(path, body, raw=False):
    rq = urllib.request.Request(URL + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(rq, timeout=300) as r: data, st = r.read(), r.status
    except urllib.error.HTTPError as e: data, st = e.read(), e.code
    if raw: return st, data
    return st, json.loads(data)
def stream(path, body):
    st, data = post(path, dict(body, stream=True), raw=True)
    assert st == 200, (st, data)
    chunks = [json.loads(l[6:]) for l in data.decode().split("\n\n") if l.startswith("data: ") and l != "data: [DONE]"]
    assert data.decode().rstrip().endswith("data: [DONE]"), data[-200:]
    return chunks
model = json.loads(urllib.request.urlopen(URL + "/v1/models").read())["data"][0]["id"]
EP = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
BASE = {"completions": {"prompt": "Hello", "max_tokens": 3, "temperature": 0},
        "chat": {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3, "temperature": 0}}

# 1. every row of the table, once per endpoint
rows = []
doc = open(DOC).read()
table = doc[doc.index("<!-- fields:begin -->"):doc.index("<!-- fields:end -->")]
for line in table.splitlines():
    m = re.match(r"\| `([^`]+)` \| ([^|]+)\| (\w+) \| (.*?) \| [^|]*\|$", line)
    if not m: continue
    samples = [json.loads(x.replace("@MODEL@", model)) for x in re.findall(r"`(\{.*?\})`(?= |$)", m.group(4))]
    rows.append((m.group(1), [e.strip() for e in m.group(2).split(",")], m.group(3), samples))
check(len(rows) >= 40, f"{len(rows)} rows in docs/api.md's field table")
for name, eps, rule, samples in rows:
    for e in eps:
        sample = samples[-1] if e == "chat" else samples[0]
        st, r = post(EP[e], dict(BASE[e], **sample))
        if rule == "refused":
            check(st == 400 and r["error"]["param"] == name, f"{name} on {e}: refused, 400 naming it ({st} {r.get('error', {}).get('param')})")
        else:
            check(st == 200 and r["choices"], f"{name} on {e}: {rule}, 200 ({st} {r.get('error')})")
for e in EP:
    st, r = post(EP[e], dict(BASE[e], frobnicate=1))
    check(st == 400 and r["error"]["param"] == "frobnicate" and r["error"]["code"] == "unknown_parameter", f"unknown field on {e}: 400 naming it")

# 1b. every row of the message-field table: its sample once (honoured/accepted: 200; refused: 400
# naming messages[k].field, k the message that carries it), and the field on a role it does not
# belong to (400 naming it); unknown keys of a message, a text part and a call name their path
mtable = doc[doc.index("<!-- message-fields:begin -->"):doc.index("<!-- message-fields:end -->")]
mrows = 0
for line in mtable.splitlines():
    m = re.match(r"\| `([^`]+)` \| ([^|]+)\| (\w+) \| `(\[.*?\])` \| [^|]*\|$", line)
    if not m: continue
    mrows += 1
    name, roles, rule, msgs = m.group(1), [x.strip() for x in m.group(2).split(",")], m.group(3), json.loads(m.group(4))
    st, r = post(EP["chat"], dict(BASE["chat"], messages=msgs))
    k = max(i for i, x in enumerate(msgs) if x.get(name) is not None)
    if rule == "refused":
        check(st == 400 and r["error"]["param"] == f"messages[{k}].{name}", f"message field {name}: refused, 400 naming messages[{k}].{name} ({st} {r.get('error', {}).get('param')})")
    else:
        check(st == 200 and r["choices"], f"message field {name}: {rule}, 200 ({st} {r.get('error')})")
    other = [x for x in ("system", "user", "assistant", "tool") if x not in roles]
    if other:
        bad = [{"role": "user", "content": "Hi"}, {"role": other[0], "content": "x", name: msgs[k][name]}]
        st, r = post(EP["chat"], dict(BASE["chat"], messages=bad))
        check(st == 400 and r["error"]["param"] == f"messages[1].{name}", f"message field {name} on a {other[0]} message: 400 naming it ({st})")
check(mrows >= 8, f"{mrows} rows in docs/api.md's message-field table")
U = {"role": "user", "content": "Hi"}
for msgs, param in (([dict(U, frobnicate=1)], "messages[0].frobnicate"),
                    ([{"role": "user", "content": [{"type": "text", "text": "Hi", "cache_control": {"type": "ephemeral"}}]}], "messages[0].content[0].cache_control"),
                    ([U, {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}, "index": 0}]}],
                     "messages[1].tool_calls[0].index")):
    st, r = post(EP["chat"], dict(BASE["chat"], messages=msgs))
    check(st == 400 and r["error"]["param"] == param, f"unknown key: 400 naming {param} ({st} {r.get('error', {}).get('param')})")
st, r = post(EP["chat"], dict(BASE["chat"], messages=[dict(U, name=None), {"role": "assistant", "content": "Hello", "refusal": None}, U]))
check(st == 200, f"null message fields are absent: an answer's own message goes back as it is ({st})")

if '--all' not in sys.argv:
    print(f"{len(fails)} failure(s)")
    sys.exit(1 if fails else 0)

# 2. logprobs
for e in EP:
    body = dict(BASE[e], max_tokens=8, ignore_eos=True, return_token_ids=True)
    body.update({"logprobs": 5} if e == "completions" else {"logprobs": True, "top_logprobs": 5})
    st, r = post(EP[e], body)
    c = r["choices"][0]
    if e == "chat":
        ent = c["logprobs"]["content"]
        lps, tops = [x["logprob"] for x in ent], [[t["logprob"] for t in x["top_logprobs"]] for x in ent]
        toks = [x["token"] for x in ent]
        first = [x["top_logprobs"][0]["token"] for x in ent]
        check(b"".join(bytes(x["bytes"]) for x in ent).decode("utf-8", "replace") == c["message"]["content"], "chat logprobs: the bytes are the text")
    else:
        lp = c["logprobs"]
        lps, tops, toks = lp["token_logprobs"], [sorted(d.values(), reverse=True) for d in lp["top_logprobs"]], lp["tokens"]
        first = [max(d, key=d.get) for d in lp["top_logprobs"]]
        check(lp["text_offset"][0] == 0 and all(b >= a for a, b in zip(lp["text_offset"], lp["text_offset"][1:])), "completions logprobs: text offsets")
    check(len(lps) == 8 and all(x <= 0 for x in lps), f"{e} logprobs: 8 entries, all <= 0")
    check(all(len(t) == 5 and t == sorted(t, reverse=True) for t in tops), f"{e} logprobs: 5 alternatives, descending")
    check(all(abs(a - t[0]) == 0 for a, t in zip(lps, tops)) and toks == first, f"{e} logprobs: greedy token is the top-1, same number")
    chunks = stream(EP[e], body)
    if e == "chat":
        s_lps = [x["logprob"] for ch in chunks for cc in ch["choices"] if cc.get("logprobs") for x in cc["logprobs"]["content"]]
    else:
        s_lps = [x for ch in chunks for cc in ch["choices"] if cc.get("logprobs") for x in cc["logprobs"]["token_logprobs"]]
    check(s_lps == lps, f"{e} logprobs: stream == non-stream")

# 3. n = 2, echo, logit_bias
for e in EP:
    body = dict(BASE[e], max_tokens=6, temperature=1.0, seed=11, ignore_eos=True, return_token_ids=True)
    st, one = post(EP[e], body)
    st, two = post(EP[e], dict(body, n=2))
    ids = [c["token_ids"] for c in sorted(two["choices"], key=lambda c: c["index"])]
    check(st == 200 and len(ids) == 2 and ids[0] == one["choices"][0]["token_ids"], f"{e} n=2: two choices, choice 0 == the n=1 answer")
    check(ids[0] != ids[1], f"{e} n=2: the choices sample their own streams")
    check(two["usage"]["completion_tokens"] == 12, f"{e} n=2: usage counts both choices ({two['usage']['completion_tokens']})")
    chunks = stream(EP[e], dict(body, n=2))
    s_ids = {0: [], 1: []}
    for ch in chunks:
        for cc in ch["choices"]: s_ids[cc["index"]] += cc.get("token_ids") or []
    check([s_ids[0], s_ids[1]] == ids, f"{e} n=2: stream == non-stream per index")
    st, b = post(EP[e], dict(body, max_tokens=4, temperature=0, logit_bias={"777": 100}))
    check(b["choices"][0]["token_ids"] == [777] * 4, f"{e} logit_bias +100 on 777: every token is 777 ({b['choices'][0]['token_ids']})")
st, a = post("/v1/completions", dict(BASE["completions"], max_tokens=5))
st, b = post("/v1/completions", dict(BASE["completions"], max_tokens=5, echo=True))
check(b["choices"][0]["text"] == "Hello" + a["choices"][0]["text"], "echo: the prompt's text, then the same answer")
ch = stream("/v1/completions", dict(BASE["completions"], max_tokens=5, echo=True))
check("".join(cc["text"] for c in ch for cc in c["choices"]) == b["choices"][0]["text"], "echo: streamed the same")

# 4. JSON mode: every answer parses, whatever the seed and the budget
bad = 0
for i in range(12):
    body = dict(BASE["chat"], temperature=1.0, seed=100 + i, max_tokens=[2, 3, 5, 9, 17, 40][i % 6], response_format={"type": "json_object"})
    if i % 2:
        ch = stream("/v1/chat/completions", body)
        text = "".join(cc["delta"].get("content") or "" for c in ch for cc in c["choices"])
    else:
        st, r = post("/v1/chat/completions", body)
        text = r["choices"][0]["message"]["content"]
    try: ok = isinstance(json.loads(text), dict)
    except ValueError: ok = False
    if not ok: bad += 1; print("  not an object:", repr(text))
check(bad == 0, f"JSON mode: 12 answers (seeds 100..111, max_tokens 2..40, stream and not) all parse as objects")
st, r = post("/v1/chat/completions", dict(BASE["chat"], response_format={"type": "json_object"}, stop=["}"]))
check(st == 400 and r["error"]["param"] == "stop", "JSON mode with stop: 400 naming stop")

# 5. tools with the other fields: a forced call's choice carries tool_calls and logprobs (stream ==
# non-stream); n > 1 and JSON mode with active tools are 400s naming n / response_format
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
body = dict(BASE["chat"], max_tokens=6, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "f"}}, logprobs=True, top_logprobs=2)
st, r = post("/v1/chat/completions", body)
c = r["choices"][0] if st == 200 else {}
ent = (c.get("logprobs") or {}).get("content") or []
check(st == 200 and len(c["message"].get("tool_calls") or []) == 1 and c["message"]["tool_calls"][0]["function"]["name"] == "f",
      f"tools + logprobs: the forced call is in tool_calls ({st})")
check(len(ent) == r.get("usage", {}).get("completion_tokens", -1) and all(len(x["top_logprobs"]) == 2 for x in ent),
      f"tools + logprobs: one entry per generated token, 2 alternatives ({len(ent)})")
chunks = stream("/v1/chat/completions", body)
s_lps = [x["logprob"] for ch in chunks for cc in ch["choices"] if cc.get("logprobs") for x in cc["logprobs"]["content"]]
s_args = "".join(t["function"].get("arguments") or "" for ch in chunks for cc in ch["choices"] for t in cc["delta"].get("tool_calls") or [])
check(s_lps == [x["logprob"] for x in ent] and s_args == c["message"]["tool_calls"][0]["function"]["arguments"],
      "tools + logprobs: stream == non-stream (logprobs and arguments)")
# n > 1 with tools: one composer per choice; choice 0 is the n = 1 answer, the stream the body
def is_obj(t):
    try: return isinstance(json.loads(t), dict)
    except ValueError: return False
TWO = TOOLS + [{"type": "function", "function": {"name": "g2"}}]
for label, extra in (("named", {"tool_choice": {"type": "function", "function": {"name": "f"}}}), ("required among 2", {"tool_choice": "required", "tools": TWO})):
    body = dict(BASE["chat"], tools=TOOLS, max_tokens=16, temperature=1.0, seed=21, return_token_ids=True)
    body.update(extra)
    st, one = post("/v1/chat/completions", body)
    st, two = post("/v1/chat/completions", dict(body, n=2))
    chs = sorted(two.get("choices", []), key=lambda c: c["index"]) if st == 200 else []
    fns = [(c["message"].get("tool_calls") or [{}])[0].get("function", {}) for c in chs]
    names = [t["function"]["name"] for t in body["tools"]]
    check(st == 200 and len(chs) == 2 and all(len(c["message"].get("tool_calls") or []) == 1 and c["finish_reason"] == "tool_calls" for c in chs)
          and all(f.get("name") in names and is_obj(f.get("arguments", "")) for f in fns), f"n = 2 with a {label} call: two choices, each one call of a tool, arguments that parse ({st})")
    check(chs and chs[0]["token_ids"] == one["choices"][0]["token_ids"] and fns[0] == one["choices"][0]["message"]["tool_calls"][0]["function"],
          f"n = 2 with a {label} call: choice 0 == the n = 1 answer")
    check(two.get("usage", {}).get("completion_tokens") == sum(len(c["token_ids"]) for c in chs), f"n = 2 with a {label} call: usage counts both choices")
    check(chs and chs[0]["token_ids"] != chs[1]["token_ids"], f"n = 2 with a {label} call: the choices sample their own streams")
    st, raw = post("/v1/chat/completions", dict(body, n=2, stream=True, stream_options={"include_usage": True}), raw=True)
    evs = [l for l in raw.decode().split("\n\n") if l.startswith("data: ")]
    fins = [json.loads(l[6:]) for l in evs[:-1] if any(cc.get("finish_reason") for cc in json.loads(l[6:])["choices"])]
    check(evs[-1] == "data: [DONE]" and evs.count("data: [DONE]") == 1 and len(fins) == 2 and "usage" in fins[-1] and "usage" not in fins[0],
          f"n = 2 with a {label} call, streamed: a final chunk per choice, usage on the last, one [DONE] at the end")
    chunks = stream("/v1/chat/completions", dict(body, n=2))
    s_ids, s_fn = {0: [], 1: []}, {0: {"name": "", "arguments": ""}, 1: {"name": "", "arguments": ""}}
    for ch in chunks:
        for cc in ch["choices"]:
            s_ids[cc["index"]] += cc.get("token_ids") or []
            for t in cc["delta"].get("tool_calls") or []:
                s_fn[cc["index"]]["name"] += t["function"].get("name") or ""
                s_fn[cc["index"]]["arguments"] += t["function"].get("arguments") or ""
    check([s_ids[0], s_ids[1]] == [c["token_ids"] for c in chs] and [s_fn[0], s_fn[1]] == fns, f"n = 2 with a {label} call: stream == non-stream per index")
st, r = post("/v1/chat/completions", dict(BASE["chat"], n=2, tools=TOOLS, seed=5, temperature=1.0))
check(st == 200 and len(r["choices"]) == 2 and all(isinstance(c["message"]["content"], str) for c in r["choices"]), "n = 2 with tools (auto): two choices")
st, r = post("/v1/chat/completions", dict(BASE["chat"], tools=TOOLS, response_format={"type": "json_object"}))
check(st == 400 and r["error"]["param"] == "response_format", "JSON mode with tools: 400 naming response_format")
st, r = post("/v1/chat/completions", dict(BASE["chat"], n=2, tools=TOOLS, tool_choice="none"))
check(st == 200 and len(r["choices"]) == 2, "n = 2 with tools and tool_choice none: served")
print(f"{len(fails)} failure(s)")
sys.exit(1 if fails else 0)
