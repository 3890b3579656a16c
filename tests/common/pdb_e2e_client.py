"""pdb_e2e_client: the completions client the bridge end-to-end tests share (stdlib only).

  post(url, body, mode=None, timeout=600)  POST body to url/v1/completions (X-PD-Bridge-Mode: mode
                                           when given); returns {"verdict" (the X-PD-Bridge header),
                                           "ids", "cached", "pd" (the pd_bridge object), "secs"}
  prompt(seed, n)                          n seeded token ids in [0, 1000) (one LCG for every test)

Imported by the clients the tests write into their temp dir; they run from the repository root
(pdb_e2e_init changes there), so tests/common is put on sys.path by relative path.
"""
import json
import time
import urllib.request


def post(url, body, mode=None, timeout=600):
    h = {"Content-Type": "application/json"}
    if mode:
        h["X-PD-Bridge-Mode"] = mode
    rq = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(), headers=h)
    t0 = time.time()
    with urllib.request.urlopen(rq, timeout=timeout) as r:
        d = json.loads(r.read())
        v = r.headers.get("X-PD-Bridge", "")
    return {"verdict": v, "ids": d["choices"][0]["token_ids"], "cached": d["usage"]["prompt_tokens_details"]["cached_tokens"],
            "pd": d.get("pd_bridge"), "secs": time.time() - t0}


def prompt(seed, n):
    x, out = seed, []
    for _ in range(n):
        x = (x * 1103515245 + 12345) % 2**31
        out.append(x % 1000)
    return out
