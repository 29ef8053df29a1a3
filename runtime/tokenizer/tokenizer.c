/* tokenizer.c: byte-level BPE core: vocabulary and merge tables, building them (shared by
 * the GGUF and tokenizer.json loaders), encode (special tokens -> pre-tokenizer -> BPE per
 * word), decode, fingerprint, and the GGUF loader.
 *
 * Tokens are stored as raw bytes (the GPT-2 byte->unicode spelling undone), so BPE works
 * on bytes: a word starts as one symbol per byte and the lowest-ranked adjacent pair is
 * merged until none is left (ties: leftmost), exactly as HF `tokenizers` BPE does. */
#include "tokenizer_internal.h"
#include "runtime/format/gguf.h"
#include "common/util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- hashing helpers */

static uint64_t fnv1a(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) { h ^= p[i]; h *= 0x100000001b3ULL; }
    return h;
}
#define FNV_OFFSET 0xcbf29ce484222325ULL

static uint64_t mix64(uint64_t x) {   /* splitmix64 finaliser */
    x ^= x >> 30; x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27; x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static uint32_t pow2_at_least(size_t n) {
    uint32_t c = 16;
    while (c < n * 2) c <<= 1;
    return c;
}

/* ---------------------------------------------------------------- building */

skv_tokenizer *skv_tok_new(int n_vocab) {
    if (n_vocab <= 0 || n_vocab > (1 << 26)) {
        skv_error("tokenizer: bad vocabulary size %d", n_vocab);
        return NULL;
    }
    skv_tokenizer *t = skv_calloc(1, sizeof(*t), "tokenizer");
    if (!t) return NULL;
    t->n_vocab = n_vocab;
    t->tok = skv_calloc((size_t)n_vocab, sizeof(char *), "tokenizer tokens");
    t->tok_len = skv_calloc((size_t)n_vocab, sizeof(uint32_t), "tokenizer token lengths");
    t->tok_type = skv_calloc((size_t)n_vocab, 1, "tokenizer token types");
    t->bos = t->eos = t->eot = -1;
    snprintf(t->model, sizeof t->model, "gpt2");
    if (!t->tok || !t->tok_len || !t->tok_type) { skv_tokenizer_free(t); return NULL; }
    return t;
}

/* Undo the byte-level spelling of s into out (room for len bytes); -1 if some character is
 * outside the 256-character alphabet. */
static long unspell(const char *s, size_t len, char *out) {
    size_t i = 0, k = 0;
    while (i < len) {
        uint32_t cp;
        int used = skv_utf8_decode((const unsigned char *)s + i, len - i, &cp);
        int b = cp == SKV_CP_INVALID ? -1 : skv_unicode_to_byte(cp);
        if (b < 0) return -1;
        out[k++] = (char)b;
        i += (size_t)used;
    }
    return (long)k;
}

int skv_tok_set_token(skv_tokenizer *t, int id, const char *text, size_t len, int type) {
    if (id < 0 || id >= t->n_vocab) return skv_error("tokenizer: token id %d out of range", id);
    if (len > (1u << 20)) return skv_error("tokenizer: token %d is too long (%zu bytes)", id, len);
    char *b = skv_malloc(len + 1, "tokenizer token");
    if (!b) return -1;
    long n = unspell(text, len, b);
    if (n < 0) {                 /* not in the byte alphabet (e.g. an added token): raw text */
        memcpy(b, text, len);
        n = (long)len;
    }
    b[n] = 0;
    free(t->tok[id]);
    t->tok[id] = b;
    t->tok_len[id] = (uint32_t)n;
    t->tok_type[id] = (uint8_t)type;
    return 0;
}

int skv_tok_set_raw(skv_tokenizer *t, int id, const char *text, size_t len, int type) {
    if (id < 0 || id >= t->n_vocab) return skv_error("tokenizer: token id %d out of range", id);
    if (len > (1u << 20)) return skv_error("tokenizer: token %d is too long (%zu bytes)", id, len);
    char *b = skv_malloc(len + 1, "tokenizer token");
    if (!b) return -1;
    memcpy(b, text, len);
    b[len] = 0;
    free(t->tok[id]);
    t->tok[id] = b;
    t->tok_len[id] = (uint32_t)len;
    t->tok_type[id] = (uint8_t)type;
    return 0;
}

static uint32_t bytes_hash(const char *s, size_t n) { return (uint32_t)mix64(fnv1a(FNV_OFFSET, s, n)); }

int skv_tok_lookup(const skv_tokenizer *t, const char *bytes, size_t len) {
    if (!t->vslot) return -1;
    for (uint32_t h = bytes_hash(bytes, len) & t->vmask;; h = (h + 1) & t->vmask) {
        int32_t id = t->vslot[h];
        if (id < 0) return -1;
        if (t->tok_len[id] == len && memcmp(t->tok[id], bytes, len) == 0) return id;
    }
}

static void vocab_insert(skv_tokenizer *t, int id) {
    if (skv_tok_lookup(t, t->tok[id], t->tok_len[id]) >= 0) return;   /* keep the first */
    uint32_t h = bytes_hash(t->tok[id], t->tok_len[id]) & t->vmask;
    while (t->vslot[h] >= 0) h = (h + 1) & t->vmask;
    t->vslot[h] = id;
}

int skv_tok_index_vocab(skv_tokenizer *t) {
    uint32_t cap = pow2_at_least((size_t)t->n_vocab);
    t->vslot = skv_malloc((size_t)cap * sizeof(int32_t), "tokenizer vocab hash");
    if (!t->vslot) return -1;
    memset(t->vslot, 0xff, (size_t)cap * sizeof(int32_t));
    t->vmask = cap - 1;
    /* normal tokens first so that they win over an added token with the same bytes */
    for (int pass = 0; pass < 2; pass++)
        for (int id = 0; id < t->n_vocab; id++) {
            if (!t->tok[id]) continue;
            /* SentencePiece: byte pieces (<0x41> is stored as "A") after the others, so a
             * piece's text finds the piece (skv_spm_encode takes bytes from byte_id) */
            int normal = t->tok_type[id] == SKV_TOKT_NORMAL || (t->tok_type[id] == SKV_TOKT_BYTE && !t->spm);
            if (normal == (pass == 0)) vocab_insert(t, id);
        }
    return 0;
}

static uint64_t merge_key(int a, int b) { return ((uint64_t)(uint32_t)(a + 1) << 32) | (uint32_t)(b + 1); }

static int merges_grow(skv_tokenizer *t) {
    int cap = t->cap_merges ? t->cap_merges * 2 : 1024;
    int32_t *a = realloc(t->merge_a, (size_t)cap * sizeof(int32_t));
    if (a) t->merge_a = a;
    int32_t *b = realloc(t->merge_b, (size_t)cap * sizeof(int32_t));
    if (b) t->merge_b = b;
    int32_t *r = realloc(t->merge_res, (size_t)cap * sizeof(int32_t));
    if (r) t->merge_res = r;
    if (!a || !b || !r) return skv_error("tokenizer: out of memory for %d merges", cap);
    t->cap_merges = cap;
    return 0;
}

int skv_tok_add_merge(skv_tokenizer *t, const char *a, size_t la, const char *b, size_t lb) {
    if (t->n_merges == t->cap_merges && merges_grow(t)) return -1;
    size_t lab = la + lb;
    char *buf = skv_malloc(lab + 1, "tokenizer merge");
    if (!buf) return -1;
    long na = unspell(a, la, buf), nb = na < 0 ? -1 : unspell(b, lb, buf + na);
    int ia = -1, ib = -1, ir = -1;
    if (na >= 0 && nb >= 0) {
        ia = skv_tok_lookup(t, buf, (size_t)na);
        ib = skv_tok_lookup(t, buf + na, (size_t)nb);
        ir = skv_tok_lookup(t, buf, (size_t)(na + nb));
    }
    free(buf);
    if (ia < 0 || ib < 0 || ir < 0)
        return skv_error("tokenizer: merge %d '%.*s %.*s': %s not in the vocabulary", t->n_merges,
                         (int)la, a, (int)lb, b, ia < 0 ? "first part" : ib < 0 ? "second part" : "result");
    t->merge_a[t->n_merges] = ia;
    t->merge_b[t->n_merges] = ib;
    t->merge_res[t->n_merges] = ir;
    t->n_merges++;
    return 0;
}

static int index_merges(skv_tokenizer *t) {
    uint32_t cap = pow2_at_least((size_t)t->n_merges);
    t->mkey = skv_calloc(cap, sizeof(uint64_t), "tokenizer merge hash");
    t->mrank = skv_malloc((size_t)cap * sizeof(int32_t), "tokenizer merge ranks");
    if (!t->mkey || !t->mrank) return -1;
    t->mmask = cap - 1;
    for (int r = 0; r < t->n_merges; r++) {
        uint64_t key = merge_key(t->merge_a[r], t->merge_b[r]);
        uint32_t h = (uint32_t)mix64(key) & t->mmask;
        while (t->mkey[h] && t->mkey[h] != key) h = (h + 1) & t->mmask;
        if (t->mkey[h]) continue;   /* duplicate pair: the first (best) rank stays */
        t->mkey[h] = key;
        t->mrank[h] = r;
    }
    return 0;
}

static int merge_rank(const skv_tokenizer *t, int a, int b) {
    uint64_t key = merge_key(a, b);
    for (uint32_t h = (uint32_t)mix64(key) & t->mmask;; h = (h + 1) & t->mmask) {
        if (t->mkey[h] == key) return t->mrank[h];
        if (!t->mkey[h]) return -1;
    }
}

/* Sort the special-token ids longest first (ties: lower id first); few entries, so an
 * insertion sort (no global comparator state: loads may run in parallel). */
static void sort_specials(const skv_tokenizer *t, int *ids, int n) {
    for (int i = 1; i < n; i++) {
        int v = ids[i], j = i - 1;
        while (j >= 0 && (t->tok_len[ids[j]] < t->tok_len[v] ||
                          (t->tok_len[ids[j]] == t->tok_len[v] && ids[j] > v))) {
            ids[j + 1] = ids[j];
            j--;
        }
        ids[j + 1] = v;
    }
}

static uint64_t compute_hash(const skv_tokenizer *t) {
    uint64_t h = FNV_OFFSET;
    h = fnv1a(h, t->model, strlen(t->model) + 1);
    h = fnv1a(h, t->pre_name, strlen(t->pre_name) + 1);
    int32_t head[5] = { t->n_vocab, t->n_merges, t->bos, t->eos, t->add_bos };
    h = fnv1a(h, head, sizeof head);
    for (int id = 0; id < t->n_vocab; id++) {
        uint32_t meta[2] = { t->tok[id] ? t->tok_len[id] : 0xffffffffu, t->tok_type[id] };
        h = fnv1a(h, meta, sizeof meta);
        if (t->tok[id]) h = fnv1a(h, t->tok[id], t->tok_len[id]);
    }
    for (int r = 0; r < t->n_merges; r++) {
        int32_t m[2] = { t->merge_a[r], t->merge_b[r] };
        h = fnv1a(h, m, sizeof m);
    }
    return mix64(h);
}

static int is_stop_text(const skv_tokenizer *t, int id) {
    static const char *names[] = { "<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<end_of_turn>",
                                   "<|end|>", "<|eom_id|>" };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (t->tok_len[id] == strlen(names[i]) && !memcmp(t->tok[id], names[i], t->tok_len[id])) return 1;
    return 0;
}

int skv_tok_finish(skv_tokenizer *t, const char *src) {
    if (index_merges(t)) return -1;
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        t->byte_id[b] = skv_tok_lookup(t, &c, 1);
    }
    int n = 0;
    for (int id = 0; id < t->n_vocab; id++)
        if (t->tok[id] && t->tok_len[id] > 0 &&
            (t->tok_type[id] == SKV_TOKT_CONTROL || t->tok_type[id] == SKV_TOKT_USER)) n++;
    t->special = skv_malloc((size_t)(n ? n : 1) * sizeof(int), "tokenizer special tokens");
    if (!t->special) return -1;
    n = 0;
    for (int id = 0; id < t->n_vocab; id++)
        if (t->tok[id] && t->tok_len[id] > 0 &&
            (t->tok_type[id] == SKV_TOKT_CONTROL || t->tok_type[id] == SKV_TOKT_USER)) t->special[n++] = id;
    t->n_special = n;
    sort_specials(t, t->special, n);
    if (t->bos >= t->n_vocab || t->bos < -1) t->bos = -1;   /* e.g. a u32 id >= 2^31 read as int */
    if (t->eos >= t->n_vocab || t->eos < -1) return skv_error("%s: eos id %d out of range", src, t->eos);
    if (t->eos < 0)   /* no explicit eos: the usual end-of-text token */
        for (int id = 0; id < t->n_vocab; id++)
            if (t->tok[id] && t->tok_len[id] == 13 && !memcmp(t->tok[id], "<|endoftext|>", 13)) { t->eos = id; break; }
    t->hash = compute_hash(t);
    snprintf(t->name, sizeof t->name, "%s/%s (%d tokens)", t->model, t->pre_name, t->n_vocab);
    return 0;
}

