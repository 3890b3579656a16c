"""pdb_e2e_text: the text prompts and the one-request client the verify end-to-end tests share.

  pdb_e2e_text.py prompts DIR SEED WORDS CHAT_WORDS   write DIR/prompt.txt (WORDS seeded words)
                                                      and DIR/chat.txt (the first CHAT_WORDS reversed)
  pdb_e2e_text.py ask URL text|chat FILE MODE         one greedy 4-token request with the file's bytes as
                                                      the prompt (or one user message), X-PD-Bridge-Mode:
                                                      MODE; prints {"verdict", "prompt", "cached"} as JSON
"""
import json
import sys
import urllib.request

WORDS = "the quick brown fox jumps over a lazy dog while seven wizards quietly judge boxing matches".split()


def prompts(d, seed, n, n_chat):
    x, out = seed, []
    for _ in range(n):
        x = (x * 1103515245 + 12345) % 2**31
        out.append(WORDS[x % len(WORDS)])
    open(d + "/prompt.txt", "w").write(" ".join(out) + ".\n")
    open(d + "/chat.txt", "w").write("Summarize this, please: " + " ".join(reversed(out[:n_chat])))


def ask(url, kind, path, mode):
    text = open(path, encoding="utf-8").read()
    if kind == "text":
        ep, body = "/v1/completions", {"prompt": text}
    else:
        ep, body = "/v1/chat/completions", {"messages": [{"role": "user", "content": text}]}
    body.update({"max_tokens": 4, "temperature": 0, "ignore_eos": True})
    rq = urllib.request.Request(url + ep, data=json.dumps(body).encode(),
                                headers={"Content-Type": "application/json", "X-PD-Bridge-Mode": mode})
    with urllib.request.urlopen(rq, timeout=600) as r:
        d = json.loads(r.read())
        print(json.dumps({"verdict": r.headers.get("X-PD-Bridge", ""), "prompt": d["usage"]["prompt_tokens"],
                          "cached": d["usage"]["prompt_tokens_details"]["cached_tokens"]}))


if __name__ == "__main__":
    if sys.argv[1] == "prompts":
        prompts(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    else:
        ask(*sys.argv[2:6])
