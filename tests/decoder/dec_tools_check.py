#!/usr/bin/env python3
"""dec_tools_check.py: HTTP checks of tools and /v1/messages on one decode-server (stdlib only).

Every check prints "ok ..." or raises; usage: dec_tools_check.py URL MODEL_ID
"""
import json
import sys
import urllib.error
import urllib.request

URL, MODEL = sys.argv[1], sys.argv[2]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
USER = [{"role": "user", "content": "Weather in Paris?"}]


def post(path, body, raw=False):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(URL + path, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            text = r.read().decode()
            return r.status, text if raw else json.loads(text)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read().decode())


def check(cond, what):
    if not cond:
        raise SystemExit(f"FAIL {what}")
    print(f"ok   {what}")


def events(text):
    out = []
    for ev in text.split("\n\n"):
        if not ev.strip():
            continue
        lines = dict(l.split(": ", 1) for l in ev.split("\n") if ": " in l)
        out.append((lines.get("event"), json.loads(lines["data"]) if lines.get("data", "[DONE]") != "[DONE]" else None))
    return out


def is_object(text):
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


# chat with tools: a forced call (its arguments one JSON object within max_tokens), the same call streamed
req = {"messages": USER, "tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
       "max_tokens": 8, "temperature": 0}
st, j = post("/v1/chat/completions", req)
ch = j["choices"][0]
check(st == 200 and ch["message"]["tool_calls"][0]["function"]["name"] == "get_weather", "forced call named get_weather")
check(ch["finish_reason"] == "tool_calls" and j["usage"]["completion_tokens"] <= 8 and is_object(ch["message"]["tool_calls"][0]["function"]["arguments"]),
      f"forced call within max_tokens 8: the arguments are one JSON object, finish tool_calls ({ch['message']['tool_calls'][0]['function']['arguments']!r})")
st, text = post("/v1/chat/completions", dict(req, stream=True), raw=True)
args = "".join(tc["function"].get("arguments", "") for _, e in events(text) if e
               for tc in e["choices"][0]["delta"].get("tool_calls", []))
