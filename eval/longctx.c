/* longctx.c: long-context evaluation inputs: RULER-style needles in pg-essays prose, prose
 * padding, LongBench prompts and their middle truncation (longctx.h). */
#include "longctx.h"
#include "data.h"
#include "common/util.h"
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ niah */

static const char *NIAH_KINDS[SKV_NIAH_KINDS] = {"single", "multikey", "multivalue"};

const char *skv_niah_kind_name(skv_niah_kind k) { return k >= 0 && k < SKV_NIAH_KINDS ? NIAH_KINDS[k] : "?"; }

int skv_niah_kind_parse(const char *s) {
    for (int k = 0; k < SKV_NIAH_KINDS; k++)
        if (!strcmp(s, NIAH_KINDS[k])) return k;
    return -1;
}

/* keys are "adjective-noun" words, as RULER's (which draws them from wonderwords' lists) */
static const char *ADJS[] = {
    "abundant", "adorable", "agreeable", "alive",    "ancient",   "bitter",   "brave",    "breezy",
    "bright",   "broad",    "calm",      "careful",  "cheerful",  "clever",   "cloudy",   "crooked",
    "curious",  "damp",     "delightful", "eager",   "elegant",   "faithful", "fancy",    "fierce",
    "gentle",   "gifted",   "glorious",  "grumpy",   "handsome",  "helpful",  "hollow",   "humble",
    "jolly",    "kind",     "lively",    "lucky",    "mighty",    "modern",   "nervous",  "obedient",
    "polite",   "proud",    "quiet",     "rapid",    "silly",     "tender",   "witty",    "zealous",
};
static const char *NOUNS[] = {
    "anchor",  "apple",    "badge",   "bakery",  "balloon", "basket",  "blanket", "bridge",
    "cabinet", "candle",   "canyon",  "carpet",  "castle",  "cherry",  "compass", "cottage",
    "crayon",  "dolphin",  "drawer",  "engine",  "falcon",  "feather", "garden",  "glacier",
    "hammer",  "harbor",   "helmet",  "island",  "jacket",  "kettle",  "ladder",  "lantern",
    "meadow",  "mirror",   "monkey",  "needle",  "orchard", "pebble",  "pillow",  "puzzle",
    "rabbit",  "ribbon",   "saddle",  "scarf",   "tunnel",  "violin",  "walnut",  "window",
};
#define N_ADJ ((int)(sizeof ADJS / sizeof *ADJS))
#define N_NOUN ((int)(sizeof NOUNS / sizeof *NOUNS))

static uint64_t mix64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static int rnd(uint64_t *s, int n) { return (int)(mix64(s) % (uint64_t)n); }

unsigned skv_niah_seed(skv_niah_kind kind, int length, int depth_pct, int variant) {
    uint64_t s = 0x6e696168ull ^ ((uint64_t)(unsigned)kind << 56) ^ ((uint64_t)(unsigned)length << 20) ^
                 ((uint64_t)(unsigned)depth_pct << 8) ^ (uint64_t)(unsigned)variant;
    return (unsigned)(mix64(&s) >> 32);
}

void skv_niah_free(skv_niah_unit *u) {
    if (!u) return;
    free(u->prompt);
    u->prompt = NULL;
    u->n_prompt = 0;
}

/* a token that ends a sentence: its text holds '.', '!' or '?' */
static bool sentence_end(const skv_tokenizer *t, int id) {
    size_t l;
    const char *b = skv_token_bytes(t, id, &l);
    return b && l && (memchr(b, '.', l) || memchr(b, '!', l) || memchr(b, '?', l));
}

static int tok_text(const skv_tokenizer *t, const char *s, int **out) { return skv_eval_tokenize(t, s, strlen(s), false, out); }