void skv_tokenizer_free(skv_tokenizer *t) {
    if (!t) return;
    if (t->tok)
        for (int i = 0; i < t->n_vocab; i++) free(t->tok[i]);
    free(t->tok); free(t->tok_len); free(t->tok_type); free(t->vslot);
    free(t->merge_a); free(t->merge_b); free(t->merge_res); free(t->mkey); free(t->mrank);
    free(t->special); free(t->chat_template); free(t->score);
    free(t);
}

/* ---------------------------------------------------------------- GGUF loader */

skv_tokenizer *skv_tokenizer_from_gguf(const void *gguf) {
    const gguf_file *f = gguf;
    if (!f) { skv_error("tokenizer: no GGUF file"); return NULL; }
    const char *path = f->path ? f->path : "gguf";
    char *model = gguf_get_str(f, "tokenizer.ggml.model");
    if (!model) { skv_error_prefix("%s: no tokenizer", path); return NULL; }
    if (strcmp(model, "llama") == 0) {   /* SentencePiece (Gemma): tokenizer_spm.c */
        free(model);
        return skv_spm_from_gguf(f);
    }
    if (strcmp(model, "gpt2") != 0) {
        skv_error("%s: tokenizer model '%s' is not supported (byte-level BPE 'gpt2' and SentencePiece 'llama' are)", path, model);
        free(model);
        return NULL;
    }
    free(model);
    char *pre = gguf_get_str(f, "tokenizer.ggml.pre");
    int kind = skv_pretok_from_name(pre ? pre : "default");
    if (kind < 0) {
        skv_error("%s: pre-tokenizer '%s' is not supported (known: qwen2, smollm, gpt2)", path, pre);
        free(pre);
        return NULL;
    }
    const gguf_kv *toks = gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_STRING);
    const gguf_kv *merges = gguf_get_arr(f, "tokenizer.ggml.merges", GGUF_STRING);
    const gguf_kv *types = gguf_get_arr(f, "tokenizer.ggml.token_type", GGUF_INT32);
    if (!toks || !merges) {
        skv_error("%s: tokenizer.ggml.%s missing or not a string array", path, toks ? "merges" : "tokens");
        free(pre);
        return NULL;
    }
    if (toks->v.arr.n == 0 || toks->v.arr.n > (1u << 26)) {
        skv_error("%s: tokenizer.ggml.tokens has %llu entries", path, (unsigned long long)toks->v.arr.n);
        free(pre);
        return NULL;
    }
    if (types && types->v.arr.n != toks->v.arr.n) {
        skv_error("%s: tokenizer.ggml.token_type has %llu entries, tokens %llu", path,
                  (unsigned long long)types->v.arr.n, (unsigned long long)toks->v.arr.n);
        free(pre);
        return NULL;
    }
    skv_tokenizer *t = skv_tok_new((int)toks->v.arr.n);
    if (!t) { free(pre); return NULL; }
    t->pre = (skv_pretok_kind)kind;
    snprintf(t->pre_name, sizeof t->pre_name, "%s", pre ? pre : "gpt2");
    free(pre);
    const int32_t *ty = types ? (const int32_t *)types->v.arr.data : NULL;
    for (int id = 0; id < t->n_vocab; id++) {
        int32_t type = SKV_TOKT_NORMAL;
        if (ty) memcpy(&type, ty + id, sizeof type);   /* may be unaligned in the map */
        if (skv_tok_set_token(t, id, toks->v.arr.strs[id].ptr, toks->v.arr.strs[id].len, type)) goto fail;
    }
    if (skv_tok_index_vocab(t)) goto fail;
    for (uint64_t r = 0; r < merges->v.arr.n; r++) {
        const gguf_str *m = &merges->v.arr.strs[r];
        const char *sp = memchr(m->ptr, ' ', m->len);
        if (!sp) { skv_error("%s: merge %llu has no space", path, (unsigned long long)r); goto fail; }
        size_t la = (size_t)(sp - m->ptr);
        if (skv_tok_add_merge(t, m->ptr, la, sp + 1, m->len - la - 1)) {
            skv_error_prefix("%s", path);
            goto fail;
        }
    }
    uint32_t v;
    if (gguf_find(f, "tokenizer.ggml.bos_token_id") && gguf_get_u32(f, "tokenizer.ggml.bos_token_id", &v) == 0) t->bos = (int)v;
    if (gguf_find(f, "tokenizer.ggml.eos_token_id") && gguf_get_u32(f, "tokenizer.ggml.eos_token_id", &v) == 0) t->eos = (int)v;
    if (gguf_find(f, "tokenizer.ggml.eot_token_id") && gguf_get_u32(f, "tokenizer.ggml.eot_token_id", &v) == 0) t->eot = (int)v;
    bool ab = false;
    if (gguf_find(f, "tokenizer.ggml.add_bos_token") && gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &ab) == 0) t->add_bos = ab;
    if (gguf_find(f, "tokenizer.chat_template")) t->chat_template = gguf_get_str(f, "tokenizer.chat_template");
    if (t->eot >= t->n_vocab || t->eot < -1) t->eot = -1;
    if (skv_tok_finish(t, path)) goto fail;
    skv_clear_error();
    return t;
