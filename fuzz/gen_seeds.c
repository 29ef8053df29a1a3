/* gen_seeds.c: writes the committed seed corpora fuzz/corpus/<target>/ (run from the repo
 * root: `make fuzz-seeds`). Each target gets a few tiny valid inputs, built with the test
 * writers (tests/support/gguf_writer.c, tiny_model.c) and the library's own writers, plus a
 * few corrupt ones. Deterministic: rerunning gives the same files. Total well under 1 MB. */
#include "calibrate/calib.h"
#include "runtime/format/profile.h"
#include "calibrate/mapping.h"
#include "runtime/format/secfile.h"
#include "runtime/tokenizer/tokenizer_internal.h"
#include "common/util.h"
#include "kernels/cpu/quant.h"
#include "tests/support/gguf_writer.h"
#include "tests/support/tiny_model.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void die(const char *what) {
    fprintf(stderr, "gen_seeds: %s: %s\n", what, skv_last_error());
    exit(1);
}

static void put(const char *target, const char *name, const void *data, size_t n) {
    char p[512];
    snprintf(p, sizeof p, "fuzz/corpus/%s", target);
    mkdir("fuzz/corpus", 0755);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "fuzz/corpus/%s/%s", target, name);
    FILE *f = fopen(p, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f) != 0) die(p);
}
static void put_str(const char *target, const char *name, const char *s) { put(target, name, s, strlen(s)); }

static char *slurp(const char *path, size_t *n) {
    char *b = skv_read_file(path, n);
    if (!b) die(path);
    return b;
}

/* ---------------------------------------------------------------- tokenizer vocabulary */

/* Byte-level spelling of raw bytes (GPT-2 byte -> unicode), NUL-terminated, static. */
static const char *spell(const char *raw) {
    static char out[8][64];
    static int k;
    k = (k + 1) % 8;
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)raw; *p; p++)
        o += (size_t)skv_utf8_encode(skv_byte_to_unicode(*p), out[k] + o);
    out[k][o] = 0;
    return out[k];
}

#define N_EXTRA 6
static const char *EXTRA[N_EXTRA] = { " t", "he", " the", "<|endoftext|>", "<|im_start|>", "<|im_end|>" };
static const char *MERGES_RAW[3][2] = { { " ", "t" }, { "h", "e" }, { " t", "he" } };
static const char CHATML[] =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content']"
    " + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/* A GGUF with a 262-token byte-level BPE tokenizer. */
static gw_writer *tokenizer_gguf(const char *pre) {
    gw_writer *w = gw_new();
    static char toks_buf[256][8];
    const char *toks[256 + N_EXTRA];
    int32_t types[256 + N_EXTRA];
    for (int b = 0; b < 256; b++) {
        int n = skv_utf8_encode(skv_byte_to_unicode((uint8_t)b), toks_buf[b]);
        toks_buf[b][n] = 0;
        toks[b] = toks_buf[b];
        types[b] = SKV_TOKT_NORMAL;
    }
    static char ex[N_EXTRA][64];
    for (int i = 0; i < N_EXTRA; i++) {
        snprintf(ex[i], sizeof ex[i], "%s", i < 3 ? spell(EXTRA[i]) : EXTRA[i]);
        toks[256 + i] = ex[i];
        types[256 + i] = i < 3 ? SKV_TOKT_NORMAL : SKV_TOKT_CONTROL;
    }
    static char mg[3][64];
    const char *merges[3];
    for (int i = 0; i < 3; i++) {
        snprintf(mg[i], sizeof mg[i], "%s %s", spell(MERGES_RAW[i][0]), spell(MERGES_RAW[i][1]));
        merges[i] = mg[i];
    }
    if (gw_add_str(w, "general.architecture", "llama") || gw_add_str(w, "tokenizer.ggml.model", "gpt2") ||
        gw_add_str(w, "tokenizer.ggml.pre", pre) ||
        gw_add_arr_str(w, "tokenizer.ggml.tokens", toks, 256 + N_EXTRA) ||
        gw_add_arr(w, "tokenizer.ggml.token_type", GGUF_INT32, types, 256 + N_EXTRA) ||
        gw_add_arr_str(w, "tokenizer.ggml.merges", merges, 3) ||
        gw_add_u32(w, "tokenizer.ggml.bos_token_id", 256 + 4) || gw_add_u32(w, "tokenizer.ggml.eos_token_id", 256 + 5) ||
        gw_add_bool(w, "tokenizer.ggml.add_bos_token", false) || gw_add_str(w, "tokenizer.chat_template", CHATML))
        die("tokenizer gguf");
    return w;
}

