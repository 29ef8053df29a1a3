/* tools.c: the public API's whole-file tools (include/smallkv.h): a model's description
 * (`smallkv info`), a profile's (`smallkv profile show`), and the perplexity of a text
 * file on a backend (`smallkv ppl`); the process-wide prefill attention mode. */
#include "api.h"
#include "kernels/cpu/cpu_caps.h"
#include "kernels/cpu/attention_bf16.h"
#include "runtime/tokenizer/tokenizer.h"
#include "common/util.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int smallkv_set_prefill_attention(const char *mode) {
    const int m = skv_attention_prefill_mode_parse(mode);
    if (m < 0) return skv_error("prefill attention '%s': expected exact or bf16", mode ? mode : "(null)");
    skv_attention_set_prefill_mode(m);
    return 0;
}

const char *smallkv_prefill_attention(void) {
    return skv_attention_prefill_mode() == SKV_PREFILL_ATTN_BF16 && skv_cpu_amx_bf16() ? "bf16" : "exact";
}

typedef struct { int count; size_t bytes; } type_stat;

static void tally(type_stat *st, const skv_weight *w) {
    if (!w->data || w->type < 0 || w->type >= SKV_TYPE_COUNT) return;
    st[w->type].count++;
    st[w->type].bytes += skv_row_bytes(w->type, w->cols) * (size_t)w->rows;
}

static void human(size_t b, char *buf, size_t n) {
    if (b >= (1u << 30)) snprintf(buf, n, "%.2f GiB", b / 1073741824.0);
    else if (b >= (1u << 20)) snprintf(buf, n, "%.2f MiB", b / 1048576.0);
    else snprintf(buf, n, "%.1f KiB", b / 1024.0);
}

int smallkv_print_model_info(const char *path, FILE *out) {
    if (!path || !out) return skv_error("smallkv_print_model_info: bad arguments");
    skv_model *m = skv_model_load_ex(path, SKV_LOAD_NO_PACK | SKV_LOAD_MAPPED);   /* shapes only; the decode layouts are computed, not made */
    if (!m) return -1;
    const skv_config *c = &m->cfg;
    type_stat st[SKV_TYPE_COUNT];
    memset(st, 0, sizeof st);
    tally(st, &m->tok_embd);
    tally(st, &m->out_norm);
    if (!c->tied_embeddings) tally(st, &m->output);
    for (int l = 0; l < c->n_layer; l++) {
        const skv_layer *L = &m->layers[l];
        const skv_weight *ws[] = {&L->attn_norm, &L->wq, &L->wk, &L->wv, &L->wo, &L->bq, &L->bk, &L->bv,
                                  &L->ffn_norm, &L->w_gate, &L->w_up, &L->w_down};
        for (size_t i = 0; i < sizeof ws / sizeof *ws; i++) tally(st, ws[i]);
    }
    char b1[32], b2[32];
    fprintf(out, "model           %s\n", path);
    fprintf(out, "name            %s\n", m->name ? m->name : "?");
    fprintf(out, "architecture    %s\n", skv_arch_name(c->arch));
    fprintf(out, "layers          %d\n", c->n_layer);
    fprintf(out, "dim             %d\n", c->dim);
    fprintf(out, "heads           %d (kv heads %d, group %d)\n", c->n_head, c->n_kv_head, c->n_head / c->n_kv_head);
    fprintf(out, "head dim        %d\n", c->head_dim);
    fprintf(out, "ffn dim         %d\n", c->ffn_dim);
    fprintf(out, "vocab           %d\n", c->vocab);
    fprintf(out, "context         %d\n", c->ctx_max);
    fprintf(out, "rope            theta %g, mode %s\n", c->rope_theta,
           c->rope_mode == SKV_ROPE_ADJACENT ? "adjacent (GGUF llama)" : "halves (HF layout)");
    fprintf(out, "norm eps        %g\n", c->norm_eps);
    fprintf(out, "tied embeddings %s\n", c->tied_embeddings ? "yes" : "no");
    fprintf(out, "qkv biases      %s\n", c->has_qkv_bias ? "yes" : "no");
    if (c->rope_scale)
        fprintf(out, "rope scaling    %s, factor %g\n", c->rope_scale == SKV_ROPE_SCALE_LLAMA3 ? "llama3" : "linear",
                (double)c->rope_factor);
    if (c->sliding_window)
        fprintf(out, "sliding window  %d tokens on %d of %d layers (local RoPE theta %g)\n", c->sliding_window,
                c->n_window_layers, c->n_layer, (double)(c->rope_theta_local > 0 ? c->rope_theta_local : c->rope_theta));
    if (c->has_qk_norm || c->has_post_norms || c->act || c->final_softcap > 0)
        fprintf(out, "block           %s%s%s%s\n", c->has_qk_norm ? "q/k norms; " : "",
                c->has_post_norms ? "post-attention/FFN norms; " : "", c->act ? "GeGLU (gelu tanh); " : "",
                c->final_softcap > 0 ? "final logit softcap" : "");
    fprintf(out, "weights:\n");
    size_t total = 0;
    for (int t = 0; t < SKV_TYPE_COUNT; t++) {
        if (!st[t].count) continue;
        human(st[t].bytes, b1, sizeof b1);
        fprintf(out, "  %-6s %4d tensors %14zu bytes (%s)\n", skv_type_name(t), st[t].count, st[t].bytes, b1);
        total += st[t].bytes;
    }
    human(total, b1, sizeof b1);
    fprintf(out, "total weights   %zu bytes (%s)\n", total, b1);
    size_t x8b, pk;
    skv_model_layout_plan(m, &x8b, &pk);
    human(x8b, b1, sizeof b1);
    fprintf(out, "8-row groups    %zu bytes (%s)%s\n", x8b, b1,
           x8b ? " of matrices regrouped in place at load for the decode kernels (no extra memory)" : "");
    human(pk, b1, sizeof b1);
    fprintf(out, "decode copies   %zu bytes (%s)%s\n", pk, b1,
           pk ? " made at load: the other Q4/Q5 matrices regrouped in block pairs" : "");
    fprintf(out, "                (SKV_PACK=0: neither; SKV_MMAP=1: no groups, copies of every Q4/Q5 matrix)\n");
    fprintf(out, "group kernels   %s\n", skv_cpu_vnni() ? "AVX-512 VNNI (this CPU; SKV_CPU=avx2 for AVX2, same bits)" : "AVX2");
    size_t k16 = skv_model_kv_bytes_per_token(m, 2), k32 = skv_model_kv_bytes_per_token(m, 4);
    human(k16, b1, sizeof b1);
    human(k32, b2, sizeof b2);
    fprintf(out, "KV per token    %zu bytes fp16 (%s), %zu bytes fp32 (%s)\n", k16, b1, k32, b2);
    fprintf(out, "tokenizer       %s\n", m->tok ? skv_tokenizer_name(m->tok) : "(none)");
    skv_model_free(m);
    return 0;
}

