/* fuzz_tokenizer_json.c: libFuzzer target for the Hugging Face tokenizer.json loader
 * (runtime/tokenizer/tokenizer_json.c) and the tokenizer_config.json read beside it.
 *
 * Input: tokenizer.json bytes, optionally followed by the separator line "\n#CONFIG#\n" and
 * the bytes of tokenizer_config.json (absent: no config file). A tokenizer that loads is
 * used once: encode (with and without specials), decode, chat prompt, hash. */
#include "fuzz_common.h"
#include "runtime/tokenizer/tokenizer.h"

static const char SEP[] = "\n#CONFIG#\n";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *cfg = NULL;
    size_t jlen = size, clen = 0;
    for (size_t i = 0; i + sizeof SEP - 1 <= size; i++)
        if (!memcmp(data + i, SEP, sizeof SEP - 1)) {
            jlen = i;
            cfg = data + i + sizeof SEP - 1;
            clen = size - jlen - (sizeof SEP - 1);
            break;
        }
    const char *path = fuzz_write("tokenizer.json", data, jlen);
    const char *cpath = fuzz_path("tokenizer_config.json");
    if (cfg) fuzz_write("tokenizer_config.json", cfg, clen);
    else unlink(cpath);
    skv_clear_error();
    skv_tokenizer *t = skv_tokenizer_from_json(path);
    if (!t) {
        fuzz_expect_error("skv_tokenizer_from_json");
        return 0;
    }
    int nv0 = skv_tok_vocab_size(t);   /* the special ids handed to callers are usable */
    if (nv0 <= 0 || skv_tok_bos(t) < -1 || skv_tok_bos(t) >= nv0 || skv_tok_eos(t) < -1 || skv_tok_eos(t) >= nv0)
        abort();
    static const char txt[] = "Hi <|im_start|>user\n 12345 don't\xc3\xa9\xff<|im_end|>";
    int ids[128];
    for (int ps = 0; ps < 2; ps++) {
        int n = skv_tokenize(t, txt, sizeof txt - 1, ps, ids, 128);
        if (n < 0) abort();     /* encoding never fails on a loaded tokenizer */
        if (n > 128) n = 128;
        char *d = skv_detokenize(t, ids, n);
        if (!d) abort();        /* ids from encode are always decodable */
        free(d);
    }
    int nv = skv_tok_vocab_size(t);
    size_t len;
    (void)skv_token_bytes(t, nv - 1, &len);
    (void)skv_token_bytes(t, nv, &len);
    free(skv_chat_prompt(t, "sys", "user"));
    (void)skv_tokenizer_hash(t);
    (void)skv_tokenizer_name(t);
    (void)skv_tok_is_stop(t, skv_tok_eos(t));
    (void)skv_tok_add_bos(t);
    skv_tokenizer_free(t);
    return 0;
}
