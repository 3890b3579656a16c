#!/usr/bin/env python3
"""Golden renderings of conversations with tools for pdb_chat / pdb_tools (tests/tokenizer).

Each line of the output is {"messages", "tools", "text"}: "text" is what the chat_template of
tokenizer_config.json renders with jinja2 (tools/pdb_chat_template.py, shared with gen_tokenizer_golden.py) for
the messages, after the tools section below is appended as one more system message. The
template itself renders tool calls and tool outputs but no tool definitions, so the section is
pdbridge's (docs/tokenizer.md "Tools"); it is built here independently of the C code, from the
description in the docs, and parameters are serialized with json.dumps(ensure_ascii=False),
which matches jansson's JSON_PRESERVE_ORDER output for the schemas below.

usage: gen_tools_golden.py --config tokenizer_config.json --out deepseek_v3_tools.jsonl
"""
import argparse
import json
import sys

from pdb_chat_template import BOS, EOS, render_chat

CALLS_BEGIN, CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CALL_BEGIN, CALL_END, SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"


def tools_section(tools):
    s = "## Tools\nYou can call the following functions.\n"
    for t in tools:
        f = t["function"]
        s += "\n### " + f["name"] + "\n"
        if f.get("description") is not None:
            s += "Description: " + f["description"] + "\n"
        if f.get("parameters") is not None:
            s += "Parameters: " + json.dumps(f["parameters"], ensure_ascii=False) + "\n"
    s += ("\nTo call functions, answer with " + CALLS_BEGIN + ", then for each call " + CALL_BEGIN
          + "function" + SEP + "NAME\n```json\nARGUMENTS AS A JSON OBJECT\n```" + CALL_END
          + ", and after the last call " + CALLS_END + ".")
    return s


def call(name, args, cid="call_1"):
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


def cases():
    weather = {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                         "unit": {"enum": ["c", "f"]}},
                       "required": ["city"]}}}
    clock = {"type": "function", "function": {"name": "now"}}
    search = {"type": "function", "function": {
        "name": "web-search", "description": "搜索 the web ✓",
        "parameters": {"type": "object", "properties": {"q": {"type": "string", "maxLength": 200}}}}}
    sys1 = {"role": "system", "content": "You are a helpful assistant."}
    u1 = {"role": "user", "content": "What is the weather in Paris?"}
    a_call = {"role": "assistant", "content": None,
              "tool_calls": [call("get_weather", '{"city": "Paris"}')]}
    a_two = {"role": "assistant", "content": None,
             "tool_calls": [call("get_weather", '{"city": "Paris"}'), call("now", "{}", "call_2")]}
    t1 = {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": 18, "sky": "clear"}'}
    t2 = {"role": "tool", "tool_call_id": "call_2", "content": "12:00"}
    a_ans = {"role": "assistant", "content": "It is 18 degrees and clear."}
    u2 = {"role": "user", "content": "And in Rome?"}
    a_call2 = {"role": "assistant", "content": None,
               "tool_calls": [call("get_weather", '{"city": "Rome"}', "call_3")]}
    t3 = {"role": "tool", "tool_call_id": "call_3", "content": "20 C"}
    return [
        ([u1], [weather]),
        ([sys1, u1], [weather, clock]),
        ([sys1, u1], [weather, clock, search]),
        ([u1, a_call], [weather]),
        ([u1, a_call, t1], [weather]),
        ([sys1, u1, a_call, t1, a_ans], [weather]),
        ([sys1, u1, a_call, t1, a_ans, u2], [weather]),
        ([u1, a_two, t1, t2], [weather, clock]),
        ([u1, a_two, t1, t2, a_ans], [weather, clock]),
        ([sys1, u1, a_call, t1, a_ans, u2, a_call2, t3], [weather]),
        ([sys1, u1, a_call, t1, a_ans, u2, a_call2, t3, {"role": "assistant", "content": "20."}], [weather]),
        ([u1, a_call, t1], None),
        ([u1, {"role": "tool", "content": ""}], None),
        ([u1, a_call, {"role": "user", "content": "never mind"}], [weather]),
        ([{"role": "system", "content": "S2"}, u1, sys1], [search]),
        ([u1, a_call, t1, a_call2, t3, a_ans], [weather]),
        ([u1, a_call, t1, a_call2, t3], [weather, search]),
    ]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--config", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    template = json.load(open(args.config, encoding="utf-8"))["chat_template"]
    n = 0
    with open(args.out, "w", encoding="utf-8", newline="\n") as f:
        for msgs, tools in cases():
            full = list(msgs)
            if tools:
                full.append({"role": "system", "content": tools_section(tools)})
            text = render_chat(template, full)
            f.write(json.dumps({"messages": msgs, "tools": tools, "text": text}, ensure_ascii=False) + "\n")
            n += 1
    print(f"wrote {n} tool cases to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
