/* tokenizer_pretok.c: pre-tokenizers, i.e. the regex splits of Hugging Face `tokenizers`
 * written as hand matchers over code points (first alternative that matches wins, as in
 * the regex engine):
 *   gpt2   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *   smollm every \p{N} code point is its own word (Digits, individual_digits), then gpt2
 *          on the pieces between them
 *   qwen2  (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}
 *          | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * Bytes that are not valid UTF-8 are one unit each, of class "other" (neither L, N nor \s). */
#include "tokenizer_internal.h"
#include "unicode_tables.h"
#include "common/util.h"
#include <stdlib.h>
#include <string.h>

enum { C_L = 1, C_N = 2, C_S = 4, C_NL = 8 };  /* class bits of a unit; C_NL = \r or \n */

typedef struct {
    size_t n;          /* units */
    uint32_t *cp;      /* (n) code points (SKV_CP_INVALID for a bad byte) */
    uint32_t *off;     /* (n+1) byte offset of each unit */
    uint8_t *cls;      /* (n) C_* bits */
} units;

static int decode_units(const char *text, size_t len, units *u) {
    if (len >= UINT32_MAX) return skv_error("tokenizer: text too long (%zu bytes)", len);
    u->cp = skv_malloc((len + 1) * sizeof(uint32_t), "tokenizer code points");
    u->off = skv_malloc((len + 1) * sizeof(uint32_t), "tokenizer offsets");
    u->cls = skv_malloc(len + 1, "tokenizer classes");
    if (!u->cp || !u->off || !u->cls) return -1;
    const unsigned char *s = (const unsigned char *)text;
    size_t i = 0, k = 0;
    while (i < len) {
        uint32_t cp;
        int used = skv_utf8_decode(s + i, len - i, &cp);
        uint8_t c = 0;
        if (cp != SKV_CP_INVALID) {
            int uc = skv_uni_class(cp);
            if (uc == SKV_UNI_LETTER) c |= C_L;
            else if (uc == SKV_UNI_NUMBER) c |= C_N;
            if (skv_uni_is_space(cp)) c |= C_S;
            if (cp == '\r' || cp == '\n') c |= C_NL;
        }
        u->cp[k] = cp; u->off[k] = (uint32_t)i; u->cls[k] = c;
        k++; i += (size_t)used;
    }
    u->off[k] = (uint32_t)len;
    u->n = k;
    return 0;
}

static uint32_t ascii_lower(uint32_t c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

/* contraction at i: 's 't 're 've 'm 'll 'd (ci: ASCII case-insensitive). Returns end or 0. */
static size_t match_contraction(const units *u, size_t i, size_t n, int ci) {
    if (u->cp[i] != '\'' || i + 1 >= n) return 0;
    uint32_t a = u->cp[i + 1], b = i + 2 < n ? u->cp[i + 2] : 0;
    if (ci) { a = ascii_lower(a); b = ascii_lower(b); }
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
    return 0;
}

#define IS(k, bits) (u->cls[k] & (bits))
#define PUNCT(k) (!(u->cls[k] & (C_L | C_N | C_S)))   /* [^\s\p{L}\p{N}] */

/* whitespace tail shared by both regexes: \s+(?!\S)|\s+ from i (a space unit), run ends at k */
static size_t match_space_run(size_t i, size_t k, size_t n) {
    if (k == n) return k;          /* run reaches the end: all of it */
    if (k - i >= 2) return k - 1;  /* leave the last space to the next word */
    return k;                      /* \s+ : the single space */
}

/* GPT-2 regex: end of the word starting at i, within units [.., n). */
static size_t match_gpt2(const units *u, size_t i, size_t n) {
    size_t j = match_contraction(u, i, n, 0);
    if (j) return j;
    j = i;
    if (u->cp[i] == ' ' && i + 1 < n) j = i + 1;  /* optional leading space */
    if (IS(j, C_L)) { while (j < n && IS(j, C_L)) j++; return j; }
    if (IS(j, C_N)) { while (j < n && IS(j, C_N)) j++; return j; }
    if (PUNCT(j)) { while (j < n && PUNCT(j)) j++; return j; }
    /* here u[i] is whitespace (a lone ' ' followed by space, or other \s) */
    size_t k = i;
    while (k < n && IS(k, C_S)) k++;
    return match_space_run(i, k, n);
}

/* Qwen2 regex: end of the word starting at i, within [.., n). */
static size_t match_qwen2(const units *u, size_t i, size_t n) {
    size_t j = match_contraction(u, i, n, 1);
    if (j) return j;
    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    j = i;
    if (!IS(i, C_L | C_N | C_NL) && i + 1 < n && IS(i + 1, C_L)) j = i + 1;
    if (IS(j, C_L)) { while (j < n && IS(j, C_L)) j++; return j; }
    if (IS(i, C_N)) return i + 1;                                  /* \p{N} */
    /*  ?[^\s\p{L}\p{N}]+[\r\n]* */
    j = i;
    if (u->cp[i] == ' ' && i + 1 < n && PUNCT(i + 1)) j = i + 1;
    if (PUNCT(j)) {
        while (j < n && PUNCT(j)) j++;
        while (j < n && IS(j, C_NL)) j++;
        return j;
    }
    /* u[i] is whitespace: \s*[\r\n]+ ends after the run's last \r or \n */
    size_t k = i, last_nl = 0; int have_nl = 0;
    while (k < n && IS(k, C_S)) { if (IS(k, C_NL)) { last_nl = k; have_nl = 1; } k++; }
    if (have_nl) return last_nl + 1;
    return match_space_run(i, k, n);
}

static int emit(const char *text, const units *u, size_t a, size_t b, skv_word_fn fn, void *ctx) {
    return fn(text + u->off[a], u->off[b] - u->off[a], ctx);
}

static int split_range(skv_pretok_kind kind, const char *text, const units *u, size_t a, size_t n,
                       skv_word_fn fn, void *ctx) {
    size_t i = a;
    while (i < n) {
        size_t j = kind == SKV_PRE_QWEN2 ? match_qwen2(u, i, n) : match_gpt2(u, i, n);
        int rc = emit(text, u, i, j, fn, ctx);
        if (rc) return rc;
        i = j;
    }
    return 0;
}

int skv_pretokenize(skv_pretok_kind kind, const char *text, size_t len, skv_word_fn fn, void *ctx) {
    if (len == 0) return 0;
    units u = {0};
    int rc = decode_units(text, len, &u);
    if (rc == 0) {
        if (kind == SKV_PRE_SMOLLM) {
            size_t a = 0;
            for (size_t i = 0; i < u.n && rc == 0; i++) {
                if (!(u.cls[i] & C_N)) continue;
                rc = split_range(SKV_PRE_GPT2, text, &u, a, i, fn, ctx);
                if (rc == 0) rc = emit(text, &u, i, i + 1, fn, ctx);
                a = i + 1;
            }
            if (rc == 0) rc = split_range(SKV_PRE_GPT2, text, &u, a, u.n, fn, ctx);
        } else {
            rc = split_range(kind, text, &u, 0, u.n, fn, ctx);
        }
    }
    free(u.cp); free(u.off); free(u.cls);
    return rc;
}

int skv_pretok_from_name(const char *name) {
    if (!name) return -1;
    if (!strcmp(name, "qwen2") || !strcmp(name, "deepseek-r1-qwen")) return SKV_PRE_QWEN2;
    if (!strcmp(name, "smollm")) return SKV_PRE_SMOLLM;
    if (!strcmp(name, "gpt2") || !strcmp(name, "default")) return SKV_PRE_GPT2;
    return -1;
}
