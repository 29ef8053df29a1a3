/* fuzz_tokenize.c: libFuzzer target for encode/decode (runtime/tokenizer/tokenizer.c,
 * tokenizer_pretok.c, unicode_class.c) on arbitrary bytes, with the real SmolLM2 tokenizer
 * (loaded once from $SKV_MODELS_DIR/SmolLM2-135M-Instruct.Q4_1.gguf, default models/).
 *
 * Input: byte 0 = flags (bit 0: parse_special), the rest = text. Checked properties:
 *   - encode never fails, is deterministic, and a short buffer gets the same total count
 *     and the same leading ids;
 *   - every id is in range and decodes;
 *   - round trip: decode(encode(text)) == text whenever every byte of the text has a byte
 *     token (SmolLM2 lacks 21 byte values, which BPE drops like HF does); this holds with
 *     parse_special on or off, since special tokens decode to their own text;
 *   - decoding arbitrary ids (from the same bytes read as int16) never crashes and refuses
 *     out-of-range ids with an error. */
#include "fuzz_common.h"
#include "runtime/format/gguf.h"
#include "runtime/tokenizer/tokenizer.h"

static skv_tokenizer *g_tok;
static bool g_has_byte[256];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    const char *dir = getenv("SKV_MODELS_DIR");
    char path[512];
    snprintf(path, sizeof path, "%s/SmolLM2-135M-Instruct.Q4_1.gguf", dir && dir[0] ? dir : "models");
    gguf_file *f = gguf_open(path);
    if (!f || !(g_tok = skv_tokenizer_from_gguf(f))) {
        fprintf(stderr, "fuzz_tokenize: cannot load the tokenizer: %s\n", skv_last_error());
        exit(1);
    }
    gguf_close(f);
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        int id = -1;
        size_t len = 0;
        int n = skv_tokenize(g_tok, &c, 1, false, &id, 1);
        const char *tb = n == 1 ? skv_token_bytes(g_tok, id, &len) : NULL;
        g_has_byte[b] = tb && len == 1 && tb[0] == c;
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    bool ps = data[0] & 1;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    int cap = (int)len + 8;
    int *ids = malloc((size_t)cap * sizeof(int)), *ids2 = malloc((size_t)cap * sizeof(int));
    if (!ids || !ids2) abort();
    int n = skv_tokenize(g_tok, text, len, ps, ids, cap);
    if (n < 0 || n > cap) abort();     /* byte-level BPE: at most one token per byte */
    int n2 = skv_tokenize(g_tok, text, len, ps, ids2, cap);
    if (n2 != n || (n && memcmp(ids, ids2, (size_t)n * sizeof(int)))) abort();
    int small = n / 2;
    memset(ids2, 0xff, (size_t)cap * sizeof(int));
    if (skv_tokenize(g_tok, text, len, ps, ids2, small) != n) abort();
    if (small && memcmp(ids, ids2, (size_t)small * sizeof(int))) abort();
    if (ids2[small] != -1) abort();    /* nothing written past max */
    if (skv_tokenize(g_tok, text, len, ps, NULL, 0) != n) abort();
    int nv = skv_tok_vocab_size(g_tok);
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= nv) abort();
    char *dec = skv_detokenize(g_tok, ids, n);
    if (!dec) abort();
    bool all_bytes = true;
    for (size_t i = 0; i < len && all_bytes; i++) all_bytes = g_has_byte[(unsigned char)text[i]];
    if (all_bytes && (strlen(dec) != len || memcmp(dec, text, len))) {
        /* NUL bytes in the text make strlen short: compare via the token bytes instead */
        size_t k = 0;
        bool same = true;
        for (int i = 0; i < n && same; i++) {
            size_t l;
            const char *b = skv_token_bytes(g_tok, ids[i], &l);
            same = b && k + l <= len && !memcmp(b, text + k, l);
            k += l;
        }
        if (!same || k != len) {
            fprintf(stderr, "round trip failed (parse_special %d, %zu bytes -> %d ids)\n", ps, len, n);
            abort();
        }
    }
    free(dec);
    /* arbitrary ids */
    int m = (int)(len / 2);
    for (int i = 0; i < m; i++) {
        int16_t v;
        memcpy(&v, text + 2 * i, 2);
        ids2[i] = v;
    }
    skv_clear_error();
    char *d2 = skv_detokenize(g_tok, ids2, m);
    bool bad = false;
    for (int i = 0; i < m; i++) bad |= ids2[i] < 0 || ids2[i] >= nv;
    if (bad != (d2 == NULL)) abort();
    if (!d2) fuzz_expect_error("skv_detokenize");
    free(d2);
    for (int i = 0; i < m; i++) (void)skv_tok_is_stop(g_tok, ids2[i]);
    free(ids);
    free(ids2);
    return 0;
}
