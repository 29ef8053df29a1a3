/* fingerprint.c: model fingerprints (shapes, tokenizer hash, sampled or full weight hash)
 * and corpus hashing for calibration metadata. */
#include "fingerprint.h"
#include "common/sha256.h"
#include "runtime/tokenizer/tokenizer.h"
#include "common/util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* bytes [off, off + n) of w as stored in the file (w may be in 8-row groups), through a
 * row buffer; false when out of memory */
static bool hash_stored(skv_sha256_ctx *c, const skv_weight *w, size_t off, size_t n) {
    if (!w->x8) { skv_sha256_update(c, (const uint8_t *)w->data + off, n); return true; }
    const size_t rb = skv_row_bytes(w->type, w->cols);
    uint8_t *row = skv_malloc(rb, "fingerprint row");
    if (!row) return false;
    while (n > 0) {
        const size_t r = off / rb, in = off % rb, take = rb - in < n ? rb - in : n;
        skv_weight_stored_rows(w, (int64_t)r, 1, row);
        skv_sha256_update(c, row + in, take);
        off += take;
        n -= take;
    }
    free(row);
    return true;
}

static bool hash_weight(skv_sha256_ctx *c, const skv_weight *w, bool full) {
    uint8_t meta[24];
    int64_t v[3] = {w->data ? w->type : -1, w->rows, w->cols};
    for (int k = 0; k < 3; k++)
        for (int b = 0; b < 8; b++) meta[8 * k + b] = (uint8_t)((uint64_t)v[k] >> (8 * b));
    skv_sha256_update(c, meta, sizeof meta);
    if (!w->data || w->rows <= 0) return true;
    size_t n = (size_t)w->rows * skv_row_bytes(w->type, w->cols);
    if (full || n <= 17 * 256) return hash_stored(c, w, 0, n);
    bool ok = true;
    for (int s = 0; s < 16; s++) ok = ok && hash_stored(c, w, (n - 256) / 16 * (size_t)s, 256);
    return ok && hash_stored(c, w, n - 256, 256);
}

int skv_fp_from_model(const skv_model *m, bool full, skv_model_fp *fp) {
    memset(fp, 0, sizeof *fp);
    const skv_config *cf = &m->cfg;
    snprintf(fp->arch, sizeof fp->arch, "%s", skv_arch_name(cf->arch));
    snprintf(fp->name, sizeof fp->name, "%s", m->name ? m->name : (m->path ? m->path : ""));
    fp->n_layer = cf->n_layer; fp->n_head = cf->n_head; fp->n_kv_head = cf->n_kv_head;
    fp->head_dim = cf->head_dim; fp->dim = cf->dim; fp->vocab = cf->vocab;
    if (!m->tok) return skv_error("%s: model has no tokenizer to fingerprint", m->path ? m->path : "model");
    snprintf(fp->tokenizer_hash, sizeof fp->tokenizer_hash, "%016llx", (unsigned long long)skv_tokenizer_hash(m->tok));
    return skv_fp_weight_hash(m, full, fp->weight_hash);
}

int skv_fp_weight_hash(const skv_model *m, bool full, char hex[65]) {
    const skv_config *cf = &m->cfg;
    skv_sha256_ctx c;
    skv_sha256_init(&c);
    bool ok = hash_weight(&c, &m->tok_embd, full) && hash_weight(&c, &m->out_norm, full) &&
              (cf->tied_embeddings || hash_weight(&c, &m->output, full));
    for (int l = 0; ok && l < cf->n_layer; l++) {
        const skv_layer *L = &m->layers[l];
        const skv_weight *ws[] = {&L->attn_norm, &L->wq, &L->wk, &L->wv, &L->wo, &L->bq, &L->bk, &L->bv,
                                  &L->ffn_norm, &L->w_gate, &L->w_up, &L->w_down};
        for (size_t k = 0; ok && k < sizeof ws / sizeof ws[0]; k++) ok = hash_weight(&c, ws[k], full);
        /* the newer families' norms, only where present (plain models keep their hashes) */
        if (ok && L->q_norm.data) ok = hash_weight(&c, &L->q_norm, full) && hash_weight(&c, &L->k_norm, full);
        if (ok && L->post_attn_norm.data)
            ok = hash_weight(&c, &L->post_attn_norm, full) && hash_weight(&c, &L->post_ffn_norm, full);
    }
    if (!ok) return skv_error_prefix("%s: weight fingerprint", m->path ? m->path : "model");
    uint8_t d[32];
    skv_sha256_final(&c, d);
    skv_sha256_hex(d, hex);
    return 0;
}

int skv_corpus_info_from_file(const char *path, const char *name, skv_corpus_info *ci) {
    memset(ci, 0, sizeof *ci);
    if (!name) { /* the file name alone: a path says where one machine keeps it */
        const char *slash = strrchr(path, '/');
        name = slash ? slash + 1 : path;
    }
    if (!skv_corpus_name_ok(name))
        return skv_error("%s: corpus name '%s' must be 1-%d characters of letters, digits, '.', '_', '+' or '-'",
                         path, name, SKV_CORPUS_NAME_MAX);
    struct stat st;
    if (stat(path, &st) != 0) return skv_error("%s: cannot stat corpus", path);
    snprintf(ci->name, sizeof ci->name, "%s", name);
    ci->bytes = (int64_t)st.st_size;
    return skv_sha256_file(path, ci->sha256);
}