static void put_gw(const char *name, gw_writer *w) {
    size_t n;
    uint8_t *b = gw_build(w, &n);
    if (!b) die("gw_build");
    put("gguf", name, b, n);
    free(b);
}

static void seeds_gguf(void) {
    gw_writer *w = tokenizer_gguf("smollm");
    put_gw("tokenizer_smollm.gguf", w);
    size_t n;
    uint8_t *b = gw_build(w, &n);
    put("gguf", "corrupt_truncated.gguf", b, n / 2);
    memcpy(b, "GGUH", 4);
    put("gguf", "corrupt_magic.gguf", b, 64);
    free(b);
    gw_free(w);
    w = tokenizer_gguf("qwen2");
    put_gw("tokenizer_qwen2.gguf", w);
    gw_free(w);

    /* every value type, arrays of each, tensors of a few types, alignment 64 */
    w = gw_new();
    gw_set_alignment(w, 64);
    gw_add_u8(w, "t.u8", 200); gw_add_i8(w, "t.i8", -5); gw_add_u16(w, "t.u16", 60000);
    gw_add_i16(w, "t.i16", -3000); gw_add_u32(w, "t.u32", 4000000000u); gw_add_i32(w, "t.i32", -7);
    gw_add_u64(w, "t.u64", 1ull << 40); gw_add_i64(w, "t.i64", -(1ll << 40)); gw_add_f32(w, "t.f32", 1.5f);
    gw_add_f64(w, "t.f64", -2.25); gw_add_bool(w, "t.bool", true); gw_add_str(w, "t.str", "hello");
    int32_t ai[3] = { 1, -2, 3 };
    float af[2] = { 0.5f, 2.0f };
    uint8_t ab[2] = { 0, 1 };
    const char *as[2] = { "a", "bc" };
    gw_add_arr(w, "t.arr_i32", GGUF_INT32, ai, 3); gw_add_arr(w, "t.arr_f32", GGUF_FLOAT32, af, 2);
    gw_add_arr(w, "t.arr_bool", GGUF_BOOL, ab, 2); gw_add_arr_str(w, "t.arr_str", as, 2);
    float x[64];
    for (int i = 0; i < 64; i++) x[i] = (float)i / 8 - 4;
    gw_add_tensor_f32(w, "f32", SKV_F32, 2, (int64_t[]){ 4, 2 }, x);
    gw_add_tensor_f32(w, "f16", SKV_F16, 1, (int64_t[]){ 8 }, x);
    gw_add_tensor_f32(w, "q8_0", SKV_Q8_0, 2, (int64_t[]){ 32, 2 }, x);
    float y[256];
    for (int i = 0; i < 256; i++) y[i] = (float)(i % 17) - 8;
    gw_add_tensor_f32(w, "q4_k", SKV_Q4_K, 1, (int64_t[]){ 256 }, y);
    put_gw("all_types.gguf", w);
    w->version = 1;
    put_gw("corrupt_version1.gguf", w);
    w->version = 3;
    w->n_kv_set = true; w->n_kv = 1ull << 60;
    put_gw("corrupt_nkv.gguf", w);
    gw_free(w);

    /* a tiny whole model (tied embeddings, Q4_0 matrices) for the model loader */
    tiny_model *m = tiny_model_new(SKV_ARCH_LLAMA, 1, 1, SKV_F32);
    if (!m || tiny_model_write_gguf(m, "/tmp/skv_gen_seeds_model.gguf", SKV_Q4_0)) die("tiny model gguf");
    char *t = slurp("/tmp/skv_gen_seeds_model.gguf", &n);
    put("gguf", "tiny_llama_q4_0.gguf", t, n);
    free(t);
    remove("/tmp/skv_gen_seeds_model.gguf");
    tiny_model_free(m);
}

/* ---------------------------------------------------------------- tokenizer.json */

static void json_escape(char *out, size_t cap, const char *s) {
    size_t o = 0;
    for (; *s && o + 8 < cap; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') { out[o++] = '\\'; out[o++] = (char)c; }
        else if (c < 0x20) o += (size_t)snprintf(out + o, cap - o, "\\u%04x", c);
        else out[o++] = (char)c;
    }
    out[o] = 0;
}

static const char *PRETOK_SMOLLM =
    "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Digits\",\"individual_digits\":true},"
    "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":true}]}";
static const char *PRETOK_QWEN2 =
    "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":"
    "\"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*"
    "|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"},\"behavior\":\"Isolated\",\"invert\":false},"
    "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":false,\"use_regex\":false}]}";

