/* metrics.c: per-step distribution comparison, its accumulation, and answer
 * extraction for the exact-match tasks (see metrics.h). */
#include "metrics.h"
#include "runtime/session/sampling.h"
#include "common/util.h"
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

double skv_logsumexp(const float *x, int V) {
    float mx = x[0];
    for (int i = 1; i < V; i++) if (x[i] > mx) mx = x[i];
    double s = 0;
    for (int i = 0; i < V; i++) s += exp((double)x[i] - mx);
    return mx + log(s);
}

void skv_compare_logits(const float *r, const float *q, int V, int target, skv_step_cmp *out) {
    const double lr = skv_logsumexp(r, V), lq = skv_logsumexp(q, V);
    double kl = 0;
    for (int i = 0; i < V; i++) {
        double a = (double)r[i] - lr;           /* log p_full */
        double p = exp(a);
        if (p > 0) kl += p * (a - ((double)q[i] - lq));
    }
    out->kl = kl > 0 ? kl : 0;
    out->top1 = skv_argmax(r, V) == skv_argmax(q, V);
    out->nll_ref = target >= 0 && target < V ? lr - r[target] : 0;
    out->nll_pol = target >= 0 && target < V ? lq - q[target] : 0;
}

int skv_fid_add(skv_fid_acc *a, const skv_step_cmp *c) {
    if (a->n == a->cap) {
        int nc = a->cap ? a->cap * 2 : 1024;
        double *k = realloc(a->kl, (size_t)nc * sizeof(double));
        if (!k) return skv_error("fidelity: out of memory for %d steps", nc);
        a->kl = k;
        a->cap = nc;
    }
    a->kl[a->n++] = c->kl;
    a->sum_kl += c->kl;
    a->sum_nll_ref += c->nll_ref;
    a->sum_nll_pol += c->nll_pol;
    a->top1 += c->top1;
    return 0;
}

void skv_fid_free(skv_fid_acc *a) {
    free(a->kl);
    memset(a, 0, sizeof *a);
}

