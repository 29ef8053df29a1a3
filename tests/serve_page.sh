#!/usr/bin/env bash
# serve_page.sh: the chat page at GET / in headless Chromium (optional; skips without
# chromium, python3 or the model). Starts `smallkv serve` on SmolLM2 (itself as SLM, its
# profile, policy smallkv at 20 %) with an API key and drives the page over the DevTools
# protocol (a pipe, no extra packages): the model's id once the key is typed (the key kept
# in sessionStorage, never in the URL, and back after a reload); a streamed reply with send
# disabled and stop enabled meanwhile, a second send ignored, then the memory view with all
# three tiers; stop aborting a long reply; errors as text in the reply (an error object, our
# JSON 431, libmicrohttpd's HTML 431 or a cut connection, a network error once the server
# is gone); the reply renderer (code blocks, inline code, bold; markup in the text stays
# text); and no uncaught exception throughout. Writes a screenshot to $BUILD/serve-page.png.
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
MODEL=${SKV_MODELS_DIR:-models}/SmolLM2-135M-Instruct.Q4_1.gguf
CHROME=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
[ -n "$CHROME" ] || { echo "serve_page: chromium not installed: skipped"; exit 0; }
command -v python3 >/dev/null || { echo "serve_page: python3 missing: skipped"; exit 0; }
[ -f "$MODEL" ] || { echo "serve_page: $MODEL missing: skipped"; exit 0; }
out=$(mktemp)
OMP_NUM_THREADS=1 "$BUILD/bin/smallkv" serve --llm "$MODEL" --slm "$MODEL" --profile profiles/smollm2-135m-self.skvprof \
  --port 0 --api-key pk >"$out" 2>/dev/null &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -f "$out"' EXIT
for _ in $(seq 120); do grep -q listening "$out" && break; sleep 0.5; done
url=$(grep -o 'http://[0-9.]*:[0-9]*' "$out") || { echo "serve_page: FAIL (the server did not start)"; exit 1; }
timeout 300 python3 - "$CHROME" "$url" "$pid" "$BUILD/serve-page.png" <<'EOF'
import base64, json, os, select, signal, subprocess, sys, time

chrome, url, server_pid, shot = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]

