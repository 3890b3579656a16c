#!/usr/bin/env python3
# fuzz/make_seeds.py: writes the seed corpus of every fuzz target into fuzz/corpus/<target>/
# (stdlib only; deterministic, so re-running changes nothing). The block seed is written by the
# fuzz_block binary itself (PDB_FUZZ_WRITE_SEED, see docs/fuzzing.md) since only the store's
# own writer can produce a valid block file.
import glob, hashlib, json, os, shutil, struct, sys

root = os.path.dirname(os.path.abspath(__file__))
def put(target, name, data):
    d = os.path.join(root, "corpus", target); os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f: f.write(data if isinstance(data, bytes) else data.encode())

# safetensors: valid files (metadata, two tensors, padding), empty header, bad offsets
def st(header, data):
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - (8 + len(h)) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + data
put("safetensors", "two_tensors", st({"__metadata__": {"format": "pt"},
    "a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
    "b": {"dtype": "BF16", "shape": [4], "data_offsets": [24, 32]}}, bytes(range(32))))
put("safetensors", "empty", st({}, b""))
put("safetensors", "fp8_scale", st({"w": {"dtype": "F8_E4M3", "shape": [2, 2], "data_offsets": [0, 4]},
    "w_scale_inv": {"dtype": "F32", "shape": [1, 1], "data_offsets": [4, 8]}}, b"\x38\x40\xb8\x00" + struct.pack("<f", 0.5)))
put("safetensors", "bad_offsets", st({"a": {"dtype": "I32", "shape": [3], "data_offsets": [4, 16]}}, bytes(12)))

# json_ids: byte 0 picks the vocabulary (1 << (b % 31)), the rest is a /v1/prefill body
for i, body in enumerate([
        '{"token_ids":[1,2,3],"block_size":128,"first_block":0,"fingerprint":"ab"}',
        '  {"fingerprint" : "x,]}\\"[" , "token_ids" : [ 0 , 129279,\n7\t] , "o":{"token_ids":[9]}}  ',
        '{"a":[[1,2],{"b":[3]}],"token_ids":[1073741823],"t":true,"n":null,"f":-1.5e3}',
        '{"token_ids":[1,2],"token_ids":[3]}', '{"token_ids":[1,-2]}', '{"token_ids":[01]}']):
    put("json_ids", "body_%d" % i, bytes([17]) + body.encode())

# config.json: the golden configs of both architectures
for i, p in enumerate(sorted(glob.glob(os.path.join(root, "..", "tests", "golden", "*", "*", "config.json")))):
    put("config", "golden_%d" % i, open(p, "rb").read())
put("config", "minimal_v2", json.dumps({"model_type": "deepseek_v2", "hidden_size": 64, "num_hidden_layers": 2}))

# tokenizer: first byte even = encode, odd = decode (then LE i32 ids)
texts = ["Hello, world!", "  leading spaces\n\ttabs\r\n", "数学是科学的皇后。", "emoji 😀👍🏽 mixed 123456789",
         "<｜begin▁of▁sentence｜>You are helpful.<｜User｜>hi<｜Assistant｜>", "caf\u00e9 na\u00efve \u0301",
         "x = f(y) * 3.14159 // comment", "'s 're 've 'll 'd n't", "a" * 300]
for i, t in enumerate(texts): put("tokenizer", "enc_%d" % i, b"\x00" + t.encode())
put("tokenizer", "enc_invalid_utf8", b"\x00\xff\xfe\xc3(\xe2\x82\x00mid\x80")
put("tokenizer", "dec_ids", b"\x01" + struct.pack("<6i", 0, 1, 100, 2000, 128000, 128799))
put("tokenizer", "dec_bad_ids", b"\x01" + struct.pack("<3i", 5, -1, 1 << 30))

# openai bodies: first byte even = completions, odd = chat; bit 1 = a context limit
bodies = [(0, {"prompt": "Hello", "max_tokens": 8, "temperature": 0}),
          (0, {"prompt": [1, 2, 3, 4], "max_tokens": 2, "stream": True, "stream_options": {"include_usage": True},
               "return_token_ids": True, "ignore_eos": True, "stop": ["\n", "END"], "seed": 7, "top_p": 0.9, "top_k": 40}),
          (2, {"prompt": [[5, 6, 7]], "max_tokens": 5000}),
          (0, {"prompt": ["one string"], "model": "tiny", "n": 1, "best_of": 1}),
          (1, {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"},
                            {"role": "assistant", "content": None},
                            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}],
               "max_completion_tokens": 3, "temperature": 0.7}),
          (3, {"messages": [{"role": "developer", "content": "x"}], "max_tokens": 1}),
          (1, {"messages": []}), (0, {"prompt": "", "echo": True}),
          (0, {"prompt": "x", "n": 3, "best_of": 3, "logprobs": 5, "frequency_penalty": 0.5, "presence_penalty": -1,
               "logit_bias": {"7": -100, "9": 2.5}, "user": "u", "stream_options": {"continuous_usage_stats": True}}),
          (1, {"messages": [{"role": "user", "content": "x"}], "logprobs": True, "top_logprobs": 20,
               "response_format": {"type": "json_object"}, "store": False, "service_tier": "auto", "modalities": ["text"],
               "metadata": {"a": "b"}, "prompt_cache_key": "k", "safety_identifier": "s", "tools": None, "frobnicate": 1})]
