/* fuzz_hf_config.c: libFuzzer target for the Hugging Face model directory loader
 * (runtime/model/model_hf.c): config.json parsing, then binding the weights it names.
 *
 * At start a tiny valid Llama model (tests/support/tiny_model.c: 2 layers, dim 64, vocab
 * 300) is written as model.safetensors into a scratch directory. Input: the bytes of
 * config.json, optionally followed by the line "\n#INDEX#\n" and the bytes of
 * model.safetensors.index.json (then the shard names it lists are looked up in the same
 * directory, where only model.safetensors exists). Configs that match the tiny model load
 * completely; all others must be refused with a message. */
#include "fuzz_common.h"
#include "runtime/model/model.h"
#include "tests/support/tiny_model.h"

static const char SEP[] = "\n#INDEX#\n";
static char g_dir[256];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    snprintf(g_dir, sizeof g_dir, "%s/hf", fuzz_dir());
    mkdir(g_dir, 0700);
    tiny_model *m = tiny_model_new(SKV_ARCH_LLAMA, 7, 0, SKV_F32);
    if (!m || tiny_model_write_hf(m, g_dir, SKV_F16, 1) != 0) {
        fprintf(stderr, "fuzz_hf_config: cannot write the tiny model: %s\n", skv_last_error());
        exit(1);
    }
    tiny_model_free(m);
    return 0;
}

static void put(const char *name, const void *data, size_t n) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", g_dir, name);
    FILE *f = fopen(p, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f) != 0) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    size_t clen = size;
    const uint8_t *idx = NULL;
    size_t ilen = 0;
    for (size_t i = 0; i + sizeof SEP - 1 <= size; i++)
        if (!memcmp(data + i, SEP, sizeof SEP - 1)) {
            clen = i;
            idx = data + i + sizeof SEP - 1;
            ilen = size - i - (sizeof SEP - 1);
            break;
        }
    put("config.json", data, clen);
    char ip[512];
    snprintf(ip, sizeof ip, "%s/model.safetensors.index.json", g_dir);
    if (idx) put("model.safetensors.index.json", idx, ilen);
    else unlink(ip);
    skv_clear_error();
    skv_model *m = skv_model_load_hf(g_dir);
    if (!m) {
        fuzz_expect_error("skv_model_load_hf");
        return 0;
    }
    const skv_config *c = &m->cfg;
    if (c->dim <= 0 || c->n_layer <= 0 || c->n_head <= 0 || c->n_kv_head <= 0 || c->head_dim <= 0) abort();
    skv_model_free(m);
    return 0;
}