static char *tokenizer_json(const char *pretok, int array_merges, const char *normalizer) {
    size_t cap = 64 * 1024, o = 0;
    char *s = malloc(cap), esc[128];
    o += (size_t)snprintf(s + o, cap - o, "{\"version\":\"1.0\",\"added_tokens\":[");
    for (int i = 3; i < N_EXTRA; i++)
        o += (size_t)snprintf(s + o, cap - o, "%s{\"id\":%d,\"content\":\"%s\",\"single_word\":false,"
                              "\"special\":true}", i > 3 ? "," : "", 256 + i, EXTRA[i]);
    o += (size_t)snprintf(s + o, cap - o, "],\"normalizer\":%s,\"pre_tokenizer\":%s,"
                          "\"model\":{\"type\":\"BPE\",\"vocab\":{", normalizer, pretok);
    for (int b = 0; b < 256; b++) {
        char one[8];
        one[skv_utf8_encode(skv_byte_to_unicode((uint8_t)b), one)] = 0;
        json_escape(esc, sizeof esc, one);
        o += (size_t)snprintf(s + o, cap - o, "%s\"%s\":%d", b ? "," : "", esc, b);
    }
    for (int i = 0; i < N_EXTRA; i++) {
        json_escape(esc, sizeof esc, i < 3 ? spell(EXTRA[i]) : EXTRA[i]);
        o += (size_t)snprintf(s + o, cap - o, ",\"%s\":%d", esc, 256 + i);
    }
    o += (size_t)snprintf(s + o, cap - o, "},\"merges\":[");
    for (int i = 0; i < 3; i++) {
        char a[64], b[64];
        json_escape(a, sizeof a, spell(MERGES_RAW[i][0]));
        json_escape(b, sizeof b, spell(MERGES_RAW[i][1]));
        if (array_merges) o += (size_t)snprintf(s + o, cap - o, "%s[\"%s\",\"%s\"]", i ? "," : "", a, b);
        else o += (size_t)snprintf(s + o, cap - o, "%s\"%s %s\"", i ? "," : "", a, b);
    }
    snprintf(s + o, cap - o, "]}}\n");
    return s;
}

static void seeds_tokenizer_json(void) {
    char *a = tokenizer_json(PRETOK_SMOLLM, 0, "null");
    put_str("tokenizer_json", "smollm.json", a);
    /* with a tokenizer_config.json (separator line, see fuzz_tokenizer_json.c) */
    size_t la = strlen(a);
    const char *cfg = "\n#CONFIG#\n{\"add_bos_token\":false,\"bos_token\":\"<|im_start|>\","
                      "\"eos_token\":{\"content\":\"<|im_end|>\"},\"chat_template\":[{\"name\":\"default\","
                      "\"template\":\"{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\\\n' + "
                      "message['content'] + '<|im_end|>' + '\\\\n'}}{% endfor %}{% if add_generation_prompt %}"
                      "{{ '<|im_start|>assistant\\\\n' }}{% endif %}\"}]}";
    char *ac = malloc(la + strlen(cfg) + 1);
    memcpy(ac, a, la);
    strcpy(ac + la, cfg);
    put_str("tokenizer_json", "smollm_with_config.json", ac);
    put("tokenizer_json", "corrupt_truncated.json", a, la / 2);
    free(ac);
    free(a);
    a = tokenizer_json(PRETOK_QWEN2, 1, "{\"type\":\"NFC\"}");
    put_str("tokenizer_json", "qwen2_array_merges.json", a);
    free(a);
    a = tokenizer_json("{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true}", 0, "null");
    put_str("tokenizer_json", "gpt2.json", a);
    free(a);
    put_str("tokenizer_json", "corrupt_not_object.json", "[1,2,3]");
    put_str("tokenizer_json", "corrupt_bad_merge.json",
            "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1},\"merges\":[\"a c\"]},"
            "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"use_regex\":true}}");
}

/* ---------------------------------------------------------------- encode/decode texts */

static void seeds_tokenize(void) {
    static const struct { const char *name; const char *text; } T[] = {
        { "hello", "\x01Hello world! The quick brown fox." },
        { "chat", "\x01<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n" },
        { "chat_nospecial", "\x00<|im_start|>system\nYou are helpful<|im_end|>" },
        { "unicode", "\x01na\xc3\xafve caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xf0\x9f\x98\x80 \xd0\xbf\xd1\x80\xd0\xb8" },
        { "digits_space", "\x01 12345678  \t\n\n  x   don't I'LL we've" },
        { "invalid_utf8", "\x01\xff\xfe\xc0\x80 \xed\xa0\x80 \xe2\x82 ok" },
        { "code", "\x00int main(void) {\n    return printf(\"%d\\n\", 42);\n}\n" },
    };
    for (size_t i = 0; i < sizeof T / sizeof T[0]; i++)
        put("tokenize", T[i].name, T[i].text, 1 + strlen(T[i].text + 1));
}

