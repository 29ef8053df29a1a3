/* tokenizer_spm.c: the SentencePiece tokenizer of GGUF files whose tokenizer.ggml.model is
 * 'llama' (Gemma 3): loading (pieces, scores, token types) and encoding one text fragment
 * the way llama.cpp's llm_tokenizer_spm does:
 *   spaces become U+2581 (a space first when tokenizer.ggml.add_space_prefix asks);
 *   the text is cut into UTF-8 characters; the adjacent pair whose concatenation is a piece
 *   with the highest score (leftmost on ties) merges, again and again;
 *   each final symbol is its piece, or (byte fallback) one <0xNN> piece per byte.
 * Pieces are stored as text (U+2581 as a space, <0xNN> as its byte), so decoding is the
 * shared skv_detokenize. Specials are split off by skv_tokenize before this runs. */
#include "tokenizer_internal.h"
#include "runtime/format/gguf.h"
#include "common/util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char k_space[3] = {(char)0xE2, (char)0x96, (char)0x81};   /* U+2581 */

/* piece text -> stored text: U+2581 -> ' ', <0xNN> (byte pieces) -> the byte */
static int set_piece(skv_tokenizer *t, int id, const char *p, size_t len, int type) {
    if (type == SKV_TOKT_BYTE) {
        unsigned v;
        char hex[8] = {0};
        if (len != 6 || memcmp(p, "<0x", 3) || p[5] != '>') return skv_error("tokenizer: byte piece %d is not <0xNN>", id);
        memcpy(hex, p + 3, 2);
        if (sscanf(hex, "%2x", &v) != 1) return skv_error("tokenizer: byte piece %d is not <0xNN>", id);
        char b = (char)v;
        return skv_tok_set_raw(t, id, &b, 1, type);
    }
    char *buf = skv_malloc(len + 1, "tokenizer piece");
    if (!buf) return -1;
    size_t k = 0;
    for (size_t i = 0; i < len;) {
        if (i + 3 <= len && !memcmp(p + i, k_space, 3)) { buf[k++] = ' '; i += 3; }
        else buf[k++] = p[i++];
    }
    int rc = skv_tok_set_raw(t, id, buf, k, type);
    free(buf);
    return rc;
}

skv_tokenizer *skv_spm_from_gguf(const void *gguf) {
    const gguf_file *f = gguf;
    const char *path = f->path ? f->path : "gguf";
    const gguf_kv *toks = gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_STRING);
    const gguf_kv *scores = gguf_get_arr(f, "tokenizer.ggml.scores", GGUF_FLOAT32);
    const gguf_kv *types = gguf_get_arr(f, "tokenizer.ggml.token_type", GGUF_INT32);
    if (!toks || !scores || !types) {
        skv_error("%s: SentencePiece tokenizer without tokenizer.ggml.%s", path, !toks ? "tokens" : !scores ? "scores" : "token_type");
        return NULL;
    }
    if (toks->v.arr.n == 0 || toks->v.arr.n > (1u << 26) || scores->v.arr.n != toks->v.arr.n || types->v.arr.n != toks->v.arr.n) {
        skv_error("%s: tokenizer.ggml.tokens / scores / token_type sizes disagree", path);
        return NULL;
    }
    skv_tokenizer *t = skv_tok_new((int)toks->v.arr.n);
    if (!t) return NULL;
    t->spm = true;
    snprintf(t->model, sizeof t->model, "llama");
    snprintf(t->pre_name, sizeof t->pre_name, "spm");
    t->score = skv_malloc((size_t)t->n_vocab * sizeof(float), "tokenizer scores");
    if (!t->score) goto fail;
    for (int id = 0; id < t->n_vocab; id++) {
        int32_t type;
        memcpy(&type, (const int32_t *)types->v.arr.data + id, sizeof type);   /* may be unaligned */
        memcpy(&t->score[id], (const float *)scores->v.arr.data + id, sizeof(float));
        if (set_piece(t, id, toks->v.arr.strs[id].ptr, toks->v.arr.strs[id].len, type)) { skv_error_prefix("%s", path); goto fail; }
    }
    if (skv_tok_index_vocab(t)) goto fail;
    uint32_t v;
    if (gguf_find(f, "tokenizer.ggml.bos_token_id") && gguf_get_u32(f, "tokenizer.ggml.bos_token_id", &v) == 0) t->bos = (int)v;
    if (gguf_find(f, "tokenizer.ggml.eos_token_id") && gguf_get_u32(f, "tokenizer.ggml.eos_token_id", &v) == 0) t->eos = (int)v;
    if (gguf_find(f, "tokenizer.ggml.eot_token_id") && gguf_get_u32(f, "tokenizer.ggml.eot_token_id", &v) == 0) t->eot = (int)v;
    bool b = true;   /* llama.cpp's default for SentencePiece */
    if (gguf_find(f, "tokenizer.ggml.add_bos_token") && gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &b) == 0) {}
    t->add_bos = b;
    b = true;
    if (gguf_find(f, "tokenizer.ggml.add_space_prefix") && gguf_get_bool(f, "tokenizer.ggml.add_space_prefix", &b) == 0) {}
    t->spm_space_prefix = b;
    if (gguf_find(f, "tokenizer.chat_template")) t->chat_template = gguf_get_str(f, "tokenizer.chat_template");
    if (t->eot >= t->n_vocab || t->eot < -1) t->eot = -1;
    if (skv_tok_finish(t, path)) goto fail;
    for (int c = 0; c < 256; c++) t->byte_id[c] = -1;   /* byte fallback: the byte pieces only */
    for (int id = 0; id < t->n_vocab; id++)
        if (t->tok_type[id] == SKV_TOKT_BYTE) t->byte_id[(unsigned char)t->tok[id][0]] = id;
    skv_clear_error();
    return t;
