/* generate_cuda.c: `smallkv generate --device cuda`: greedy / sampled generation on the GPU.
 *   policy full         the full KV cache on the GPU (runtime/backend/forward_cuda.h), prefill and
 *                       decode; each --prompt is prefilled in a fresh sequence and answered
 *                       (cli_generate_cuda);
 *   compressed policies generate.c makes and prefills the session on the CPU through the
 *                       public API; cli_answer_cuda moves its decode to the GPU
 *                       (runtime/backend/session_cuda.h: selection on the host, hot tier and
 *                       attention on the device, the SmallKV SLM on the device too).
 * Tokenisation, BOS, chat template, stop tokens and sampling follow the CPU path
 * (runtime/api.c) so that both devices produce the same text where the logits agree.
 * Built without CUDA it reports "built without CUDA (make CUDA=1)". */
#include "cli.h"
#include "include/smallkv.h"
#include "runtime/backend/forward_cuda.h"
#include "runtime/backend/session_cuda.h"
#include "runtime/tokenizer/tokenizer.h"
#include "runtime/session/sampling.h"
#include "common/util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Prompt ids as smallkv_tokenize / smallkv_tokenize_chat (api.c): the chat template parses
 * special tokens and adds no BOS; plain text gets BOS when the tokenizer asks for it. */
static int prompt_ids(const skv_tokenizer *tok, const char *text, bool chat, const char *system, int **out) {
    char *t = chat ? skv_chat_prompt(tok, system, text) : skv_strdup(text);
    if (!t) return -1;
    const int bos = (!chat && skv_tok_add_bos(tok) && skv_tok_bos(tok) >= 0) ? 1 : 0;
    int n = skv_tokenize(tok, t, strlen(t), chat, NULL, 0);
    int *ids = n >= 0 ? skv_malloc(((size_t)n + 1) * sizeof(int), "prompt ids") : NULL;
    if (ids && skv_tokenize(tok, t, strlen(t), chat, ids + bos, n) != n) {
        skv_error("tokenizer: inconsistent counts");
        free(ids);
        ids = NULL;
    }
    free(t);
    if (!ids) return -1;
    if (bos) ids[0] = skv_tok_bos(tok);
    *out = ids;
    return n + bos;
}

/* Prefill n ids in blocks of s->T_max; logits of the last token land in s->logits. */
static int prefill(skv_cuda_state *s, const int *ids, int n) {
    for (int i = 0; i < n; i += s->T_max) {
        const int T = n - i < s->T_max ? n - i : s->T_max;
        skv_fwd_opts o = {.logits = i + T == n ? SKV_LOGITS_LAST : SKV_LOGITS_NONE};
        if (skv_cuda_forward(s, ids + i, T, &o) != 0) return -1;
    }
    return 0;
}

int cli_generate_cuda(const cli_gen_cuda *a) {
    if (!skv_cuda_built()) {
        fprintf(stderr, "smallkv: --device cuda: built without CUDA (make CUDA=1)\n");
        return CLI_ERR;
    }
    skv_model *m = cli_load(a->model);
    if (!m) return CLI_ERR;
    int rc = CLI_ERR, *ids[CLI_GEN_CUDA_MAX_PROMPTS] = {0}, np[CLI_GEN_CUDA_MAX_PROMPTS] = {0}, longest = 0;
    skv_cuda_model *dm = NULL;
    skv_cuda_state *s = NULL;
    unsigned long long rng = a->rng;
    if (!m->tok) { fprintf(stderr, "smallkv: %s: the model has no tokenizer\n", a->model); goto done; }
    for (int i = 0; i < a->n_prompts; i++) {
        if ((np[i] = prompt_ids(m->tok, a->prompts[i], a->chat, a->system, &ids[i])) < 0) { cli_fail("tokenize"); goto done; }
        if (np[i] == 0) { fprintf(stderr, "smallkv: prompt %d is empty (no tokens)\n", i + 1); goto done; }
        if (np[i] > longest) longest = np[i];
    }
    const long need = (long)longest + a->n_gen + 1;
    const int cap = a->ctx > 0 ? a->ctx : (int)(need < m->cfg.ctx_max ? need : m->cfg.ctx_max);
    if (longest + 1 > cap) {
        fprintf(stderr, "smallkv: the prompt has %d tokens, more than the %s of %d tokens\n", longest,
                a->ctx > 0 ? "--ctx limit" : "model's context", cap);
        goto done;
    }
    if (!(dm = skv_cuda_model_upload(m, 0)) || !(s = skv_cuda_state_new(dm, cap, cap < 512 ? cap : 512, a->kv_f16))) {
        cli_fail("--device cuda");
        goto done;
    }
    const int V = m->cfg.vocab;
    for (int i = 0; i < a->n_prompts; i++) {
        skv_cuda_state_reset(s);
        if (a->n_prompts > 1) { printf("> %s\n", a->prompts[i]); fflush(stdout); }
        double t0 = skv_now();
        if (prefill(s, ids[i], np[i]) != 0) { cli_fail("--device cuda"); goto done; }
        double t1 = skv_now();
        int steps = 0;
        for (int produced = 0; produced < a->n_gen; produced++) {
            int next = skv_sample_logits(s->logits, V, a->temp, &rng);
            if (skv_tok_is_stop(m->tok, next)) break;
            size_t len = 0;
            const char *b = skv_token_bytes(m->tok, next, &len);
            if (b) { fwrite(b, 1, len, stdout); fflush(stdout); }
            if (produced + 1 == a->n_gen) break;
            if (s->n_past >= s->S_cap) { fprintf(stderr, "smallkv: the context of %d tokens is full\n", s->S_cap); goto done; }
            skv_fwd_opts o = {.logits = SKV_LOGITS_LAST};
            if (skv_cuda_forward(s, &next, 1, &o) != 0) { cli_fail("--device cuda"); goto done; }
            steps++;
        }
        fputc('\n', stdout);
        fflush(stdout);
        if (a->stats) {
            double t2 = skv_now();
            fprintf(stderr, "[stats] device cuda, model on the device %.2f MiB\n",
                    (double)skv_cuda_model_bytes(dm) / 1048576.0);
            fprintf(stderr, "[stats] prefill %d tokens in %.3f s (%.1f tok/s)\n", np[i], t1 - t0,
                    t1 > t0 ? np[i] / (t1 - t0) : 0.0);
            fprintf(stderr, "[stats] decode %d steps in %.3f s (%.2f tok/s)\n", steps, t2 - t1,
                    t2 > t1 ? steps / (t2 - t1) : 0.0);
        }
    }
    rc = CLI_OK;
done:
    skv_cuda_state_free(s);
    skv_cuda_model_free(dm);
    for (int i = 0; i < a->n_prompts && i < CLI_GEN_CUDA_MAX_PROMPTS; i++) free(ids[i]);
    skv_model_free(m);
    return rc;
}