/* ---------------------------------------------------------------- safetensors, config.json */

static void seeds_safetensors_hf(void) {
    float d[24];
    for (int i = 0; i < 24; i++) d[i] = (float)i * 0.25f - 3;
    tiny_tensor t[3] = {
        { "a.weight", SKV_F32, 2, { 2, 3 }, d },
        { "b.bias", SKV_F16, 1, { 4 }, d },
        { "c", SKV_BF16, 2, { 3, 4 }, d },
    };
    const char *p = "/tmp/skv_gen_seeds.safetensors";
    size_t n;
    if (tiny_write_safetensors(p, t, 3)) die("safetensors");
    char *b = slurp(p, &n);
    put("safetensors", "three_types.safetensors", b, n);
    put("safetensors", "corrupt_truncated.safetensors", b, n - 5);
    free(b);
    const char *h1 = "{\"__metadata__\":{\"format\":\"pt\"},\"x\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[0,16]}}";
    tiny_write_raw(p, strlen(h1), h1, strlen(h1), d, 16);
    b = slurp(p, &n);
    put("safetensors", "metadata_i64.safetensors", b, n);
    free(b);
    const char *h2 = "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"y\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}";
    tiny_write_raw(p, strlen(h2), h2, strlen(h2), d, 12);
    b = slurp(p, &n);
    put("safetensors", "corrupt_overlap.safetensors", b, n);
    free(b);
    tiny_write_raw(p, 1ull << 40, h2, strlen(h2), d, 12);
    b = slurp(p, &n);
    put("safetensors", "corrupt_header_len.safetensors", b, n);
    free(b);
    remove(p);

    /* config.json of the model fuzz_hf_config writes (llama, 2 layers, dim 64, vocab 300) */
    const char *dir = "/tmp/skv_gen_seeds_hf";
    mkdir(dir, 0700);
    tiny_model *m = tiny_model_new(SKV_ARCH_LLAMA, 7, 0, SKV_F32);
    if (!m || tiny_model_write_hf(m, dir, SKV_F16, 1)) die("tiny hf");
    b = slurp("/tmp/skv_gen_seeds_hf/config.json", &n);
    put("hf_config", "tiny_llama.json", b, n);
    char *idx = malloc(n + 256);
    memcpy(idx, b, n);
    snprintf(idx + n, 256, "\n#INDEX#\n{\"metadata\":{},\"weight_map\":{\"model.embed_tokens.weight\":\"model.safetensors\","
             "\"model.norm.weight\":\"model.safetensors\"}}");
    put_str("hf_config", "tiny_llama_index.json", idx);
    free(idx);
    free(b);
    tiny_model_free(m);
    remove("/tmp/skv_gen_seeds_hf/config.json");
    remove("/tmp/skv_gen_seeds_hf/model.safetensors");
    remove(dir);
    put_str("hf_config", "qwen2_rope.json",
            "{\"model_type\":\"qwen2\",\"hidden_size\":64,\"intermediate_size\":96,\"num_hidden_layers\":2,"
            "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"vocab_size\":300,\"rope_parameters\":"
            "{\"rope_type\":\"default\",\"rope_theta\":1000000.0},\"tie_word_embeddings\":true}");
    put_str("hf_config", "corrupt_types.json",
            "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64.5,\"num_attention_heads\":0}");
}

/* ---------------------------------------------------------------- calibration, profile */

/* "raw" seed: 0x00 + the file; "built" seed: 0x01 + header JSON + NUL + (id, len, bytes)* */
static void put_secfile(const char *target, const char *name, const char *path, const char magic[8], uint32_t ver) {
    size_t n;
    char *b = slurp(path, &n);
    char *r = malloc(n + 1);
    r[0] = 0;
    memcpy(r + 1, b, n);
    char nm[128];
    snprintf(nm, sizeof nm, "raw_%s", name);
    put(target, nm, r, n + 1);
    free(r);
    free(b);
    skv_secfile *f = skv_secfile_read(path, magic, ver, target);
    if (!f) die(path);
    size_t cap = 2 + f->header_len, o = 0;
    for (int i = 0; i < f->n; i++) cap += 8 + f->secs[i].size;
    char *s = malloc(cap);
    s[o++] = 1;
    memcpy(s + o, f->header, f->header_len);
    o += f->header_len;
    s[o++] = 0;
    for (int i = 0; i < f->n; i++) {
        uint32_t id = f->secs[i].id, len = (uint32_t)f->secs[i].size;
        memcpy(s + o, &id, 4);
        memcpy(s + o + 4, &len, 4);
        memcpy(s + o + 8, f->secs[i].data, len);
        o += 8 + len;
    }
    snprintf(nm, sizeof nm, "built_%s", name);
    put(target, nm, s, o);
    free(s);
    skv_secfile_free(f);
}