int skv_niah_build(const skv_tokenizer *t, const int *fill, int n_fill, const skv_niah_wrap *wrap, skv_niah_kind kind,
                   int length, int depth_pct, int needles, unsigned seed, skv_niah_unit *u) {
    memset(u, 0, sizeof *u);
    if (kind < 0 || kind >= SKV_NIAH_KINDS) return skv_error("niah: unknown kind %d", (int)kind);
    if (depth_pct < 0 || depth_pct > 100) return skv_error("niah: depth %d%% out of 0..100", depth_pct);
    if (kind == SKV_NIAH_SINGLE) needles = 1;
    else if (needles < 2 || needles > SKV_NIAH_MAX_NEEDLES)
        return skv_error("niah %s: needles %d out of 2..%d", NIAH_KINDS[kind], needles, SKV_NIAH_MAX_NEEDLES);
    if (length < 1) return skv_error("niah: length %d", length);
    u->kind = kind;
    u->n_needles = needles;
    u->n_gold = kind == SKV_NIAH_MULTIVALUE ? needles : 1;
    uint64_t rs = ((uint64_t)seed << 32) | 0x5eedu;
    /* keys: distinct adjective-noun words (multivalue: one key for all) */
    for (int i = 0; i < needles; i++) {
        if (i > 0 && kind == SKV_NIAH_MULTIVALUE) { snprintf(u->keys[i], sizeof u->keys[i], "%s", u->keys[0]); continue; }
        for (;;) {
            snprintf(u->keys[i], sizeof u->keys[i], "%s-%s", ADJS[rnd(&rs, N_ADJ)], NOUNS[rnd(&rs, N_NOUN)]);
            bool dup = false;
            for (int j = 0; j < i; j++) dup |= !strcmp(u->keys[i], u->keys[j]);
            if (!dup) break;
        }
    }
    snprintf(u->query, sizeof u->query, "%s", u->keys[0]);
    /* values: distinct 7-digit numbers */
    for (int i = 0; i < needles; i++)
        for (;;) {
            snprintf(u->values[i], sizeof u->values[i], "%d", 1000000 + rnd(&rs, 9000000));
            bool dup = false;
            for (int j = 0; j < i; j++) dup |= !strcmp(u->values[i], u->values[j]);
            if (!dup) break;
        }
    /* depths: the asked needle at depth_pct, the others drawn without repeats from RULER's
     * grid of 40 depths, round(linspace(0, 100, 40)), leaving depth_pct out */
    int grid[40], ng = 0;
    for (int i = 0; i < 40; i++) {
        const int d = (int)(100.0 * i / 39 + 0.5);
        if (d != depth_pct) grid[ng++] = d;
    }
    u->depth_pct[0] = depth_pct;
    for (int i = 1; i < needles; i++) {
        const int k = rnd(&rs, ng);
        u->depth_pct[i] = grid[k];
        grid[k] = grid[--ng];
    }
    /* RULER's template; one asked value reads in the singular */
    const bool plural = u->n_gold > 1;
    const char *tn = plural ? "numbers" : "number";
    char intro[256], question[256], answer[256];
    snprintf(intro, sizeof intro,
             plural ? "Some special magic %s are hidden within the following text. Make sure to memorize it. I will quiz you "
                      "about the %s afterwards.\n"
                    : "A special magic %s is hidden within the following text. Make sure to memorize it. I will quiz you "
                      "about the %s afterwards.\n",
             tn, tn);
    snprintf(question, sizeof question, "\nWhat %s the special magic %s for %s mentioned in the provided text?",
             plural ? "are all" : "is", tn, u->query);
    const bool chat = wrap && wrap->n_mid > 0;
    snprintf(answer, sizeof answer, "%sThe special magic %s for %s mentioned in the provided text %s", chat ? "" : " ", tn,
             u->query, plural ? "are" : "is");
    int *ti = NULL, *tq = NULL, *ta = NULL, *tn_[SKV_NIAH_MAX_NEEDLES] = {0}, *out = NULL;
    int rc = -1;
    const int ni = tok_text(t, intro, &ti), nq = ni < 0 ? -1 : tok_text(t, question, &tq),
              na = nq < 0 ? -1 : tok_text(t, answer, &ta);
    if (na < 0) goto done;
    int nn = 0;
    for (int i = 0; i < needles; i++) {
        char nd[160];
        snprintf(nd, sizeof nd, " One of the special magic numbers for %s is: %s.", u->keys[i], u->values[i]);
        if ((u->len[i] = tok_text(t, nd, &tn_[i])) < 0) goto done;
        nn += u->len[i];
    }
    const int n_pre = wrap ? wrap->n_pre : 0, n_mid = wrap ? wrap->n_mid : 0;
    const long W = (long)length - n_pre - ni - nn - nq - n_mid - na;
    if (W < 1) {
        skv_error("niah: %d tokens are too few for the template and %d needle%s (it needs %ld)", length, needles,
                  needles > 1 ? "s" : "", (long)length - W + 1);
        goto done;
    }
    if (W > n_fill) { skv_error("niah: filler has %d tokens, %ld needed for %d", n_fill, W, length); goto done; }
    /* insertion points: at the depth, then on to just after a sentence end */
    int at[SKV_NIAH_MAX_NEEDLES], order[SKV_NIAH_MAX_NEEDLES];
    for (int i = 0; i < needles; i++) {
        long a = W * u->depth_pct[i] / 100;
        while (a > 0 && a < W && !sentence_end(t, fill[a - 1])) a++;
        at[i] = (int)a;
        order[i] = i;
    }
    for (int i = 1; i < needles; i++)   /* by position, stable */
        for (int j = i; j > 0 && at[order[j]] < at[order[j - 1]]; j--) { int x = order[j]; order[j] = order[j - 1]; order[j - 1] = x; }
    if (!(out = skv_malloc((size_t)length * sizeof(int), "niah prompt"))) goto done;
    int o = 0, f = 0;
    if (n_pre) { memcpy(out, wrap->pre, (size_t)n_pre * sizeof(int)); o += n_pre; }
    memcpy(out + o, ti, (size_t)ni * sizeof(int)); o += ni;
    u->body_start = o;
    for (int k = 0; k < needles; k++) {
        const int i = order[k];
        memcpy(out + o, fill + f, (size_t)(at[i] - f) * sizeof(int)); o += at[i] - f; f = at[i];
        u->pos[i] = o;
        u->filler_before[i] = f;
        memcpy(out + o, tn_[i], (size_t)u->len[i] * sizeof(int)); o += u->len[i];
    }
    memcpy(out + o, fill + f, (size_t)(W - f) * sizeof(int)); o += (int)(W - f);
    memcpy(out + o, tq, (size_t)nq * sizeof(int)); o += nq;
    if (n_mid) { memcpy(out + o, wrap->mid, (size_t)n_mid * sizeof(int)); o += n_mid; }
    memcpy(out + o, ta, (size_t)na * sizeof(int)); o += na;
    if (o != length) { skv_error("niah: internal length mismatch (%d vs %d)", o, length); goto done; }
    u->n_filler = (int)W;
    u->prompt = out; out = NULL;
    u->n_prompt = o;
    rc = 0;
done:
    free(ti); free(tq); free(ta); free(out);
    for (int i = 0; i < SKV_NIAH_MAX_NEEDLES; i++) free(tn_[i]);
    return rc;
}