fail:
    skv_tokenizer_free(t);
    return NULL;
}

/* ---------------------------------------------------------------- encode */

typedef struct { int32_t rank; int32_t pos; int32_t lid, rid; int32_t right; } heap_ent;

typedef struct {
    const skv_tokenizer *t;
    int *ids; size_t n, cap;            /* output */
    int32_t *sym, *prev, *next;         /* per-word symbol list (one slot per byte) */
    heap_ent *heap; size_t hn;
    size_t wcap;
    int err;
} enc_state;

static int push_id(enc_state *s, int id) {
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 256;
        int *p = realloc(s->ids, cap * sizeof(int));
        if (!p) return skv_error("tokenizer: out of memory for %zu ids", cap);
        s->ids = p; s->cap = cap;
    }
    s->ids[s->n++] = id;
    return 0;
}

static int heap_less(const heap_ent *a, const heap_ent *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}
static void heap_push(enc_state *s, heap_ent e) {
    size_t i = s->hn++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!heap_less(&e, &s->heap[p])) break;
        s->heap[i] = s->heap[p]; i = p;
    }
    s->heap[i] = e;
}
static heap_ent heap_pop(enc_state *s) {
    heap_ent top = s->heap[0], last = s->heap[--s->hn];
    size_t i = 0, n = s->hn;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && heap_less(&s->heap[c + 1], &s->heap[c])) c++;
        if (!heap_less(&s->heap[c], &last)) break;
        s->heap[i] = s->heap[c]; i = c;
    }
    if (n) s->heap[i] = last;
    return top;
}