static skv_model_fp mkfp(const char *arch, int L, int H, const char *wh) {
    skv_model_fp fp;
    memset(&fp, 0, sizeof fp);
    snprintf(fp.arch, sizeof fp.arch, "%s", arch);
    snprintf(fp.name, sizeof fp.name, "%s-%dx%d", arch, L, H);
    fp.n_layer = L; fp.n_head = H; fp.n_kv_head = 1; fp.head_dim = 16; fp.dim = 16 * H; fp.vocab = 1000;
    snprintf(fp.tokenizer_hash, sizeof fp.tokenizer_hash, "0123456789abcdef");
    snprintf(fp.weight_hash, sizeof fp.weight_hash, "%s", wh);
    return fp;
}

static void seeds_calib_profile(void) {
    skv_model_fp llm = mkfp("qwen2", 3, 2, "aa11"), slm = mkfp("qwen2", 2, 3, "bb22");
    skv_calib_settings s;
    memset(&s, 0, sizeof s);
    s.window = 24; s.windows_planned = 3; s.topk = 4; s.sinks = 4; s.last_rows = 1;
    s.metrics = SKV_METRIC_BIT(SKV_METRIC_JACCARD) | SKV_METRIC_BIT(SKV_METRIC_COSINE) | SKV_METRIC_BIT(SKV_METRIC_ROWCOS);
    s.seed = 0x1234abcdull; s.shard_count = 1; s.n_corpora = 1;
    snprintf(s.corpora[0].name, sizeof s.corpora[0].name, "corpus.txt");
    memset(s.corpora[0].sha256, 'a', 64);
    s.corpora[0].bytes = 12345;
    skv_calib *c = skv_calib_new(&slm, &llm, &s, 0, "gen_seeds");
    if (!c) die("calib");
    size_t n = (size_t)c->n_llm * c->n_slm * c->n_metrics;
    double *S = malloc(n * sizeof *S);
    uint64_t r = 12345;
    for (int w = 0; w < 3; w++) {
        for (size_t i = 0; i < n; i++) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            S[i] = (double)((r >> 33) % 2001) / 1000.0 - 1.0;
        }
        if (w != 1 && skv_calib_add_values(c, w, 24, S)) die("add_values");
    }
    free(S);
    const char *cp = "/tmp/skv_gen_seeds.skvcalib", *pp = "/tmp/skv_gen_seeds.skvprof";
    if (skv_calib_write(c, cp)) die("calib write");
    put_secfile("calib", "three_metrics", cp, "SKVCALIB", SKV_CALIB_VERSION);
    skv_profile *p = skv_profile_build(c, SKV_METRIC_JACCARD, 0.05, 0, "gen_seeds");
    if (!p || skv_profile_write(p, pp)) die("profile");
    put_secfile("profile", "jaccard", pp, "SKVPROF\0", SKV_PROFILE_VERSION);
    skv_profile_free(p);
    p = skv_profile_build(c, SKV_METRIC_COSINE, 0.2, 1, "gen_seeds");
    if (!p || skv_profile_write(p, pp)) die("profile");
    put_secfile("profile", "cosine_depth1", pp, "SKVPROF\0", SKV_PROFILE_VERSION);
    skv_profile_free(p);
    skv_calib_free(c);
    /* a corrupt one: flipped byte in the raw file (checksums are repaired by the fuzzer) */
    size_t len;
    char *b = slurp(cp, &len);
    char *raw = malloc(len + 1);
    raw[0] = 0;
    memcpy(raw + 1, b, len);
    raw[1 + 50] ^= 0x20;
    put("calib", "raw_flipped_header", raw, len + 1);
    put("calib", "raw_truncated", raw, len / 2);
    free(raw);
    free(b);
    remove(cp);
    remove(pp);
}

int main(void) {
    seeds_gguf();
    seeds_tokenizer_json();
    seeds_tokenize();
    seeds_safetensors_hf();
    seeds_calib_profile();
    printf("seeds written to fuzz/corpus/\n");
    return 0;
}