int smallkv_print_profile(const char *path, FILE *out) { return skv_profile_print(path, out); }

/* -log softmax(row)[target], in double. */
static double nll_row(const float *row, int V, int target) {
    float mx = row[0];
    for (int i = 1; i < V; i++) if (row[i] > mx) mx = row[i];
    double sum = 0;
    for (int i = 0; i < V; i++) sum += exp((double)row[i] - mx);
    return log(sum) - ((double)row[target] - mx);
}

/* Tokenise the text, or only a prefix of it long enough for max_tokens (with margin, so
 * the cut cannot change the tokens kept). Returns the count; *out is heap. -1 on error. */
static int tokenize_file(const skv_tokenizer *tok, const char *text, size_t len, long max_tokens, int **out) {
    size_t use = len;
    if (max_tokens > 0 && (size_t)max_tokens * 16 + 65536 < len) use = (size_t)max_tokens * 16 + 65536;
    for (;;) {
        int n = skv_tokenize(tok, text, use, false, NULL, 0);
        if (n < 0) return -1;
        if (use < len && n < max_tokens + 256) { use = use * 2 < len ? use * 2 : len; continue; }
        int *ids = skv_malloc(((size_t)n + 1) * sizeof(int), "token ids");
        if (!ids) return -1;
        if (skv_tokenize(tok, text, use, false, ids, n) != n) { free(ids); return skv_error("tokenizer: inconsistent counts"); }
        *out = ids;
        return n;
    }
}

void smallkv_ppl_options_default(smallkv_ppl_options *o) {
    memset(o, 0, sizeof *o);
    o->ctx = 512;
    o->device = "cpu";
}

int smallkv_perplexity(const char *model, const char *file, const smallkv_ppl_options *uo, smallkv_ppl_result *r) {
    smallkv_ppl_options o;
    if (uo) o = *uo; else smallkv_ppl_options_default(&o);
    if (!model || !file || !r || o.ctx < 2) return skv_error("smallkv_perplexity: bad arguments");
    memset(r, 0, sizeof *r);
    const skv_backend *be = skv_backend_get(o.device ? o.device : "cpu");
    if (!be) return -1;
    if (!be->available()) return skv_error_prefix("device %s", be->name);
    size_t len;
    char *text = skv_read_file(file, &len);
    if (!text) return -1;
    int rc = -1, *ids = NULL;
    void *w = NULL, *seq = NULL;
    skv_model *m = skv_model_load(model);
    if (!m) goto done;
    if (!m->tok) { skv_error("%s: the model has no tokenizer", model); goto done; }
    int n = tokenize_file(m->tok, text, len, o.max_tokens, &ids);
    if (n < 0) { skv_error_prefix("%s", file); goto done; }
    if (o.max_tokens > 0 && n > o.max_tokens) n = o.max_tokens;
    if (n < 2) { skv_error("%s: only %d tokens, nothing to score", file, n); goto done; }
    int W = n / o.ctx, win = o.ctx;
    if (W == 0) { W = 1; win = n; }
    if (!(w = be->upload(m)) || !(seq = be->seq_new(w, win, win, !o.kv_f32))) goto done;
    const int V = m->cfg.vocab;
    double nll = 0, t0 = skv_now();
    long scored = 0;
    for (int i = 0; i < W; i++) {
        const int *x = ids + (size_t)i * win;
        skv_fwd_opts fo = {.logits = SKV_LOGITS_ALL};
        be->seq_reset(seq);
        if (be->seq_forward(seq, x, win, &fo)) goto done;
        const float *logits = be->seq_logits(seq);
        double wn = 0;
        #pragma omp parallel for reduction(+ : wn) schedule(static)
        for (int t = 0; t < win - 1; t++) wn += nll_row(logits + (size_t)t * V, V, x[t + 1]);
        nll += wn;
        scored += win - 1;
        if (o.progress) o.progress(i + 1, W, (double)(i + 1) * win / (skv_now() - t0), exp(nll / scored), o.user);
    }
    r->ppl = exp(nll / scored);
    r->windows = W;
    r->window = win;
    r->scored = scored;
    r->seconds = skv_now() - t0;
    rc = 0;
done:
    if (seq) be->seq_free(seq);
    if (w) be->release(w);
    free(ids);
    free(text);
    skv_model_free(m);
    return rc;
}