static void try_pair(enc_state *s, int32_t l) {
    int32_t r = s->next[l];
    if (r < 0) return;
    int rank = merge_rank(s->t, s->sym[l], s->sym[r]);
    if (rank < 0) return;
    heap_ent e = { rank, l, s->sym[l], s->sym[r], r };
    heap_push(s, e);
}

/* BPE of one pre-tokenized word (raw bytes). */
static int bpe_word(const char *w, size_t len, void *ctx) {
    enc_state *s = ctx;
    const skv_tokenizer *t = s->t;
    if (len == 1) {
        int id = t->byte_id[(unsigned char)w[0]];
        return id < 0 ? 0 : push_id(s, id);   /* a byte without a token is dropped (see below) */
    }
    if (len > s->wcap) {
        size_t cap = len < 64 ? 64 : len;
        free(s->sym); free(s->prev); free(s->next); free(s->heap);
        s->sym = malloc(cap * sizeof(int32_t)); s->prev = malloc(cap * sizeof(int32_t));
        s->next = malloc(cap * sizeof(int32_t)); s->heap = malloc(cap * 3 * sizeof(heap_ent));
        s->wcap = cap;
        if (!s->sym || !s->prev || !s->next || !s->heap) { s->wcap = 0; return skv_error("tokenizer: out of memory (word of %zu bytes)", len); }
    }
    if (len > INT32_MAX / 2) return skv_error("tokenizer: word too long");
    /* heap: len-1 initial pairs + at most 2 per merge (len-1 merges) < 3*len entries */
    /* Bytes the vocabulary has no token for are dropped, as HF BPE does without an
     * unk_token (SmolLM2 lacks 21 bytes, e.g. 0x04, 0xC0, 0xF5-0xFF); their neighbours
     * become adjacent. */
    size_t m = 0;
    for (size_t i = 0; i < len; i++) {
        int id = t->byte_id[(unsigned char)w[i]];
        if (id < 0) continue;
        s->sym[m] = id;
        s->prev[m] = (int32_t)m - 1;
        s->next[m] = (int32_t)m + 1;
        m++;
    }
    if (m == 0) return 0;
    s->next[m - 1] = -1;
    s->hn = 0;
    for (size_t i = 0; i + 1 < m; i++) try_pair(s, (int32_t)i);
    while (s->hn) {
        heap_ent e = heap_pop(s);
        int32_t l = e.pos, r = e.right;
        if (s->sym[l] != e.lid || s->next[l] != r || s->sym[r] != e.rid) continue;  /* stale */
        s->sym[l] = t->merge_res[e.rank];
        s->sym[r] = -1;
        s->next[l] = s->next[r];
        if (s->next[r] >= 0) s->prev[s->next[r]] = l;
        if (s->prev[l] >= 0) try_pair(s, s->prev[l]);
        try_pair(s, l);
    }
    for (int32_t i = 0; i >= 0; i = s->next[i])
        if (push_id(s, s->sym[i])) return -1;
    return 0;
}