fail:
    skv_tokenizer_free(t);
    return NULL;
}

/* ---- encoding ---- */

typedef struct { int left, right; float score; size_t size; } bigram;
typedef struct { size_t off, n; int prev, next; } symbol;

typedef struct {
    const skv_tokenizer *t;
    const char *text;
    symbol *sym;
    bigram *heap;
    size_t hn, hcap;
} spm_state;

/* a before b in the queue: higher score, then the leftmost */
static int before(const bigram *a, const bigram *b) {
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static int heap_push(spm_state *s, bigram e) {
    if (s->hn == s->hcap) {
        size_t cap = s->hcap ? 2 * s->hcap : 64;
        bigram *p = realloc(s->heap, cap * sizeof *p);
        if (!p) return skv_error("tokenizer: out of memory");
        s->heap = p;
        s->hcap = cap;
    }
    size_t i = s->hn++;
    while (i > 0 && before(&e, &s->heap[(i - 1) / 2])) { s->heap[i] = s->heap[(i - 1) / 2]; i = (i - 1) / 2; }
    s->heap[i] = e;
    return 0;
}

static bigram heap_pop(spm_state *s) {
    bigram top = s->heap[0], last = s->heap[--s->hn];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= s->hn) break;
        if (c + 1 < s->hn && before(&s->heap[c + 1], &s->heap[c])) c++;
        if (!before(&s->heap[c], &last)) break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (s->hn) s->heap[i] = last;
    return top;
}

static int try_bigram(spm_state *s, int l, int r) {
    if (l < 0 || r < 0) return 0;
    const size_t n = s->sym[l].n + s->sym[r].n;
    const int id = skv_tok_lookup(s->t, s->text + s->sym[l].off, n);   /* symbols are contiguous */
    if (id < 0 || s->t->tok_type[id] == SKV_TOKT_BYTE) return 0;
    return heap_push(s, (bigram){l, r, s->t->score[id], n});
}

int skv_spm_encode(const skv_tokenizer *t, const char *text, size_t len, bool after_special,
                   int (*push)(void *ctx, int id), void *ctx) {
    if (len == 0) return 0;
    /* the stored pieces spell U+2581 as a space, so the text keeps its spaces */
    const size_t pre = t->spm_space_prefix && after_special ? 1 : 0;
    char *buf = skv_malloc(len + pre + 1, "tokenizer text");
    symbol *sym = skv_malloc((len + pre) * sizeof *sym, "tokenizer symbols");
    spm_state s = {.t = t, .text = buf, .sym = sym};
    int rc = -1;
    if (!buf || !sym) goto out;
    if (pre) buf[0] = ' ';
    memcpy(buf + pre, text, len);
    const size_t L = len + pre;
    int n = 0;
    for (size_t off = 0; off < L;) {
        const unsigned char c = (unsigned char)buf[off];
        size_t cl = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
        if (cl > L - off) cl = L - off;
        sym[n] = (symbol){off, cl, n - 1, off + cl == L ? -1 : n + 1};
        off += cl;
        n++;
    }
    for (int i = 1; i < n; i++)
        if (try_bigram(&s, i - 1, i)) goto out;
    while (s.hn) {
        bigram b = heap_pop(&s);
        symbol *l = &sym[b.left], *r = &sym[b.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size) continue;   /* stale */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) sym[r->next].prev = b.left;
        if (try_bigram(&s, l->prev, b.left) || try_bigram(&s, b.left, l->next)) goto out;
    }
    for (int i = 0; i != -1; i = sym[i].next) {
        int id = skv_tok_lookup(t, buf + sym[i].off, sym[i].n);
        if (id >= 0 && t->tok_type[id] != SKV_TOKT_BYTE) {
            if (push(ctx, id)) goto out;
            continue;
        }
        for (size_t k = 0; k < sym[i].n; k++) {   /* byte fallback (a byte without a piece is dropped) */
            const int bid = t->byte_id[(unsigned char)buf[sym[i].off + k]];
            if (bid >= 0 && push(ctx, bid)) goto out;
        }
    }
    rc = 0;
out:
    free(buf);
    free(sym);
    free(s.heap);
    return rc;
}