static int cmp_d(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

double skv_quantile(double *v, int n, double q) {
    if (n <= 0) return 0;
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    int k = (int)ceil(q * n) - 1;
    if (k < 0) k = 0;
    if (k >= n) k = n - 1;
    return v[k];
}

void skv_fid_summarize(skv_fid_acc *a, skv_fid_summary *s) {
    memset(s, 0, sizeof *s);
    s->steps = a->n;
    if (!a->n) return;
    s->kl_mean = a->sum_kl / a->n;
    s->kl_p95 = skv_quantile(a->kl, a->n, 0.95);
    s->kl_max = a->kl[a->n - 1];
    s->top1 = (double)a->top1 / a->n;
    s->ppl_ref = exp(a->sum_nll_ref / a->n);
    s->ppl_pol = exp(a->sum_nll_pol / a->n);
    s->ppl_ratio = s->ppl_pol / s->ppl_ref;
}

/* ------------------------------------------------------------------ answers */

bool skv_norm_number(const char *s, size_t len, char *out, size_t n) {
    size_t o = 0;
    bool digit = false;
    for (size_t i = 0; i < len && o + 1 < n; i++) {
        char c = s[i];
        if (c == ',' || c == '$' || c == ' ') continue;
        if (isdigit((unsigned char)c)) digit = true;
        if (isdigit((unsigned char)c) || c == '.' || (c == '-' && o == 0)) out[o++] = c;
        else break;
    }
    out[o] = 0;
    if (!digit) { if (n) out[0] = 0; return false; }
    size_t e0 = strlen(out);
    while (e0 && out[e0 - 1] == '.') out[--e0] = 0;
    char *dot = strchr(out, '.');
    if (dot) {
        size_t e = strlen(out);
        while (e > (size_t)(dot - out) + 1 && out[e - 1] == '0') out[--e] = 0;
        if (out[e - 1] == '.') out[--e] = 0;
    }
    if (!strcmp(out, "-0")) strcpy(out, "0");
    return out[0] != 0;
}

/* Start of the last number in [s, s+len) ("-" included when it precedes a digit). */
static const char *last_number(const char *s, size_t len, size_t *nlen) {
    const char *best = NULL;
    size_t i = 0;
    while (i < len) {
        if (isdigit((unsigned char)s[i])) {
            size_t j = i;
            while (j < len && (isdigit((unsigned char)s[j]) || ((s[j] == ',' || s[j] == '.') && j + 1 < len &&
                                                                  isdigit((unsigned char)s[j + 1]))))
                j++;
            best = (i > 0 && s[i - 1] == '-') ? s + i - 1 : s + i;
            *nlen = (size_t)(s + j - best);
            i = j;
        } else i++;
    }
    return best;
}

bool skv_extract_gsm8k(const char *text, char *out, size_t n) {
    const char *p = NULL, *q = text;
    while ((q = strstr(q, "answer is")) != NULL) { p = q + 9; q = p; }
    if (p) {
        while (*p == ' ' || *p == ':' || *p == '$') p++;
        size_t l = 0;
        const char *e = p;
        while (*e && (isdigit((unsigned char)*e) || *e == ',' || *e == '.' || *e == '-' || *e == '$')) e++;
        l = (size_t)(e - p);
        if (l && skv_norm_number(p, l, out, n)) return true;
    }
    size_t nl = 0;
    const char *s = last_number(text, strlen(text), &nl);
    return s && skv_norm_number(s, nl, out, n);
}

bool skv_gsm8k_gold(const char *answer, char *out, size_t n) {
    const char *p = strstr(answer, "####");
    if (!p) return false;
    p += 4;
    while (*p == ' ') p++;
    return skv_norm_number(p, strlen(p), out, n);
}

static void trim_copy(const char *s, size_t len, char *out, size_t n) {
    while (len && isspace((unsigned char)*s)) { s++; len--; }
    while (len && isspace((unsigned char)s[len - 1])) len--;
    if (len >= n) len = n - 1;
    memcpy(out, s, len);
    out[len] = 0;
}

bool skv_extract_bbh(const char *text, char *out, size_t n) {
    const char *p = strstr(text, "So the answer is ");
    if (p) {
        p += strlen("So the answer is ");
        const char *e = strchr(p, '\n');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        while (l && (p[l - 1] == '.' || isspace((unsigned char)p[l - 1]))) l--;
        trim_copy(p, l, out, n);
        return out[0] != 0;
    }
    const char *e = strchr(text, '\n');
    trim_copy(text, e ? (size_t)(e - text) : strlen(text), out, n);
    return out[0] != 0;
}

bool skv_bbh_match(const char *pred, const char *target) {
    char a[256], b[256];
    trim_copy(pred, strlen(pred), a, sizeof a);
    trim_copy(target, strlen(target), b, sizeof b);
    if (!strcmp(a, b)) return true;
    /* option letters: "(B)" vs "B" / "(B) 12/14/1937" */
    if (b[0] == '(' && strlen(b) == 3 && b[2] == ')') {
        if (a[0] == b[1] && (a[1] == 0 || a[1] == ')')) return true;
        if (!strncmp(a, b, 3)) return true;
    }
    /* numbers: "24" vs "24.0" (a must be a plain number) */
    for (const char *c = a; *c; c++)
        if (!isdigit((unsigned char)*c) && !strchr(".,-$", *c)) return false;
    char na[64], nb[64];
    if (skv_norm_number(a, strlen(a), na, sizeof na) && skv_norm_number(b, strlen(b), nb, sizeof nb) && !strcmp(na, nb))
        return true;
    return false;
}

bool skv_first_digits(const char *text, char *out, size_t n) {
    const char *p = text;
    while (*p && !isdigit((unsigned char)*p)) p++;
    size_t o = 0;
    while (*p && isdigit((unsigned char)*p) && o + 1 < n) out[o++] = *p++;
    out[o] = 0;
    return o > 0;
}

/* ------------------------------------------------------------------ needles, ROUGE-L */

double skv_recall_values(const char *text, const char *const *values, int n) {
    if (n <= 0) return 0;
    int found = 0;
    for (int i = 0; i < n; i++) found += values[i] && strcasestr(text, values[i]) != NULL;
    return (double)found / n;
}

/* Bytes of a whitespace character (Python's str.isspace) at p, 0 when none: ASCII \t..\r,
 * \x1c..\x1f and space; in UTF-8 U+0085, U+00A0, U+1680, U+2000..U+200A, U+2028, U+2029,
 * U+202F, U+205F, U+3000. */
static int py_space(const unsigned char *p) {
    if (*p == ' ' || (*p >= '\t' && *p <= '\r') || (*p >= 0x1c && *p <= 0x1f)) return 1;
    if (p[0] == 0xc2 && (p[1] == 0x85 || p[1] == 0xa0)) return 2;
    if (p[0] == 0xe1 && p[1] == 0x9a && p[2] == 0x80) return 3;
    if (p[0] == 0xe2 && p[1] == 0x80 && ((p[2] >= 0x80 && p[2] <= 0x8a) || p[2] == 0xa8 || p[2] == 0xa9 || p[2] == 0xaf)) return 3;
    if (p[0] == 0xe2 && p[1] == 0x81 && p[2] == 0x9f) return 3;
    if (p[0] == 0xe3 && p[1] == 0x80 && p[2] == 0x80) return 3;
    return 0;
}

/* a text as the package sees it: sentences of words; words[] point into buf (NUL-ended) */
typedef struct {
    char *buf;
    char **words; int n_words;
    int *sent; int n_sent;        /* sentence s: words sent[s] .. sent[s+1]-1 (n_sent + 1 entries) */
    int *id;                      /* each word's id among the distinct words of both texts */
} rl_text;

static void rl_free(rl_text *t) { free(t->buf); free(t->words); free(t->sent); free(t->id); }

static int rl_split(const char *s, rl_text *t) {
    memset(t, 0, sizeof *t);
    const size_t len = strlen(s);
    /* at most one word per byte plus an empty word per sentence; sentences <= pieces */
    t->buf = skv_malloc(len + 2, "rouge text");
    t->words = skv_malloc((len + 2) * sizeof(char *), "rouge words");
    t->sent = skv_malloc((len + 3) * sizeof(int), "rouge sentences");
    if (!t->buf || !t->words || !t->sent) { rl_free(t); return -1; }
    size_t o = 0;
    for (const char *p = s;;) {
        const char *e = strchr(p, '.');
        if (!e) e = s + len;
        if (e > p) {   /* a piece of length > 0: a sentence */
            t->sent[t->n_sent++] = t->n_words;
            const char *q = p;
            int nw = 0;
            while (q < e) {
                int w;
                while (q < e && (w = py_space((const unsigned char *)q)) > 0) q += w;
                if (q >= e) break;
                t->words[t->n_words++] = t->buf + o;
                while (q < e && !py_space((const unsigned char *)q)) t->buf[o++] = *q++;
                t->buf[o++] = 0;
                nw++;
            }
            if (!nw) { t->words[t->n_words++] = t->buf + o; t->buf[o++] = 0; }   /* "".split(" ") == [""] */
        }
        if (!*e) break;
        p = e + 1;
    }
    t->sent[t->n_sent] = t->n_words;
    return 0;
}

static int cmp_pstr(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int skv_rouge_l(const char *hyp, const char *ref, double *f, double *p, double *r) {
    if (f) *f = 0;
    if (p) *p = 0;
    if (r) *r = 0;
    rl_text h, g;
    if (rl_split(hyp, &h)) return -1;
    if (rl_split(ref, &g)) { rl_free(&h); return -1; }
    int rc = -1;
    char **all = NULL;
    unsigned char *in_ref = NULL, *in_hyp = NULL, *uni = NULL;
    int *tab = NULL;
    if (!h.n_sent || !g.n_sent) { rc = 0; goto done; }   /* the package raises: LongBench's 0 */
    /* distinct words of both texts -> ids */
    const int nw = h.n_words + g.n_words;
    all = skv_malloc((size_t)nw * sizeof *all, "rouge words");
    h.id = skv_malloc((size_t)h.n_words * sizeof(int) + 1, "rouge words");
    g.id = skv_malloc((size_t)g.n_words * sizeof(int) + 1, "rouge words");
    if (!all || !h.id || !g.id) goto done;
    memcpy(all, h.words, (size_t)h.n_words * sizeof *all);
    memcpy(all + h.n_words, g.words, (size_t)g.n_words * sizeof *all);
    qsort(all, (size_t)nw, sizeof *all, cmp_pstr);
    int nd = 0;
    for (int i = 0; i < nw; i++) if (!nd || strcmp(all[nd - 1], all[i])) all[nd++] = all[i];
    for (int k = 0; k < 2; k++) {
        rl_text *t = k ? &g : &h;
        for (int i = 0; i < t->n_words; i++) {
            char **hit = bsearch(&t->words[i], all, (size_t)nd, sizeof *all, cmp_pstr);
            t->id[i] = (int)(hit - all);
        }
    }
    in_ref = skv_calloc((size_t)nd, 1, "rouge sets");
    in_hyp = skv_calloc((size_t)nd, 1, "rouge sets");
    uni = skv_calloc((size_t)nd, 1, "rouge sets");
    if (!in_ref || !in_hyp || !uni) goto done;
    int m = 0, n = 0;
    for (int i = 0; i < g.n_words; i++) if (!in_ref[g.id[i]]) { in_ref[g.id[i]] = 1; m++; }
    for (int i = 0; i < h.n_words; i++) if (!in_hyp[h.id[i]]) { in_hyp[h.id[i]] = 1; n++; }
    /* the LCS table of the longest pair, reused */
    int mx_g = 0, mx_h = 0;
    for (int s = 0; s < g.n_sent; s++) if (g.sent[s + 1] - g.sent[s] > mx_g) mx_g = g.sent[s + 1] - g.sent[s];
    for (int s = 0; s < h.n_sent; s++) if (h.sent[s + 1] - h.sent[s] > mx_h) mx_h = h.sent[s + 1] - h.sent[s];
    const size_t cells = (size_t)(mx_g + 1) * (size_t)(mx_h + 1);
    if (cells > ((size_t)1 << 28)) { skv_error("rouge-l: sentences of %d and %d words are too long", mx_g, mx_h); goto done; }
    if (!(tab = skv_malloc(cells * sizeof(int), "rouge lcs table"))) goto done;
    int llcs = 0;
    for (int rs = 0; rs < g.n_sent; rs++) {
        const int *x = g.id + g.sent[rs], nx = g.sent[rs + 1] - g.sent[rs];   /* reference words */
        for (int hs = 0; hs < h.n_sent; hs++) {
            const int *y = h.id + h.sent[hs], ny = h.sent[hs + 1] - h.sent[hs];   /* candidate words */
            const int W = ny + 1;
            for (int j = 0; j <= ny; j++) tab[j] = 0;
            for (int i = 1; i <= nx; i++) {
                tab[(size_t)i * W] = 0;
                for (int j = 1; j <= ny; j++) {
                    const size_t c = (size_t)i * W + j;
                    if (x[i - 1] == y[j - 1]) tab[c] = tab[c - W - 1] + 1;
                    else tab[c] = tab[c - W] > tab[c - 1] ? tab[c - W] : tab[c - 1];
                }
            }
            /* the package's reconstruction: diagonal on a match, up when strictly longer, else left */
            for (int i = nx, j = ny; i > 0 && j > 0;) {
                if (x[i - 1] == y[j - 1]) {
                    if (!uni[x[i - 1]]) { uni[x[i - 1]] = 1; llcs++; }
                    i--; j--;
                } else if (tab[(size_t)(i - 1) * W + j] > tab[(size_t)i * W + j - 1]) i--;
                else j--;
            }
        }
    }
    const double R = (double)llcs / m, P = (double)llcs / n;
    if (f) *f = 2.0 * ((P * R) / (P + R + 1e-8));
    if (p) *p = P;
    if (r) *r = R;
    rc = 0;
done:
    rl_free(&h); rl_free(&g);
    free(all); free(in_ref); free(in_hyp); free(uni); free(tab);
    return rc;
}