/* Longest special token starting at text[i], -1 if none. */
static int special_at(const skv_tokenizer *t, const char *text, size_t len, size_t i, bool parse_special) {
    for (int k = 0; k < t->n_special; k++) {      /* longest first */
        int id = t->special[k];
        uint32_t L = t->tok_len[id];
        if (L > len - i || t->tok[id][0] != text[i] || memcmp(t->tok[id], text + i, L)) continue;
        if (!parse_special && t->tok_type[id] == SKV_TOKT_CONTROL) continue;
        return id;
    }
    return -1;
}

static int spm_push(void *ctx, int id) { return push_id(ctx, id); }

/* One fragment between special tokens: pre-tokenizer + BPE, or SentencePiece */
static int encode_fragment(enc_state *s, const char *text, size_t len, bool after_special) {
    if (s->t->spm) return skv_spm_encode(s->t, text, len, after_special, spm_push, s);
    return skv_pretokenize(s->t->pre, text, len, bpe_word, s);
}

int skv_tokenize(const skv_tokenizer *t, const char *text, size_t len, bool parse_special,
                 int *ids, int max) {
    if (!t || (!text && len)) return skv_error("tokenizer: NULL argument");
    enc_state s = { .t = t };
    int rc = 0;
    /* first bytes that can start a special token */
    bool first[256] = { false };
    for (int k = 0; k < t->n_special; k++) first[(unsigned char)t->tok[t->special[k]][0]] = true;
    size_t start = 0;
    for (size_t i = 0; i < len && rc == 0; i++) {
        if (!first[(unsigned char)text[i]]) continue;
        int id = special_at(t, text, len, i, parse_special);
        if (id < 0) continue;
        rc = encode_fragment(&s, text + start, i - start, true);
        if (rc == 0) rc = push_id(&s, id);
        start = i + t->tok_len[id];
        i = start - 1;
    }
    if (rc == 0) rc = encode_fragment(&s, text + start, len - start, true);
    if (rc == 0 && s.n > (size_t)INT32_MAX) rc = skv_error("tokenizer: too many tokens");
    int n = (int)s.n;
    size_t ncopy = (size_t)(n < max ? n : (max > 0 ? max : 0));
    if (rc == 0 && ids && ncopy) memcpy(ids, s.ids, ncopy * sizeof(int));
    free(s.ids); free(s.sym); free(s.prev); free(s.next); free(s.heap);
    return rc ? -1 : n;
}

