#!/usr/bin/env python3
"""serve-load.py: a bounded load test of `smallkv serve` on loopback (`make serve-load`).

Starts the server (SmolLM2 by default) on a free port, sends REQUESTS chat requests from
CONCURRENCY threads, each a stream (server-sent events); a third of them extend the
thread's previous conversation (session reuse). Every request must end with [DONE] or a
clear error object (counted by kind), none may be lost; the server's resident memory
(sampled from /metrics) must stay within its startup RSS + --cache-bytes + an allowance
for the active sessions. Prints requests/s, p50/p99 latency and time to first token.
Standard library only."""
import argparse, json, os, re, subprocess, sys, threading, time, http.client

ap = argparse.ArgumentParser()
ap.add_argument("--bin", default="build/bin/smallkv")
ap.add_argument("--llm", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
ap.add_argument("--requests", type=int, default=200)
ap.add_argument("--concurrency", type=int, default=8)
ap.add_argument("--max-tokens", type=int, default=32)
ap.add_argument("--cache-mb", type=int, default=64)
ap.add_argument("--slack-mb", type=int, default=64, help="RSS allowance for threads and buffers")
ap.add_argument("--threads", default="2")
a = ap.parse_args()
if not os.path.exists(a.llm):
    print(f"serve-load: {a.llm} missing (make models-test)"); sys.exit(1)

srv = subprocess.Popen([a.bin, "serve", "--llm", a.llm, "--port", "0", "--batch", str(a.concurrency),
                        "--queue", str(4 * a.concurrency), "--cache-bytes", f"{a.cache_mb}M", "--ctx", str(1024),
                        "--threads", a.threads], stdout=subprocess.PIPE, text=True)
line = srv.stdout.readline()
m = re.search(r"http://([\d.]+):(\d+)", line)
if not m:
    print("serve-load: the server did not start"); srv.kill(); sys.exit(1)
host, port = m.group(1), int(m.group(2))

def get_metrics():
    c = http.client.HTTPConnection(host, port, timeout=30)
    c.request("GET", "/metrics"); body = c.getresponse().read().decode(); c.close()
    return {k: float(v) for k, v in re.findall(r"^(\S+) (\S+)$", body, re.M)}

m0 = get_metrics()
rss0 = m0["smallkv_process_resident_bytes"]
CTX = 1024
# the configured bound: what the server holds at start, the session cache, and each of the
# `batch` active sessions at full context (its measured workspace + an uncompressed cache)
active = a.concurrency * (m0["smallkv_session_overhead_bytes"] + CTX * m0["smallkv_kv_bytes_per_token"])
bound = rss0 + a.cache_mb * 2**20 + active + a.slack_mb * 2**20
peak = [rss0]; stop = threading.Event()
def sampler():
    while not stop.is_set():
        try: peak[0] = max(peak[0], get_metrics()["smallkv_process_resident_bytes"])
        except Exception: pass
        time.sleep(0.25)

TOPICS = ["colours", "cats", "the sea", "bread", "rain", "trains", "music", "stars", "gardens", "winter"]
lock = threading.Lock(); results = []; counter = [0]
def worker(w):
    conv = []
    while True:
        with lock:
            if counter[0] >= a.requests: return
            i = counter[0]; counter[0] += 1
        if not conv or i % 3 != 0 or len(conv) > 6:
            conv = [{"role": "user", "content": f"Tell me something about {TOPICS[i % len(TOPICS)]}."}]
        else:
            conv.append({"role": "user", "content": "Tell me more."})
        body = json.dumps({"messages": conv, "stream": True, "max_tokens": a.max_tokens, "temperature": 0.7,
                           "seed": i + 1, "stream_options": {"include_usage": True}})
        t0 = time.time(); ttft = None; text = ""; kind = "lost"; cached = 0
        try:
            c = http.client.HTTPConnection(host, port, timeout=300)
            c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
            r = c.getresponse()
            if r.status != 200:
                err = json.loads(r.read())["error"]; kind = f"http {r.status} {err.get('code')}"
            else:
                buf = b""
                while True:
                    chunk = r.read1(65536) if hasattr(r, "read1") else r.read(1024)
                    if not chunk: break
                    buf += chunk
                    while b"\n\n" in buf:
                        ev, buf = buf.split(b"\n\n", 1)
                        d = ev.decode()[6:]
                        if d == "[DONE]": kind = "ok"; continue
                        j = json.loads(d)
                        if "error" in j: kind = "stream error"; continue
                        if j.get("usage"): cached = j["usage"]["prompt_tokens_details"]["cached_tokens"]
                        for ch in j.get("choices", []):
                            t = ch.get("delta", {}).get("content")
                            if t:
                                if ttft is None: ttft = time.time() - t0
                                text += t
            c.close()
        except Exception as e:
            kind = f"exception {type(e).__name__}"
        conv.append({"role": "assistant", "content": text})
        with lock: results.append((kind, time.time() - t0, ttft, cached))

st = threading.Thread(target=sampler); st.start()
t0 = time.time()
ths = [threading.Thread(target=worker, args=(w,)) for w in range(a.concurrency)]
for t in ths: t.start()
for t in ths: t.join()
wall = time.time() - t0
stop.set(); st.join()
mt = get_metrics()
srv.terminate(); rc = srv.wait(timeout=60)

kinds = {}
for k, *_ in results: kinds[k] = kinds.get(k, 0) + 1
lat = sorted(r[1] for r in results if r[0] == "ok")
tt = sorted(r[2] for r in results if r[0] == "ok" and r[2] is not None)
pct = lambda v, p: v[min(len(v) - 1, int(p * len(v)))] if v else float("nan")
reused = sum(1 for r in results if r[3] > 0)
print(f"requests {len(results)} of {a.requests} in {wall:.1f} s: {len(results)/wall:.2f} req/s; by result {kinds}")
print(f"latency p50 {pct(lat,.5):.2f} s, p99 {pct(lat,.99):.2f} s; first token p50 {pct(tt,.5):.2f} s, p99 {pct(tt,.99):.2f} s")
print(f"tokens out {mt['smallkv_completion_tokens_total']:.0f} ({mt['smallkv_completion_tokens_total']/wall:.1f} tok/s), "
      f"prompt {mt['smallkv_prompt_tokens_total']:.0f}, reused {mt['smallkv_reused_tokens_total']:.0f} "
      f"({reused} requests continued a session), evictions {mt['smallkv_session_cache_evictions_total']:.0f}")
print(f"RSS start {rss0/2**20:.0f} MiB, peak {peak[0]/2**20:.0f} MiB, bound {bound/2**20:.0f} MiB "
      f"(start + cache {a.cache_mb} MiB + {a.concurrency} active sessions {active/2**20:.0f} MiB + {a.slack_mb} MiB); "
      f"session workspace {m0['smallkv_session_overhead_bytes']/2**20:.1f} MiB; server exit {rc}")
bad = len(results) != a.requests or any(k not in ("ok",) and not k.startswith("http 4") for k in kinds) \
      or peak[0] > bound or rc != 0
print("serve-load:", "FAIL" if bad else "ok")
sys.exit(1 if bad else 0)