check(args == ch["message"]["tool_calls"][0]["function"]["arguments"], "streamed tool_call deltas equal the body's arguments")
# tool_choice required among several tools: the name is masked to one of the tools, the arguments
# to one object; greedy and sampled (8 seeds), stream and not, every answer is one call of a tool
THREE = TOOLS + [{"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}},
                 {"type": "function", "function": {"name": "now"}}]
names, bad = [], []
for i in range(10):
    body = {"messages": USER, "tools": THREE, "tool_choice": "required", "max_tokens": [14, 20, 40, 300][i % 4],
            "temperature": 0 if i < 2 else 1.0, "seed": 40 + i}
    if i % 2:
        st, text = post("/v1/chat/completions", dict(body, stream=True), raw=True)
        evs = [e for _, e in events(text) if e]
        tcs = [tc for e in evs for tc in e["choices"][0]["delta"].get("tool_calls", [])] if st == 200 else []
        call = {"name": "".join(tc["function"].get("name") or "" for tc in tcs),
                "arguments": "".join(tc["function"].get("arguments") or "" for tc in tcs)}
        finish = [e["choices"][0]["finish_reason"] for e in evs if e["choices"] and e["choices"][0].get("finish_reason")]
        n_calls, finish = len({tc["index"] for tc in tcs}), finish[-1] if finish else None
    else:
        st, j = post("/v1/chat/completions", body)
        m = j["choices"][0]["message"] if st == 200 else {}
        call, n_calls, finish = (m.get("tool_calls") or [{}])[0].get("function", {}), len(m.get("tool_calls") or []), j["choices"][0]["finish_reason"] if st == 200 else None
    names.append(call.get("name"))
    if not (st == 200 and n_calls == 1 and call.get("name") in ("get_weather", "get_time", "now") and is_object(call.get("arguments", ""))
            and finish == "tool_calls"):
        bad.append((i, st, n_calls, call, finish))
check(not bad, f"tool_choice required among 3 tools: 10 answers (greedy and sampled, stream and not, max_tokens 14..300), "
               f"each one call of a tool with an object of arguments: {names} {bad}")
st, a = post("/v1/chat/completions", {"messages": USER, "tools": THREE, "tool_choice": "required", "max_tokens": 40, "temperature": 0})
st, b = post("/v1/chat/completions", {"messages": USER, "tools": THREE, "tool_choice": "required", "max_tokens": 40, "temperature": 0, "stream": True}, raw=True)
s_args = "".join(tc["function"].get("arguments") or "" for _, e in events(b) if e for tc in e["choices"][0]["delta"].get("tool_calls", []))
check(a["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] == s_args, "required among 3: the stream's arguments equal the body's (greedy)")
st, j = post("/v1/chat/completions", {"messages": USER, "tools": THREE, "tool_choice": "required", "max_tokens": 13})
check(st == 400 and j["error"]["param"] == "max_tokens", f"required among 3 with max_tokens 13 (< now + fence + {{}}): 400 naming max_tokens")
st, j = post("/v1/chat/completions", {"messages": USER, "tools": THREE, "tool_choice": "required", "stop": ["}"]})
check(st == 400 and j["error"]["param"] == "stop", "a forced call with stop strings: 400 naming stop")
# tool_choice none: plain content, no tool_calls; auto: random weights answer with content
for choice in ("none", "auto"):
    st, j = post("/v1/chat/completions", {"messages": USER, "tools": TOOLS, "tool_choice": choice, "max_tokens": 4, "temperature": 0})
    m = j["choices"][0]["message"]
    check(st == 200 and isinstance(m["content"], str) and "tool_calls" not in m, f"tool_choice {choice}: content only")
# the round trip on the decoder: an assistant call and a tool output render; the answer is content
convo = USER + [{"role": "assistant", "content": None, "tool_calls": [
    {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "18 C"}]
st, j = post("/v1/chat/completions", {"messages": convo, "tools": TOOLS, "max_tokens": 4, "temperature": 0})
check(st == 200 and j["choices"][0]["message"]["content"], "answer after a tool output")
# refusals name their field
for body, param in [
    (dict(req, tool_choice={"type": "function", "function": {"name": "nope"}}), "tool_choice"),
    ({"messages": USER + [{"role": "assistant", "content": "text", "tool_calls": convo[1]["tool_calls"]}]}, "messages"),
]:
    st, j = post("/v1/chat/completions", body)
    check(st == 400 and j["error"]["param"] == param, f"400 naming {param}: {j['error']['message'][:80]}")

# /v1/messages
st, j = post("/v1/messages", {"model": MODEL, "max_tokens": 5, "messages": [{"role": "user", "content": "Hi"}], "temperature": 0})
check(st == 200 and j["type"] == "message" and j["stop_reason"] == "max_tokens" and j["usage"]["output_tokens"] == 5,
      "messages: a text answer cut by max_tokens")
first = j["content"][0]["text"]
st, j = post("/v1/messages", {"model": MODEL, "max_tokens": 5, "messages": [{"role": "user", "content": "Hi"}], "temperature": 0,
                              "stop_sequences": [first[1:3]]} if len(first) >= 3 else {"model": MODEL, "max_tokens": 5, "messages": []})
if len(first) >= 3:
    check(st == 200 and j["stop_reason"] == "stop_sequence" and j["stop_sequence"] == first[1:3], "stop_sequence reported with its string")
st, text = post("/v1/messages", {"model": MODEL, "max_tokens": 5, "stream": True, "messages": [{"role": "user", "content": "Hi"}],
                                 "temperature": 0}, raw=True)
evs = events(text)
check([e for e, _ in evs][0] == "message_start" and [e for e, _ in evs][-1] == "message_stop", "messages stream: start .. stop")
got = "".join(d["delta"]["text"] for e, d in evs if e == "content_block_delta")
check(got == first, "streamed text equals the non-stream text")
# greedy: at temperature 1 a random model may sample the call's end token and go on with text
# after the call (allowed without disable_parallel_tool_use), which this check is not about
st, j = post("/v1/messages", {"model": MODEL, "max_tokens": 300, "messages": [{"role": "user", "content": "Hi"}], "temperature": 0,
                              "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}], "tool_choice": {"type": "any"}})
check(st == 200 and j["stop_reason"] == "tool_use" and j["content"][-1]["type"] == "tool_use" and j["usage"]["output_tokens"] <= 256
      and "pdbridge_unparsed_arguments" not in j["content"][-1]["input"],
      f"messages: a forced tool_use, its input an object closed within the 256-token bound ({j['usage']['output_tokens']} tokens)")
MTOOLS = [{"name": "get_weather", "input_schema": {"type": "object"}}, {"name": "get_time", "input_schema": {"type": "object"}}]
for stream in (False, True):
    for seed in (1, 2, 3):
        body = {"model": MODEL, "max_tokens": 60, "messages": [{"role": "user", "content": "Hi"}], "tools": MTOOLS,
                "tool_choice": {"type": "any"}, "temperature": 1.0, "stream": stream}
        st, r = post("/v1/messages", body, raw=stream)
        if stream:
            evs = events(r)
            starts = [d["content_block"] for e, d in evs if e == "content_block_start"]
            inputs = "".join(d["delta"]["partial_json"] for e, d in evs if e == "content_block_delta" and d["delta"]["type"] == "input_json_delta")
            reason = [d["delta"]["stop_reason"] for e, d in evs if e == "message_delta"][0]
            uses = [b for b in starts if b["type"] == "tool_use"]
            ok = len(uses) == 1 and uses[0]["name"] in ("get_weather", "get_time") and is_object(inputs or "{}") and reason == "tool_use"
        else:
            uses = [b for b in r["content"] if b["type"] == "tool_use"]
            ok = (st == 200 and len(uses) == 1 and uses[0]["name"] in ("get_weather", "get_time") and r["stop_reason"] == "tool_use"
                  and "pdbridge_unparsed_arguments" not in uses[0]["input"])
        check(ok, f"messages: tool_choice any among 2 tools (seed {seed}, stream {stream}): one tool_use of a tool, its input an object")
for body, field in [
    ({"model": MODEL, "messages": [{"role": "user", "content": "Hi"}]}, "max_tokens"),
    ({"model": MODEL, "max_tokens": 5, "messages": [{"role": "user", "content": "Hi"}], "top_a": 1}, "top_a"),
    ({"model": MODEL, "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "document"}]}]}, "messages[0].content[0]"),
]:
    st, j = post("/v1/messages", body)
    check(st == 400 and j["type"] == "error" and j["error"]["type"] == "invalid_request_error" and field in j["error"]["message"],
          f"messages: 400 naming {field}")
st, j = post("/v1/messages", {"model": "claude-x", "max_tokens": 5, "messages": [{"role": "user", "content": "Hi"}]})
check(st == 404 and j["error"]["type"] == "not_found_error", "messages: unknown model is 404 not_found_error")
st, j = post("/v1/messages", b"{not json")
check(st == 400 and j["type"] == "error", "messages: bad JSON is a Messages-shaped 400")