class Browser:
    """Chromium's DevTools protocol over --remote-debugging-pipe: it reads commands on fd 3
    and writes answers and events on fd 4, each a JSON text ended by a NUL."""
    def __init__(self):
        to_r, self.to_w = os.pipe()
        self.from_r, from_w = os.pipe()
        cmd = 'exec "$0" --headless --no-sandbox --disable-gpu --window-size=900,700 --remote-debugging-pipe ' \
              f'about:blank 3<&{to_r} 4>&{from_w} 2>/dev/null'
        self.p = subprocess.Popen(["bash", "-c", cmd, chrome], pass_fds=(to_r, from_w))
        os.close(to_r); os.close(from_w)
        self.buf, self.n, self.events = b"", 0, []
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.s = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for m in ("Runtime.enable", "Page.enable"):
            self.call(m, session=self.s)

    def call(self, method, params=None, session=None, wait=60):
        self.n += 1
        msg = {"id": self.n, "method": method, "params": params or {}}
        if session: msg["sessionId"] = session
        os.write(self.to_w, json.dumps(msg).encode() + b"\0")
        end = time.time() + wait
        while True:
            while b"\0" not in self.buf:
                left = end - time.time()
                if left <= 0 or not select.select([self.from_r], [], [], left)[0]:
                    raise TimeoutError(method)
                chunk = os.read(self.from_r, 1 << 16)
                if not chunk: raise EOFError("chromium went away")
                self.buf += chunk
            raw, self.buf = self.buf.split(b"\0", 1)
            m = json.loads(raw)
            if m.get("id") == self.n:
                if "error" in m: raise RuntimeError(f"{method}: {m['error']}")
                return m["result"]
            self.events.append(m)

    def js(self, expr):
        r = self.call("Runtime.evaluate", {"expression": expr, "awaitPromise": True, "returnByValue": True}, self.s)
        if "exceptionDetails" in r: raise RuntimeError(f"{expr}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def until(self, expr, wait=120):
        end = time.time() + wait
        while time.time() < end:
            v = self.js(expr)
            if v: return v
            time.sleep(0.1)
        return None

    def open(self, u):
        self.call("Page.navigate", {"url": u}, self.s)
        return self.until("document.readyState == 'complete' && !!document.getElementById('send')", 30)

fails = 0
def check(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what)
    if not ok: fails += 1

b = Browser()
MODEL = "SmolLM2-135M-Instruct.Q4_1.gguf"
REPLY = "(document.querySelector('#log .assistant:last-child span') || {}).textContent || ''"
ROW = "(document.querySelector('#log .assistant:last-child') || {}).textContent || ''"
IDLE = "!$('send').disabled && $('stop').disabled"
def ask(text, max_tokens=24):
    b.js(f"$('max').value = '{max_tokens}'; $('msg').value = {json.dumps(text)}; $('send').click(); true")

check(b.open(url + "/"), "the page loads")
check("?key=" not in b.js("document.documentElement.outerHTML"), "the page takes no key from the URL")
check(b.until("$('model').textContent.indexOf('API key') >= 0", 10), "without the key the model line asks for it")
b.js("$('key').value = 'pk'; $('key').dispatchEvent(new Event('change')); true")
check(b.until(f"$('model').textContent == '{MODEL}'", 10), "the key typed: the model's id shown")
check(b.js("sessionStorage.getItem('smallkv-api-key')") == "pk" and "pk" not in b.js("location.href"),
      "the key is in sessionStorage, not in the URL")

# a reply: one request at a time
ask("Name three colours.")
check(b.js("$('send').disabled && !$('stop').disabled"), "while a reply streams: send disabled, stop enabled")
b.js("$('msg').value = 'again'; $('send').click(); true")
check(b.js("document.querySelectorAll('#log .user').length") == 1, "a second send while busy is ignored")
check(b.until(IDLE), "the reply ends: send enabled again")
check(len(b.js(REPLY)) > 0 and "error" not in b.js("document.querySelector('#log .assistant').className"), "a reply is shown")
mem = b.js("$('mem').textContent")
check("LLM hot tier:" in mem and "policy smallkv" in mem, "memory view: hot tier, policy named")
check(any(f"LLM cold tier: {d}" in mem for d in "123456789"), "cold tier shown (non-zero under smallkv)")
check(any(f"SLM cache: {d}" in mem for d in "123456789"), "SLM memory shown")
check(b.js("msgs.length") == 2, "the conversation holds the question and the reply")

# stop: a long reply aborted after its first words; the partial reply stays in the conversation
b.js("$('msg').value = ''; true")
ask("Tell me a long story about the sea.", 400)
check(b.until(f"({REPLY}).length > 0", 60), "a long reply starts")
b.js("$('stop').click(); true")
check(b.until(IDLE, 10), "stop: send enabled again")
check("[stopped]" in b.js(ROW), "stop: the reply is marked stopped")
check(b.js("msgs.length") == 4, "stop: the partial reply is kept in the conversation")

b.call("Page.captureScreenshot", {"format": "png"}, b.s)   # warm up: the first capture can be blank
png = b.call("Page.captureScreenshot", {"format": "png"}, b.s)["data"]
open(shot, "wb").write(base64.b64decode(png))
check(os.path.getsize(shot) > 0, f"screenshot {shot}")

# a reload keeps the key (this tab's sessionStorage)
check(b.open(url + "/"), "the page reloads")
check(b.js("$('key').value") == "pk" and b.until(f"$('model').textContent == '{MODEL}'", 10), "after a reload the key is back")

# errors, each as text in the reply
b.js("$('policy').value = 'nope'; true")
ask("hi")
check(b.until(IDLE, 30) and b.js(ROW).find("error 400:") >= 0, "an error object: its status and message")
b.js("$('policy').value = ''; $('key').value = 'k'.repeat(70000); true")
ask("hi")
check(b.until(IDLE, 30) and "error 431: the request headers are larger than" in b.js(ROW), "the server's 431 error object")
b.js("$('key').value = 'k'.repeat(300000); true")
ask("hi")
row = b.until(IDLE, 30) and b.js(ROW)
check(bool(row) and ("error 431" in row or "(network)" in row) and "<" not in row,
      "libmicrohttpd's HTML 431 (or the connection it cuts): text, no markup")
print("     " + (row or "")[:160].replace("\n", " "))
b.js("$('key').value = 'pk'; true")
os.kill(server_pid, signal.SIGTERM)
time.sleep(1)
ask("hi")
check(b.until(IDLE, 30) and "(network)" in b.js(ROW), "a network error (the server gone)")
check(b.js("document.querySelectorAll('#log .error').length") == 4, "each failure marked as an error")

# the renderer: text nodes, with code blocks, inline code and bold as elements
r = b.js(r"""(function () {
  var d = document.createElement('div');
  render(d, 'Use **bold** and `x<y>` here.\n```js\nif (a < b) { alert("<i>") }\n```\n<img src=x onerror="window.pwned=1"> <b>raw</b> **unclosed');
  return { imgs: d.querySelectorAll('img').length, bs: Array.from(d.querySelectorAll('b')).map(e => e.textContent),
           pre: (d.querySelector('pre code') || {}).textContent, code: (d.querySelector(':scope > code') || {}).textContent,
           text: d.textContent };
})()""")
check(r["pre"] == 'if (a < b) { alert("<i>") }\n', "a ``` block is a <pre> (its language line dropped)")
check(r["code"] == "x<y>" and r["bs"] == ["bold"], "`code` and **bold** are elements")
check(r["imgs"] == 0 and '<img src=x onerror="window.pwned=1"> <b>raw</b> **unclosed' in r["text"],
      "markup in a reply stays text")
time.sleep(0.5)
check(b.js("window.pwned === undefined"), "nothing in a reply runs")

errs = [e for e in b.events if e.get("method") == "Runtime.exceptionThrown"]
for e in errs: print("     " + json.dumps(e["params"]["exceptionDetails"])[:300])
check(not errs, "no uncaught exception")
b.p.terminate(); b.p.wait()
print("serve_page: ok" if fails == 0 else "serve_page: FAIL")
sys.exit(1 if fails else 0)
EOF
