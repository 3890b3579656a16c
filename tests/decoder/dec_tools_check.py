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


# chat with tools: a forced call (bounded by max_tokens here), the same call streamed
req = {"messages": USER, "tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
       "max_tokens": 8, "temperature": 0}
st, j = post("/v1/chat/completions", req)
ch = j["choices"][0]
check(st == 200 and ch["message"]["tool_calls"][0]["function"]["name"] == "get_weather", "forced call named get_weather")
check(ch["finish_reason"] == "length" and j["usage"]["completion_tokens"] == 8, "cut by max_tokens: finish_reason length")
st, text = post("/v1/chat/completions", dict(req, stream=True), raw=True)
args = "".join(tc["function"].get("arguments", "") for _, e in events(text) if e
               for tc in e["choices"][0]["delta"].get("tool_calls", []))
check(args == ch["message"]["tool_calls"][0]["function"]["arguments"], "streamed tool_call deltas equal the body's arguments")
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
    (dict(req, tool_choice="required", tools=TOOLS * 1 + [{"type": "function", "function": {"name": "b"}}]), "tool_choice"),
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
check(st == 200 and j["stop_reason"] == "tool_use" and j["content"][-1]["type"] == "tool_use" and j["usage"]["output_tokens"] == 256,
      "messages: a forced tool_use closed by the server at 256 tokens")
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