/* ------------------------------------------------------------------ compressed policies */

struct cli_gpu {
    const skv_model *llm, *slm;          /* the models the uploads are of */
    skv_cuda_model *dllm, *dslm;
};

void cli_gpu_free(cli_gpu *dev) {
    if (!dev) return;
    skv_cuda_model_free(dev->dslm);
    skv_cuda_model_free(dev->dllm);
    free(dev);
}

/* The uploads for session s (made on first use, kept in *dev). -1 + error. */
static int gpu_models(cli_gpu **dev, const skv_session *s) {
    if (!*dev && !(*dev = skv_calloc(1, sizeof **dev, "GPU models"))) return -1;
    cli_gpu *g = *dev;
    if (g->llm != s->m) {
        skv_cuda_model_free(g->dllm);
        g->dllm = NULL;
        g->llm = NULL;
        if (!(g->dllm = skv_cuda_model_upload(s->m, 0))) return -1;
        g->llm = s->m;
    }
    if (s->o.slm && skv_policy_has(s->pol, SKV_POLICY_NEEDS_SLM) && g->slm != s->o.slm) {
        skv_cuda_model_free(g->dslm);
        g->dslm = NULL;
        g->slm = NULL;
        if (!(g->dslm = skv_cuda_model_upload(s->o.slm, 0))) return -1;
        g->slm = s->o.slm;
    }
    return 0;
}

int cli_answer_cuda(smallkv_pair *p, smallkv_session *ps, float temp, unsigned long long *rng, int n_gen, bool stats,
                    cli_gpu **dev) {
    if (!skv_cuda_built()) return skv_error("--device cuda: built without CUDA (make CUDA=1)");
    skv_session *s = smallkv_session_runtime(ps);
    if (!s || skv_session_cuda_check(s)) return -1;
    if (gpu_models(dev, s)) return -1;
    skv_session_cuda *g = skv_session_cuda_new(s, (*dev)->dllm, skv_policy_has(s->pol, SKV_POLICY_NEEDS_SLM) ? (*dev)->dslm : NULL);
    if (!g) return -1;
    int rc = -1, steps = 0;
    const double t0 = skv_now();
    for (int produced = 0; produced < n_gen; produced++) {
        int next = smallkv_sample(ps, temp, rng);
        if (next < 0) goto done;
        if (smallkv_is_stop(p, next)) break;
        size_t len;
        const char *b = smallkv_token_bytes(p, next, &len);
        if (b) { fwrite(b, 1, len, stdout); fflush(stdout); }
        if (produced + 1 == n_gen) break;
        if (skv_session_cuda_step(g, next)) goto done;
        steps++;
    }
    fputc('\n', stdout);
    fflush(stdout);
    if (stats) {
        const double t = skv_now() - t0;
        skv_session_mem r;
        skv_session_mem_report(s, &r);
        fprintf(stderr, "[stats] device cuda (policy %s): decode %d steps in %.3f s (%.2f tok/s); hot tier %.1f tokens "
                "(%zu bytes, on the GPU and mirrored on the host), cold %zu bytes (host), restores %d\n",
                s->pol->name, steps, t, t > 0 ? steps / t : 0.0, r.hot_tokens, r.hot_used, r.cold_used, s->restores);
    }
    rc = 0;
done:
    skv_session_cuda_free(g);
    return rc;
}