/* ---------------------------------------------------------------- decode, queries */

const char *skv_token_bytes(const skv_tokenizer *t, int id, size_t *len) {
    if (!t || id < 0 || id >= t->n_vocab || !t->tok[id]) { if (len) *len = 0; return NULL; }
    if (len) *len = t->tok_len[id];
    return t->tok[id];
}

char *skv_detokenize(const skv_tokenizer *t, const int *ids, int n) {
    size_t total = 1;
    for (int i = 0; i < n; i++) {
        size_t l = 0;
        if (!skv_token_bytes(t, ids[i], &l)) { skv_error("tokenizer: bad token id %d", ids[i]); return NULL; }
        if (!skv_add_ok(total, l, &total)) { skv_error("tokenizer: decoded text too long"); return NULL; }
    }
    char *out = skv_malloc(total, "decoded text");
    if (!out) return NULL;
    size_t k = 0;
    for (int i = 0; i < n; i++) {
        size_t l;
        const char *b = skv_token_bytes(t, ids[i], &l);
        memcpy(out + k, b, l);
        k += l;
    }
    out[k] = 0;
    return out;
}

int skv_tok_vocab_size(const skv_tokenizer *t) { return t->n_vocab; }
int skv_tok_bos(const skv_tokenizer *t) { return t->bos; }
int skv_tok_eos(const skv_tokenizer *t) { return t->eos; }
bool skv_tok_add_bos(const skv_tokenizer *t) { return t->add_bos && t->bos >= 0; }
bool skv_tok_is_stop(const skv_tokenizer *t, int id) {
    if (id < 0 || id >= t->n_vocab || !t->tok[id]) return false;
    if (id == t->eos || id == t->eot) return true;
    return t->tok_type[id] == SKV_TOKT_CONTROL && is_stop_text(t, id);
}
uint64_t skv_tokenizer_hash(const skv_tokenizer *t) { return t->hash; }
const char *skv_tokenizer_name(const skv_tokenizer *t) { return t->name; }
