/* types.c: the weight type table (name, weights and bytes per block) and row sizes, for
 * every backend (kernels/types.h). */
#include "types.h"
#include "common/util.h"

typedef struct {
    const char *name;
    int block;       /* weights per block */
    size_t bytes;    /* bytes per block */
    bool supported;  /* dequantiser exists */
} type_info;

static const type_info g_types[SKV_TYPE_COUNT] = {
    [SKV_F32]  = { "F32", 1, 4, true },
    [SKV_F16]  = { "F16", 1, 2, true },
    [SKV_Q4_0] = { "Q4_0", QK4_0, sizeof(block_q4_0), true },
    [SKV_Q4_1] = { "Q4_1", QK4_1, sizeof(block_q4_1), true },
    [4]        = { "Q4_2(removed)", 0, 0, false },
    [5]        = { "Q4_3(removed)", 0, 0, false },
    [SKV_Q5_0] = { "Q5_0", QK5_0, sizeof(block_q5_0), true },
    [SKV_Q5_1] = { "Q5_1", QK5_1, sizeof(block_q5_1), true },
    [SKV_Q8_0] = { "Q8_0", QK8_0, sizeof(block_q8_0), true },
    [SKV_Q8_1] = { "Q8_1", 32, 36, false },
    [SKV_Q2_K] = { "Q2_K", QK_K, 84, false },
    [SKV_Q3_K] = { "Q3_K", QK_K, 110, false },
    [SKV_Q4_K] = { "Q4_K", QK_K, sizeof(block_q4_K), true },
    [SKV_Q5_K] = { "Q5_K", QK_K, sizeof(block_q5_K), true },
    [SKV_Q6_K] = { "Q6_K", QK_K, sizeof(block_q6_K), true },
    [SKV_Q8_K] = { "Q8_K", QK_K, sizeof(block_q8_K), true },
    [16] = { "IQ2_XXS", 0, 0, false }, [17] = { "IQ2_XS", 0, 0, false },
    [18] = { "IQ3_XXS", 0, 0, false }, [19] = { "IQ1_S", 0, 0, false },
    [20] = { "IQ4_NL", 0, 0, false },  [21] = { "IQ3_S", 0, 0, false },
    [22] = { "IQ2_S", 0, 0, false },   [23] = { "IQ4_XS", 0, 0, false },
    [24] = { "I8", 0, 0, false },      [25] = { "I16", 0, 0, false },
    [26] = { "I32", 0, 0, false },     [27] = { "I64", 0, 0, false },
    [28] = { "F64", 0, 0, false },     [29] = { "IQ1_M", 0, 0, false },
    [SKV_BF16] = { "BF16", 1, 2, true },
};

_Static_assert(sizeof(block_q8_K) == 292, "q8_K layout");

static const type_info *info(int type) {
    if (type < 0 || type >= SKV_TYPE_COUNT) return NULL;
    return &g_types[type];
}

bool skv_type_supported(int type) {
    const type_info *t = info(type);
    return t && t->supported;
}

const char *skv_type_name(int type) {
    const type_info *t = info(type);
    return t && t->name ? t->name : "unknown";
}

int skv_type_block(int type) {
    const type_info *t = info(type);
    return t && t->supported ? t->block : 0;
}

size_t skv_type_block_bytes(int type) {
    const type_info *t = info(type);
    return t && t->supported ? t->bytes : 0;
}

size_t skv_row_bytes(int type, int64_t n) {
    const type_info *t = info(type);
    if (!t || !t->supported) {
        skv_error("unsupported tensor type %s (%d)", skv_type_name(type), type);
        return 0;
    }
    if (n <= 0 || n % t->block != 0) {
        skv_error("row of %lld weights is not a positive multiple of the %s block size %d",
                  (long long)n, t->name, t->block);
        return 0;
    }
    size_t out;
    if (!skv_mul_ok((size_t)(n / t->block), t->bytes, &out)) {
        skv_error("row of %lld %s weights: byte size overflows", (long long)n, t->name);
        return 0;
    }
    return out;
}
