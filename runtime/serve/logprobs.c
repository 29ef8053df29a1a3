/* logprobs.c: log probabilities of generated tokens, as OpenAI and llama-server report
 * them: the log-softmax of the model's raw logits at that step (not of the distribution the
 * sampler drew from after logit_bias, penalties, temperature, top-k / top-p / min-p or a
 * JSON mask), for the chosen token and the n most likely ones (ties by token id). The
 * engine fills one serve_lp per generated token (serve_logprob, serve_logprob_push); the
 * replies turn a range of them into OpenAI's shapes (serve_logprobs_json):
 *   chat:        {"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token",
 *                "logprob", "bytes"}]}], "refusal": null}
 *   completions: {"tokens", "token_logprobs", "top_logprobs": [{token: logprob}] or null
 *                when 0 asked, "text_offset"}
 * A token's string is its bytes as UTF-8, each byte that is not part of a whole character
 * (a token cut inside one) as U+FFFD; "bytes" holds the exact bytes. text_offset counts
 * characters (code points) from the start of the reply's text. */
#include "serve.h"
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* JSON has no -Infinity: OpenAI reports -9999 for "no chance" */
static double finite_lp(double x) { return x > -9999.0 ? x : -9999.0; }

void serve_logprob(const float *logits, int V, int tok, int n_top, serve_lp *out) {
    float m = logits[0];
    for (int i = 1; i < V; i++) if (logits[i] > m) m = logits[i];
    double z = 0;
    for (int i = 0; i < V; i++) z += exp((double)logits[i] - m);
    const double lz = m + log(z);
    out->id = tok;
    out->lp = (float)((double)logits[tok] - lz);
    if (n_top > SERVE_MAX_TOP) n_top = SERVE_MAX_TOP;
    if (n_top > V) n_top = V;
    /* the n_top largest, kept sorted (heaviest first; equal logits: lower id first) */
    int k = 0;
    for (int i = 0; i < V && n_top > 0; i++) {
        const float x = logits[i];
        if (k == n_top && x <= logits[out->top_id[k - 1]]) continue;
        int at = k < n_top ? k++ : k - 1;
        while (at > 0 && logits[out->top_id[at - 1]] < x) { out->top_id[at] = out->top_id[at - 1]; at--; }
        out->top_id[at] = i;
    }
    out->n_top = k;
    for (int q = 0; q < k; q++) out->top_lp[q] = (float)((double)logits[out->top_id[q]] - lz);
}

int serve_logprob_push(serve_job *j, const serve_lp *e) {
    if (j->n_lp == j->cap_lp) {
        int nc = j->cap_lp ? 2 * j->cap_lp : 32;
        serve_lp *t = realloc(j->lp, (size_t)nc * sizeof *t);
        if (!t) return -1;
        j->lp = t;
        j->cap_lp = nc;
    }
    j->lp[j->n_lp++] = *e;
    return 0;
}

/* the token's bytes and its string (heap; U+FFFD for what is not a whole character) */
static char *token_string(const smallkv_pair *p, int id, const char **b, size_t *n) {
    *n = 0;
    *b = p ? smallkv_token_bytes(p, id, n) : NULL;
    if (!*b) *n = 0;
    char *s = malloc(3 * *n + 1);
    if (!s) return NULL;
    s[serve_utf8_fix(*b ? *b : "", *n, s, NULL)] = 0;
    return s;
}

static cJSON *chat_entry(const smallkv_pair *p, int id, double lp, bool with_top) {
    const char *b;
    size_t n;
    char *s = token_string(p, id, &b, &n);
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "token", s ? s : "");
    cJSON_AddNumberToObject(e, "logprob", finite_lp(lp));
    cJSON *bytes = cJSON_AddArrayToObject(e, "bytes");
    for (size_t i = 0; i < n; i++) cJSON_AddItemToArray(bytes, cJSON_CreateNumber((unsigned char)b[i]));
    if (with_top) cJSON_AddArrayToObject(e, "top_logprobs");
    free(s);
    return e;
}

/* characters (code points) in text[0, n): every byte but UTF-8 continuation bytes */
static size_t chars_in(const char *text, size_t from, size_t to) {
    size_t c = 0;
    for (size_t i = from; i < to; i++) c += ((unsigned char)text[i] & 0xC0) != 0x80;
    return c;
}

cJSON *serve_logprobs_json(const serve_job *j, int from, int to) {
    const smallkv_pair *p = j->pair;
    if (from < 0) from = 0;
    if (to > j->n_lp) to = j->n_lp;
    if (j->prm.chat) {
        cJSON *o = cJSON_CreateObject(), *content = cJSON_AddArrayToObject(o, "content");
        for (int i = from; i < to; i++) {
            const serve_lp *e = &j->lp[i];
            cJSON *x = chat_entry(p, e->id, e->lp, true), *top = cJSON_GetObjectItemCaseSensitive(x, "top_logprobs");
            for (int q = 0; q < e->n_top; q++) cJSON_AddItemToArray(top, chat_entry(p, e->top_id[q], e->top_lp[q], false));
            cJSON_AddItemToArray(content, x);
        }
        cJSON_AddNullToObject(o, "refusal");
        return o;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON *tokens = cJSON_AddArrayToObject(o, "tokens"), *lps = cJSON_AddArrayToObject(o, "token_logprobs");
    cJSON *tops = j->prm.top_logprobs > 0 ? cJSON_AddArrayToObject(o, "top_logprobs") : (cJSON_AddNullToObject(o, "top_logprobs"), NULL);
    cJSON *offs = cJSON_AddArrayToObject(o, "text_offset");
    size_t at = 0, chars = 0;   /* walk the text once: offsets only grow */
    for (int i = from; i < to; i++) {
        const serve_lp *e = &j->lp[i];
        const char *b;
        size_t n;
        char *s = token_string(p, e->id, &b, &n);
        cJSON_AddItemToArray(tokens, cJSON_CreateString(s ? s : ""));
        free(s);
        cJSON_AddItemToArray(lps, cJSON_CreateNumber(finite_lp(e->lp)));
        if (tops) {
            cJSON *d = cJSON_CreateObject();
            for (int q = 0; q < e->n_top; q++) {
                char *t = token_string(p, e->top_id[q], &b, &n);
                if (t && !cJSON_GetObjectItemCaseSensitive(d, t)) cJSON_AddNumberToObject(d, t, finite_lp(e->top_lp[q]));
                free(t);
            }
            cJSON_AddItemToArray(tops, d);
        }
        const size_t off = e->off < j->len ? e->off : j->len;
        if (off > at) { chars += chars_in(j->text, at, off); at = off; }
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)chars));
    }
    return o;
}