bool skv_niah_stop(const char *text, void *u) {
    const int want = u ? *(const int *)u : 1;
    int runs = 0;
    bool content = false;
    for (const char *p = text; *p; p++) {
        if (isdigit((unsigned char)*p)) {
            const char *s = p;
            while (isdigit((unsigned char)p[1])) p++;
            if (p - s + 1 >= SKV_NIAH_VALUE_DIGITS && p[1]) runs++;   /* complete: a non-digit follows */
            content = true;
            continue;
        }
        if (!isspace((unsigned char)*p)) content = true;
        if (content && runs > 0 && p[0] == '\n' && p[1] == '\n') return true;
    }
    return runs >= want;
}

/* ------------------------------------------------------------------ padding */

char *skv_pad_text(const skv_tokenizer *t, const int *fill, int n) {
    if (n <= 0) return skv_strdup("");
    return skv_detokenize(t, fill, n);
}

/* ------------------------------------------------------------------ LongBench */

char *skv_format_fields(const char *tmpl, const cJSON *rec) {
    size_t cap = strlen(tmpl) + 1, n = 0;
    char *out = skv_malloc(cap, "formatted prompt");
    if (!out) return NULL;
#define PUT(src, len) do { \
        size_t l_ = (len); \
        if (n + l_ + 1 > cap) { \
            size_t nc_ = (n + l_ + 1) * 2; \
            char *no_ = realloc(out, nc_); \
            if (!no_) { free(out); skv_error("format: out of memory"); return NULL; } \
            out = no_; cap = nc_; \
        } \
        memcpy(out + n, (src), l_); n += l_; \
    } while (0)
    for (const char *p = tmpl; *p;) {
        if (p[0] == '{' && p[1] == '{') { PUT("{", 1); p += 2; continue; }
        if (p[0] == '}' && p[1] == '}') { PUT("}", 1); p += 2; continue; }
        if (*p == '}') { free(out); skv_error("format: single '}' in the template"); return NULL; }
        if (*p == '{') {
            const char *e = strchr(p + 1, '}');
            char name[128];
            if (!e || e == p + 1 || (size_t)(e - p - 1) >= sizeof name) {
                free(out);
                skv_error("format: bad field at '%.20s' in the template", p);
                return NULL;
            }
            memcpy(name, p + 1, (size_t)(e - p - 1));
            name[e - p - 1] = 0;
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(rec, name);
            if (!cJSON_IsString(v)) {
                free(out);
                skv_error("format: the record has no string field '%s' the template asks for", name);
                return NULL;
            }
            PUT(v->valuestring, strlen(v->valuestring));
            p = e + 1;
            continue;
        }
        PUT(p, 1);
        p++;
    }
#undef PUT
    out[n] = 0;
    return out;
}

static cJSON *load_json(const char *path) {
    size_t len;
    char *text = skv_read_file(path, &len);
    if (!text) return NULL;
    cJSON *j = cJSON_ParseWithLength(text, len);
    free(text);
    if (!j) skv_error("%s: not valid JSON", path);
    return j;
}

