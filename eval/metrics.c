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
