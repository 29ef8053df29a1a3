/* fuzz_gguf.c: libFuzzer target for the GGUF reader (runtime/format/gguf.c) and everything that
 * reads GGUF metadata: the typed getters, the tokenizer loader (tokenizer.ggml.*) and the
 * model loader (runtime/model/model.c: hyper-parameters and tensor binding).
 *
 * Input: a whole GGUF file. It is parsed from memory (gguf_open_memory, an exact-size heap
 * copy so ASan sees reads past the end); files that parse are also written to a scratch
 * file and loaded with skv_model_load_gguf. */
#include "fuzz_common.h"
#include "runtime/format/gguf.h"
#include "runtime/model/model.h"
#include "runtime/tokenizer/tokenizer.h"

static void exercise_getters(const gguf_file *f) {
    unsigned sink = 0;
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const gguf_kv *kv = &f->kv[i];
        const char *k = kv->key;
        uint32_t u32; uint64_t u64; int64_t i64; float f32; bool b;
        sink += (unsigned)gguf_get_u32(f, k, &u32) + (unsigned)gguf_get_u64(f, k, &u64) +
                (unsigned)gguf_get_i64(f, k, &i64) + (unsigned)gguf_get_f32(f, k, &f32) +
                (unsigned)gguf_get_bool(f, k, &b);
        char *s = gguf_get_str(f, k);
        if (s) sink += (unsigned)strlen(s);
        free(s);
        if (gguf_find(f, k) != kv) abort();            /* keys are unique: find returns this one */
        if (kv->type == GGUF_ARRAY) {
            const gguf_kv *a = gguf_get_arr(f, k, kv->v.arr.type);
            if (a != kv) abort();
            if (kv->v.arr.type == GGUF_STRING)
                for (uint64_t j = 0; j < kv->v.arr.n; j++)
                    sink += fuzz_touch(kv->v.arr.strs[j].ptr, (size_t)kv->v.arr.strs[j].len);
            else if (kv->v.arr.n) {
                size_t es = kv->v.arr.type == GGUF_UINT64 || kv->v.arr.type == GGUF_INT64 ||
                            kv->v.arr.type == GGUF_FLOAT64 ? 8 :
                            kv->v.arr.type == GGUF_UINT32 || kv->v.arr.type == GGUF_INT32 ||
                            kv->v.arr.type == GGUF_FLOAT32 ? 4 :
                            kv->v.arr.type == GGUF_UINT16 || kv->v.arr.type == GGUF_INT16 ? 2 : 1;
                sink += fuzz_touch(kv->v.arr.data, (size_t)kv->v.arr.n * es);
            }
        } else if (kv->type == GGUF_STRING) {
            sink += fuzz_touch(kv->v.str.ptr, (size_t)kv->v.str.len);
        }
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        if (gguf_find_tensor(f, t->name) != t) abort();
        if ((const uint8_t *)t->data < (const uint8_t *)f->map ||
            (const uint8_t *)t->data + t->nbytes > (const uint8_t *)f->map + f->size) abort();
        sink += fuzz_touch(t->data, t->nbytes);
    }
    (void)sink;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    skv_clear_error();
    gguf_file *f = gguf_open_memory(data, size, "fuzz.gguf");
    if (!f) {
        fuzz_expect_error("gguf_open_memory");
        return 0;
    }
    exercise_getters(f);
    skv_clear_error();
    skv_tokenizer *t = skv_tokenizer_from_gguf(f);
    if (t) {
        int nv = skv_tok_vocab_size(t);   /* the special ids handed to callers are usable */
        if (nv <= 0 || skv_tok_bos(t) < -1 || skv_tok_bos(t) >= nv || skv_tok_eos(t) < -1 || skv_tok_eos(t) >= nv)
            abort();
        int ids[64];
        static const char txt[] = "Hello <|im_start|>user 123\n";
        int n = skv_tokenize(t, txt, sizeof txt - 1, true, ids, 64);
        if (n > 0) free(skv_detokenize(t, ids, n < 64 ? n : 64));
        char *p = skv_chat_prompt(t, NULL, "hi");
        free(p);
        skv_tokenizer_free(t);
    } else if (gguf_find(f, "tokenizer.ggml.model")) {
        fuzz_expect_error("skv_tokenizer_from_gguf");
    }
    bool has_arch = gguf_find(f, "general.architecture") != NULL;
    gguf_close(f);
    if (has_arch) {   /* the model loader only reads paths */
        const char *path = fuzz_write("model.gguf", data, size);
        skv_clear_error();
        skv_model *m = skv_model_load_gguf(path);
        if (m) {
            const skv_config *c = &m->cfg;
            if (c->dim <= 0 || c->n_layer <= 0 || c->n_head <= 0 || c->n_kv_head <= 0 || c->head_dim <= 0 ||
                c->n_head % c->n_kv_head || c->vocab <= 0 || !m->tok_embd.data || !m->output.data)
                abort();
            skv_model_free(m);
        }
        else fuzz_expect_error("skv_model_load_gguf");
    }
    return 0;
}