cJSON *skv_longbench_load(const char *data_dir, const char *subset, char **tmpl, int *max_gen) {
    char path[4400];
    *tmpl = NULL;
    if (strlen(data_dir) > 4000 || strlen(subset) > 100 || strchr(subset, '/')) { skv_error("longbench: bad subset or data folder"); return NULL; }
    snprintf(path, sizeof path, "%s/longbench/dataset2prompt.json", data_dir);
    cJSON *pj = load_json(path);
    if (!pj) return NULL;
    const cJSON *tp = cJSON_GetObjectItemCaseSensitive(pj, subset);
    if (!cJSON_IsString(tp)) { cJSON_Delete(pj); skv_error("%s: no prompt template for subset '%s'", path, subset); return NULL; }
    char *tm = skv_strdup(tp->valuestring);
    cJSON_Delete(pj);
    snprintf(path, sizeof path, "%s/longbench/dataset2maxlen.json", data_dir);
    cJSON *mj = tm ? load_json(path) : NULL;
    const cJSON *mv = mj ? cJSON_GetObjectItemCaseSensitive(mj, subset) : NULL;
    if (!mj || !cJSON_IsNumber(mv) || mv->valuedouble < 1 || mv->valuedouble > 65536) {
        if (mj) skv_error("%s: no generation length for subset '%s'", path, subset);
        cJSON_Delete(mj); free(tm);
        return NULL;
    }
    *max_gen = (int)mv->valuedouble;
    cJSON_Delete(mj);
    snprintf(path, sizeof path, "%s/longbench/%s.jsonl", data_dir, subset);
    size_t len;
    char *raw = skv_read_file(path, &len);
    if (!raw) { free(tm); return NULL; }
    cJSON *arr = cJSON_CreateArray();
    int line_no = 0;
    for (char *line = raw, *next; arr && line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        line_no++;
        if (!*line) continue;
        cJSON *r = cJSON_Parse(line);
        const cJSON *ctx = r ? cJSON_GetObjectItemCaseSensitive(r, "context") : NULL;
        const cJSON *ans = r ? cJSON_GetObjectItemCaseSensitive(r, "answers") : NULL;
        bool ok = cJSON_IsString(ctx) && cJSON_IsArray(ans) && cJSON_GetArraySize(ans) > 0;
        const cJSON *a;
        if (ok) cJSON_ArrayForEach(a, ans) ok &= cJSON_IsString(a);
        if (!ok) {
            cJSON_Delete(r); cJSON_Delete(arr); free(raw); free(tm);
            skv_error("%s: line %d is not a LongBench record (\"context\" string, \"answers\" strings)", path, line_no);
            return NULL;
        }
        cJSON_AddItemToArray(arr, r);
    }
    free(raw);
    if (!arr || !cJSON_GetArraySize(arr)) { cJSON_Delete(arr); free(tm); skv_error("%s: no records", path); return NULL; }
    *tmpl = tm;
    return arr;
}

int skv_truncate_middle(const int *ids, int n, int max_length, int *out) {
    if (n <= max_length) {
        memmove(out, ids, (size_t)n * sizeof(int));
        return n;
    }
    const int half = max_length / 2;   /* int(max_length / 2) */
    memmove(out, ids, (size_t)half * sizeof(int));
    memmove(out + half, ids + n - half, (size_t)half * sizeof(int));
    return 2 * half;
}

/* decode without special tokens (BOS, the stop tokens), as skip_special_tokens=True */
static char *decode_plain(const skv_tokenizer *t, const int *ids, int n) {
    int *keep = skv_malloc(((size_t)n + 1) * sizeof(int), "decode");
    if (!keep) return NULL;
    int k = 0;
    const int bos = skv_tok_bos(t);
    for (int i = 0; i < n; i++)
        if (ids[i] != bos && !skv_tok_is_stop(t, ids[i])) keep[k++] = ids[i];
    char *s = skv_detokenize(t, keep, k);
    free(keep);
    return s;
}

char *skv_longbench_truncate(const skv_tokenizer *t, const char *prompt, int max_length, int *n_full) {
    if (max_length < 2) { skv_error("longbench: max length %d too small", max_length); return NULL; }
    int *ids = NULL;
    const int n = skv_eval_tokenize(t, prompt, strlen(prompt), skv_tok_add_bos(t), &ids);
    if (n < 0) return NULL;
    *n_full = n;
    if (n <= max_length) { free(ids); return skv_strdup(prompt); }
    const int half = max_length / 2;
    char *a = decode_plain(t, ids, half), *b = a ? decode_plain(t, ids + n - half, half) : NULL;
    free(ids);
    char *out = NULL;
    if (a && b) {
        const size_t la = strlen(a), lb = strlen(b);
        if ((out = skv_malloc(la + lb + 1, "longbench prompt"))) {
            memcpy(out, a, la);
            memcpy(out + la, b, lb + 1);
        }
    }
    free(a); free(b);
    return out;
}