for i, (k, b) in enumerate(bodies): put("openai", "body_%d" % i, bytes([k]) + json.dumps(b).encode())
put("openai", "syntax_error", b"\x00{\"prompt\": [1, 2,")
put("openai", "dup_keys", b"\x00{\"prompt\": \"a\", \"prompt\": \"b\"}")
# chat with tools (byte 1), and Messages API bodies (bit 2: pdb_anthropic_parse_request)
tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
put("openai", "tools_0", bytes([1]) + json.dumps({
    "messages": [{"role": "user", "content": "q"},
                 {"role": "assistant", "content": None, "tool_calls": [
                     {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]},
                 {"role": "tool", "tool_call_id": "c1", "content": "18"}],
    "tools": tools, "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
    "parallel_tool_calls": False}).encode())
# tools beside the other fields: logprobs and n = 2 (served together)
put("openai", "tools_1", bytes([1 | 2]) + json.dumps({
    "messages": [{"role": "user", "content": "q"}], "tools": tools, "tool_choice": "auto", "logprobs": True,
    "top_logprobs": 3, "n": 2, "max_tokens": 9}).encode())
# a call forced among several tools (the name masked), and message fields: null ones (absent),
# a refused name, an unknown key of a text part
put("openai", "tools_2", bytes([1 | 2]) + json.dumps({
    "messages": [{"role": "user", "content": "q", "name": None},
                 {"role": "assistant", "content": "a", "refusal": None, "audio": None, "function_call": None},
                 {"role": "user", "content": [{"type": "text", "text": "b"}]}],
    "tools": tools + [{"type": "function", "function": {"name": "now"}}], "tool_choice": "required", "n": 2,
    "max_tokens": 14}).encode())
put("openai", "tools_3", bytes([1]) + json.dumps({
    "messages": [{"role": "user", "content": [{"type": "text", "text": "q", "cache_control": {}}], "name": "ann"}]}).encode())
put("openai", "messages_0", bytes([4 | 2]) + json.dumps({
    "model": "m", "max_tokens": 8, "system": [{"type": "text", "text": "s"}], "stop_sequences": ["x"], "stream": True,
    "messages": [{"role": "user", "content": [{"type": "text", "text": "q"}]},
                 {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "w", "input": {"a": 1}}]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "r", "is_error": True}]}],
    "tools": [{"name": "w", "input_schema": {"type": "object"}}], "tool_choice": {"type": "any"}}).encode())
put("openai", "messages_1", bytes([4]) + json.dumps({"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}],
                                                      "metadata": {"user_id": "u"}, "temperature": 1, "top_k": 3}).encode())

# segment streams: first byte = feed chunk size - 1
def frame(t, payload): return struct.pack("<IIQ", 0x46424450, t, len(payload)) + payload
fp = hashlib.sha256(b"fp").hexdigest()
def stream(first, n_blocks, bb, blocks, end_status=0, msg=b'{"engine_s":0.1,"tokens":256,"blocks":2}'):
    s = frame(1, json.dumps({"version": 1, "fingerprint": fp, "block_size": 128, "first_block": first,
                             "n_blocks": n_blocks, "block_bytes": bb}).encode())
    for b in blocks:
        data = bytes((b * 31 + i) & 255 for i in range(bb))
        s += frame(2, struct.pack("<q", b) + hashlib.sha256(data).digest() + data)
    return s + frame(3, struct.pack("<iI", end_status, len(msg)) + msg)
put("segment", "valid_2_blocks", b"\x3f" + stream(0, 2, 256, [0, 1]))
put("segment", "valid_from_1", b"\x00" + stream(1, 4, 64, [1, 2, 3]))
put("segment", "engine_error", b"\xff" + stream(0, 3, 128, [0], 5, b"engine failed"))
bad = bytearray(stream(0, 2, 256, [0, 1])); bad[200] ^= 1
put("segment", "bad_checksum", b"\x10" + bytes(bad))
put("segment", "out_of_order", b"\x20" + stream(0, 3, 32, [1, 0]))

# headers: X-PD-Bridge-Mode values and secrets (the first byte also picks the secret split)
for i, v in enumerate(["auto", "OFF", "Force", "", "forced", "\x05secretsecret", "\x00", "aut\x00o"]):
    put("headers", "h_%d" % i, v)
print("seeds written under", os.path.join(root, "corpus"))
